"""An FA2 backward that does 5 block matmuls, not the solution's 7: issue 42's next step toward 75% of SDPA, to be
measured beside the solution (scripts/design_bench.py flash-backward) before it replaces anything.

The solution's two kernels each own what they write, so its dQ kernel computes S and dP again (7 matmuls where the
FLOP count credits 5; about 71% of one kernel's rate is where that structure stops). Here, as in FlashAttention-2
and -3, one program per block of keys walks the query blocks, accumulates dK and dV on chip and adds each step's
dS K into a float32 dQ in global memory atomically: with pointers (`red.add` per element) or, on Hopper, with the
tensor memory accelerator's reduce-add of a whole tile (`TensorDescriptor.atomic_add`, FlashAttention-3's way;
`TMA=True`). A first kernel computes delta = rowsum(O * dO); a last one scales the float32 dQ into `dq`. The extra
memory, float32 dQ and delta, is 4 * B * H * N * (d + 1) bytes: within the exercise's memory bar.

Checked on the CPU under Triton's interpreter (pointer path) by tests/test_flash_attention_v2.py; the TMA path only
on a GPU (the interpreter has no descriptor reduce)."""

from __future__ import annotations

import importlib.util
import math
import os
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

_SOLUTION = Path(__file__).resolve().parents[1] / "solutions/flash_attention_v2_backward/flash_attention_v2_backward.py"
_spec = importlib.util.spec_from_file_location("fa2_backward_atomic_helpers", _SOLUTION)
_helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_helpers)
_load_rows, _row_stats = _helpers._load_rows, _helpers._row_stats  # the solution's own @triton.jit helpers


@triton.jit
def _bwd_delta(
    O, DO, Delta, H, n_ctx, so_b, so_h, so_n, so_d, sd_b, sd_h, sd_n, sd_d, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr
):
    """delta = rowsum(O * dO) in float32 for one block of rows of one head."""
    off_bh = tl.program_id(1)
    off_b, off_h = (off_bh // H).to(tl.int64), (off_bh % H).to(tl.int64)
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    o = _load_rows(O + off_b * so_b + off_h * so_h, rows, n_ctx, so_n, so_d, HEAD_DIM, True)
    do = _load_rows(DO + off_b * sd_b + off_h * sd_h, rows, n_ctx, sd_n, sd_d, HEAD_DIM, True)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    tl.store(Delta + off_bh.to(tl.int64) * n_ctx + rows, delta, mask=rows < n_ctx)


@triton.jit
def _steps(
    dk,
    dv,
    k,
    v,
    Q,
    DO,
    Lse,
    Delta,
    DQacc,
    dq_desc,
    off_bh,
    lo,
    hi,
    offs_n,
    n_ctx,
    qk_scale,
    stride_qn,
    stride_qd,
    stride_don,
    stride_dod,
    stride_ln,
    BLOCK_M: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    CAUSAL: tl.constexpr,
    MASKED: tl.constexpr,
    TMA: tl.constexpr,
):
    """Query blocks lo .. hi for one block of keys: dV += P^T dO, dK += dS^T Q, and dQ += dS K added atomically."""
    cols = tl.arange(0, HEAD_DIM)
    for start_m in range(lo, hi, BLOCK_M):
        start_m = tl.multiple_of(start_m, BLOCK_M)
        rows = start_m + tl.arange(0, BLOCK_M)
        q = _load_rows(Q, rows, n_ctx, stride_qn, stride_qd, HEAD_DIM, MASKED)
        do = _load_rows(DO, rows, n_ctx, stride_don, stride_dod, HEAD_DIM, MASKED)
        lse2, delta = _row_stats(Lse, Delta, rows, n_ctx, stride_ln, MASKED)
        p_t = tl.math.exp2(tl.dot(k, tl.trans(q)) * qk_scale - lse2[None, :])
        if MASKED and CAUSAL:  # query >= key (rows past n_ctx already give P = 0)
            p_t = tl.where(rows[None, :] >= offs_n[:, None], p_t, 0.0)
        dv = tl.dot(p_t.to(do.dtype), do, dv)
        dp_t = tl.dot(v, tl.trans(do))
        ds_t = (p_t * (dp_t - delta[None, :])).to(q.dtype)
        dk = tl.dot(ds_t, q, dk)
        dq = tl.dot(tl.trans(ds_t), k)  # keys past n_ctx loaded as 0: they add nothing
        if TMA:  # the whole tile in one bulk reduce-add; rows past n_ctx are clipped by the descriptor
            dq_desc.atomic_add([off_bh, start_m, 0], dq.reshape(1, BLOCK_M, HEAD_DIM))
        else:
            ptrs = DQacc + rows[:, None] * HEAD_DIM + cols[None, :]
            tl.atomic_add(ptrs, dq, mask=rows[:, None] < n_ctx, sem="relaxed")
    return dk, dv


def _configs():
    if os.environ.get("TRITON_INTERPRET") == "1":
        return [triton.Config({"BLOCK_M": 32, "BLOCK_N": 64}, num_warps=4, num_stages=1)]
    tiles = [(64, 128, 8, 3), (64, 128, 8, 2), (32, 128, 8, 3), (32, 128, 4, 5), (64, 64, 4, 3), (32, 64, 4, 3)]
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s) for bm, bn, w, s in tiles]


def _dq_shape(nargs):
    """A descriptor's block is a compile-time shape: set it to the configuration being run."""
    if isinstance(nargs["DQdesc"], TensorDescriptor):
        nargs["DQdesc"].block_shape = [1, nargs["BLOCK_M"], nargs["HEAD_DIM"]]


def _with_block_shape(configs):
    for config in configs:
        config.pre_hook = _dq_shape
    return configs


# reset_to_zero: each of the autotuner's timed runs adds into DQacc, so it is zeroed before each
@triton.autotune(
    configs=_with_block_shape(_configs()), key=["N_KEY", "HEAD_DIM", "CAUSAL", "TMA"], reset_to_zero=["DQacc"]
)
@triton.jit
def _bwd_fused(
    Q,
    K,
    V,
    Lse,
    DO,
    DK,
    DV,
    Delta,
    DQacc,
    DQdesc,
    sm_scale,
    stride_qb,
    stride_qh,
    stride_qn,
    stride_qd,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_kd,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_vd,
    stride_lb,
    stride_lh,
    stride_ln,
    stride_dob,
    stride_doh,
    stride_don,
    stride_dod,
    stride_dkb,
    stride_dkh,
    stride_dkn,
    stride_dkd,
    stride_dvb,
    stride_dvh,
    stride_dvn,
    stride_dvd,
    H,
    n_ctx,
    N_KEY,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    TMA: tl.constexpr,
):
    tl.static_assert(BLOCK_N % BLOCK_M == 0)  # the diagonal starts on a query-block boundary
    start_n = tl.program_id(0) * BLOCK_N
    off_bh = tl.program_id(1)
    off_b, off_h = (off_bh // H).to(tl.int64), (off_bh % H).to(tl.int64)
    offs_n = start_n + tl.arange(0, BLOCK_N)
    k = _load_rows(K + off_b * stride_kb + off_h * stride_kh, offs_n, n_ctx, stride_kn, stride_kd, HEAD_DIM, True)
    v = _load_rows(V + off_b * stride_vb + off_h * stride_vh, offs_n, n_ctx, stride_vn, stride_vd, HEAD_DIM, True)
    Q += off_b * stride_qb + off_h * stride_qh
    DO += off_b * stride_dob + off_h * stride_doh
    Lse += off_b * stride_lb + off_h * stride_lh
    Delta += off_bh.to(tl.int64) * n_ctx
    DQacc += off_bh.to(tl.int64) * n_ctx * HEAD_DIM
    qk_scale = sm_scale * 1.4426950408889634
    dk = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    full_end = (n_ctx // BLOCK_M) * BLOCK_M
    below = 0
    if CAUSAL:  # queries on the diagonal mask; those below it see every key of the block
        dk, dv = _steps(
            dk,
            dv,
            k,
            v,
            Q,
            DO,
            Lse,
            Delta,
            DQacc,
            DQdesc,
            off_bh,
            start_n,
            tl.minimum(start_n + BLOCK_N, n_ctx),
            offs_n,
            n_ctx,
            qk_scale,
            stride_qn,
            stride_qd,
            stride_don,
            stride_dod,
            stride_ln,
            BLOCK_M,
            HEAD_DIM,
            CAUSAL,
            True,
            TMA,
        )
        below = start_n + BLOCK_N
    dk, dv = _steps(
        dk,
        dv,
        k,
        v,
        Q,
        DO,
        Lse,
        Delta,
        DQacc,
        DQdesc,
        off_bh,
        below,
        full_end,
        offs_n,
        n_ctx,
        qk_scale,
        stride_qn,
        stride_qd,
        stride_don,
        stride_dod,
        stride_ln,
        BLOCK_M,
        HEAD_DIM,
        CAUSAL,
        False,
        TMA,
    )
    dk, dv = _steps(
        dk,
        dv,
        k,
        v,
        Q,
        DO,
        Lse,
        Delta,
        DQacc,
        DQdesc,
        off_bh,
        tl.maximum(below, full_end),
        n_ctx,
        offs_n,
        n_ctx,
        qk_scale,
        stride_qn,
        stride_qd,
        stride_don,
        stride_dod,
        stride_ln,
        BLOCK_M,
        HEAD_DIM,
        False,
        True,
        TMA,
    )  # the ragged last block: below the diagonal
    cols = tl.arange(0, HEAD_DIM)[None, :]
    keep = offs_n[:, None] < n_ctx
    dk_ptrs = DK + off_b * stride_dkb + off_h * stride_dkh + offs_n[:, None] * stride_dkn + cols * stride_dkd
    tl.store(dk_ptrs, (dk * sm_scale).to(k.dtype), mask=keep)
    dv_ptrs = DV + off_b * stride_dvb + off_h * stride_dvh + offs_n[:, None] * stride_dvn + cols * stride_dvd
    tl.store(dv_ptrs, dv.to(v.dtype), mask=keep)


@triton.jit
def _bwd_dq_out(DQacc, DQ, sm_scale, H, n_ctx, s_b, s_h, s_n, s_d, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr):
    """dQ = sm_scale * the float32 sum, in dq's dtype and strides."""
    off_bh = tl.program_id(1)
    off_b, off_h = (off_bh // H).to(tl.int64), (off_bh % H).to(tl.int64)
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    cols = tl.arange(0, HEAD_DIM)[None, :]
    keep = rows[:, None] < n_ctx
    acc = tl.load(DQacc + off_bh.to(tl.int64) * n_ctx * HEAD_DIM + rows[:, None] * HEAD_DIM + cols, mask=keep)
    ptrs = DQ + off_b * s_b + off_h * s_h + rows[:, None] * s_n + cols * s_d
    tl.store(ptrs, (acc * sm_scale).to(DQ.dtype.element_ty), mask=keep)


def flash_attention_v2_backward(q, k, v, out, lse, dout, dq, dk, dv, causal: bool, tma: bool = False) -> None:
    """The solution's signature (exercises/flash_attention_v2_backward); `tma`: dQ added by TMA reduce (Hopper)."""
    batch, heads, n_ctx, head_dim = q.shape
    n_key = max(16, triton.next_power_of_2(n_ctx))
    delta = torch.empty((batch * heads, n_ctx), device=q.device, dtype=torch.float32)
    dq_acc = torch.zeros((batch * heads, n_ctx, head_dim), device=q.device, dtype=torch.float32)
    dq_desc = TensorDescriptor(dq_acc, list(dq_acc.shape), list(dq_acc.stride()), [1, 16, head_dim]) if tma else dq_acc
    rows = (triton.cdiv(n_ctx, 64), batch * heads)
    _bwd_delta[rows](out, dout, delta, heads, n_ctx, *out.stride(), *dout.stride(), HEAD_DIM=head_dim, BLOCK=64)
    sm_scale = 1.0 / math.sqrt(head_dim)

    def grid(meta):
        return (triton.cdiv(n_ctx, meta["BLOCK_N"]), batch * heads)

    _bwd_fused[grid](
        q,
        k,
        v,
        lse,
        dout,
        dk,
        dv,
        delta,
        dq_acc,
        dq_desc,
        sm_scale,
        *q.stride(),
        *k.stride(),
        *v.stride(),
        *lse.stride(),
        *dout.stride(),
        *dk.stride(),
        *dv.stride(),
        heads,
        n_ctx,
        n_key,
        HEAD_DIM=head_dim,
        CAUSAL=bool(causal),
        TMA=bool(tma),
    )
    _bwd_dq_out[rows](dq_acc, dq, sm_scale, heads, n_ctx, *dq.stride(), HEAD_DIM=head_dim, BLOCK=64)
