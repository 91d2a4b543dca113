"""Solution — Flash Attention 2 backward in Triton (after Dao's FlashAttention-2 and the Triton tutorial
"Fused Attention").

Nothing N x N is stored: P = exp(S - lse) is rebuilt block by block from the row log-sum-exp the forward
wrote, and with delta_i = rowsum(dO_i * O_i) (= sum_j P_ij dP_ij) the softmax's backward is elementwise:

    dV = P^T dO      dP = dO V^T      dS = P * (dP - delta)      dQ = dS K / sqrt(d)      dK = dS^T Q / sqrt(d)

Two kernels, each owning what it writes, so no atomics and no float32 scratch beyond delta:
  1. dQ: one program per block of queries walks the key/value blocks (3 matmuls a step: S, dP, dS K);
     it computes its rows' delta from O and dO first and stores it for kernel 2 (no separate pass).
  2. dK, dV: one program per block of keys walks the query blocks (4 matmuls a step: S^T, P^T dO, dP^T,
     dS^T Q), holding its K and V blocks and two float32 accumulators on chip.
That is 7 block matmuls where the FLOP count (2.5x the forward's) credits 5: S and dP are computed by both
kernels. The price of not synchronising across programs; FlashAttention-2 instead adds dQ with atomics.

Speed as in the forward: exp2 of one fused multiply-add (lse turned into log2 units once per row), masks
only on the causal diagonal and the ragged last block, causal programs skip the blocks above the diagonal
and the longest start first; tiles and pipeline depth tuned per head dimension, causality and length.
Rows past N need no mask in the math: their q and dO load as 0 and their lse as +inf, so P = 0 there.
"""

import math
import os

import torch
import triton
import triton.language as tl


@triton.jit
def _load_rows(X, rows, n_ctx, stride_n, stride_d, HEAD_DIM: tl.constexpr, MASKED: tl.constexpr):
    """Rows `rows` of one head (X points at the head), a len(rows) x HEAD_DIM tile; rows past n_ctx read 0."""
    ptrs = X + rows[:, None] * stride_n + tl.arange(0, HEAD_DIM)[None, :] * stride_d
    if MASKED:
        tile = tl.load(ptrs, mask=rows[:, None] < n_ctx, other=0.0)
    else:
        tile = tl.load(ptrs)
    return tile


@triton.jit
def _row_stats(Lse, Delta, rows, n_ctx, stride_ln, MASKED: tl.constexpr):
    """Per query row: lse in log2 units (+inf past n_ctx, so P = 0 there) and delta."""
    if MASKED:
        lse = tl.load(Lse + rows * stride_ln, mask=rows < n_ctx, other=float("inf"))
        delta = tl.load(Delta + rows, mask=rows < n_ctx, other=0.0)
    else:
        lse = tl.load(Lse + rows * stride_ln)
        delta = tl.load(Delta + rows)
    return lse * 1.4426950408889634, delta


# --- kernel 1: dQ (and delta) ------------------------------------------------------------------------
@triton.jit
def _dq_steps(
    dq,
    q,
    do,
    lse2,
    delta,
    K,
    V,
    lo,
    hi,
    offs_m,
    n_ctx,
    qk_scale,
    stride_kn,
    stride_kd,
    stride_vn,
    stride_vd,
    BLOCK_N: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    CAUSAL: tl.constexpr,
    MASKED: tl.constexpr,
):
    """Key blocks lo .. hi for one block of queries: dQ += dS K."""
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + tl.arange(0, BLOCK_N)
        k = _load_rows(K, cols, n_ctx, stride_kn, stride_kd, HEAD_DIM, MASKED)
        v = _load_rows(V, cols, n_ctx, stride_vn, stride_vd, HEAD_DIM, MASKED)
        p = tl.math.exp2(tl.dot(q, tl.trans(k)) * qk_scale - lse2[:, None])
        if MASKED:
            if CAUSAL:  # key <= query
                keep = offs_m[:, None] >= cols[None, :]
            else:  # keys past n_ctx: their k loads as 0, and exp2(0 - lse) is not 0
                keep = cols[None, :] < n_ctx
            p = tl.where(keep, p, 0.0)
        dp = tl.dot(do, tl.trans(v))
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq)
    return dq


def _dq_configs():
    if os.environ.get("TRITON_INTERPRET") == "1":  # the CPU interpreter: one configuration, large blocks
        return [triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=4, num_stages=1)]
    # query tiles of 64-128 rows stay on chip with their dO and float32 dQ; 32-64 keys a step; (BLOCK_M, BLOCK_N,
    # warps, stages), the best measured on an H100 first (docs/measurements.md, session 69)
    tiles = [(128, 64, 8, 3), (128, 64, 8, 2), (128, 32, 8, 3), (128, 32, 4, 4), (64, 64, 4, 3), (64, 32, 4, 3)]
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s) for bm, bn, w, s in tiles]


TUNE_FROM = 2048  # shorter sequences (the correctness sizes) take the first configuration that fits, untimed


def _prune_by(block: str):
    def prune(configs, named_args, **kwargs):
        n_key = named_args["N_KEY"]
        kept = [c for c in configs if c.kwargs[block] <= max(64, n_key)] or configs[-1:]
        return kept if n_key >= TUNE_FROM else kept[:1]

    return prune


@triton.autotune(
    configs=_dq_configs(),
    key=["N_KEY", "HEAD_DIM", "CAUSAL"],
    prune_configs_by={"early_config_prune": _prune_by("BLOCK_M")},
)
@triton.jit
def _bwd_dq(
    Q,
    K,
    V,
    O,
    Lse,
    DO,
    DQ,
    Delta,
    sm_scale,  # strides: (batch, head, row, column); Lse (b, h, row)
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
    stride_ob,
    stride_oh,
    stride_on,
    stride_od,
    stride_lb,
    stride_lh,
    stride_ln,
    stride_dob,
    stride_doh,
    stride_don,
    stride_dod,
    stride_dqb,
    stride_dqh,
    stride_dqn,
    stride_dqd,
    H,
    n_ctx,
    N_KEY,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
):
    tl.static_assert(BLOCK_M % BLOCK_N == 0)  # the diagonal starts on a key-block boundary
    if CAUSAL:  # the longest rows (last query blocks) first
        start_m = tl.num_programs(0) - 1 - tl.program_id(0)
    else:
        start_m = tl.program_id(0)
    off_bh = tl.program_id(1)
    off_b = (off_bh // H).to(tl.int64)
    off_h = (off_bh % H).to(tl.int64)
    row0 = start_m * BLOCK_M
    offs_m = row0 + tl.arange(0, BLOCK_M)
    Lse += off_b * stride_lb + off_h * stride_lh
    Delta += off_bh.to(tl.int64) * n_ctx

    q = _load_rows(Q + off_b * stride_qb + off_h * stride_qh, offs_m, n_ctx, stride_qn, stride_qd, HEAD_DIM, True)
    do = _load_rows(DO + off_b * stride_dob + off_h * stride_doh, offs_m, n_ctx, stride_don, stride_dod, HEAD_DIM, True)
    o = _load_rows(O + off_b * stride_ob + off_h * stride_oh, offs_m, n_ctx, stride_on, stride_od, HEAD_DIM, True)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)  # float32: dP - delta cancels
    tl.store(Delta + offs_m, delta, mask=offs_m < n_ctx)  # for kernel 2
    lse2 = tl.load(Lse + offs_m * stride_ln, mask=offs_m < n_ctx, other=float("inf")) * 1.4426950408889634

    K += off_b * stride_kb + off_h * stride_kh
    V += off_b * stride_vb + off_h * stride_vh
    qk_scale = sm_scale * 1.4426950408889634
    if CAUSAL:  # keys before the block's first query: all visible; the diagonal blocks mask
        full_end = row0
        end = tl.minimum(row0 + BLOCK_M, n_ctx)
    else:
        full_end = (n_ctx // BLOCK_N) * BLOCK_N
        end = n_ctx
    dq = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    dq = _dq_steps(
        dq,
        q,
        do,
        lse2,
        delta,
        K,
        V,
        0,
        full_end,
        offs_m,
        n_ctx,
        qk_scale,
        stride_kn,
        stride_kd,
        stride_vn,
        stride_vd,
        BLOCK_N,
        HEAD_DIM,
        CAUSAL,
        False,
    )
    dq = _dq_steps(
        dq,
        q,
        do,
        lse2,
        delta,
        K,
        V,
        full_end,
        end,
        offs_m,
        n_ctx,
        qk_scale,
        stride_kn,
        stride_kd,
        stride_vn,
        stride_vd,
        BLOCK_N,
        HEAD_DIM,
        CAUSAL,
        True,
    )
    dq_ptrs = (
        DQ
        + off_b * stride_dqb
        + off_h * stride_dqh
        + offs_m[:, None] * stride_dqn
        + tl.arange(0, HEAD_DIM)[None, :] * stride_dqd
    )
    tl.store(dq_ptrs, (dq * sm_scale).to(q.dtype), mask=offs_m[:, None] < n_ctx)


# --- kernel 2: dK and dV ------------------------------------------------------------------------------
@triton.jit
def _dkdv_steps(
    dk,
    dv,
    k,
    v,
    Q,
    DO,
    Lse,
    Delta,
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
):
    """Query blocks lo .. hi for one block of keys: dV += P^T dO, dK += dS^T Q (transposed tiles: keys x queries)."""
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
        ds_t = p_t * (dp_t - delta[None, :])
        dk = tl.dot(ds_t.to(q.dtype), q, dk)
    return dk, dv


def _dkdv_configs():
    if os.environ.get("TRITON_INTERPRET") == "1":
        return [triton.Config({"BLOCK_M": 64, "BLOCK_N": 128}, num_warps=4, num_stages=1)]
    # key tiles of 64-128 rows hold K, V and two float32 accumulators; 16-64 queries a step (the tutorial's
    # Hopper choice is 32 x 128, 4 warps, 5 stages at d = 64; d = 128 doubles the accumulators: 8 warps)
    tiles = [(64, 128, 8, 3), (64, 128, 8, 2), (32, 128, 8, 3), (32, 128, 4, 5), (64, 64, 4, 3), (32, 64, 4, 3)]
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s) for bm, bn, w, s in tiles]


@triton.autotune(
    configs=_dkdv_configs(),
    key=["N_KEY", "HEAD_DIM", "CAUSAL"],
    prune_configs_by={"early_config_prune": _prune_by("BLOCK_N")},
)
@triton.jit
def _bwd_dkdv(
    Q,
    K,
    V,
    Lse,
    DO,
    DK,
    DV,
    Delta,
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
):
    tl.static_assert(BLOCK_N % BLOCK_M == 0)  # the diagonal starts on a query-block boundary
    start_n = tl.program_id(0) * BLOCK_N  # causal: the first key blocks see the most queries and start first
    off_bh = tl.program_id(1)
    off_b = (off_bh // H).to(tl.int64)
    off_h = (off_bh % H).to(tl.int64)
    offs_n = start_n + tl.arange(0, BLOCK_N)
    k = _load_rows(K + off_b * stride_kb + off_h * stride_kh, offs_n, n_ctx, stride_kn, stride_kd, HEAD_DIM, True)
    v = _load_rows(V + off_b * stride_vb + off_h * stride_vh, offs_n, n_ctx, stride_vn, stride_vd, HEAD_DIM, True)
    Q += off_b * stride_qb + off_h * stride_qh
    DO += off_b * stride_dob + off_h * stride_doh
    Lse += off_b * stride_lb + off_h * stride_lh
    Delta += off_bh.to(tl.int64) * n_ctx
    qk_scale = sm_scale * 1.4426950408889634
    dk = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)

    full_end = (n_ctx // BLOCK_M) * BLOCK_M
    if CAUSAL:  # queries on the diagonal mask; those below it see every key of the block
        dk, dv = _dkdv_steps(
            dk,
            dv,
            k,
            v,
            Q,
            DO,
            Lse,
            Delta,
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
        )
        below = start_n + BLOCK_N
    else:
        below = 0
    dk, dv = _dkdv_steps(
        dk,
        dv,
        k,
        v,
        Q,
        DO,
        Lse,
        Delta,
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
    )
    dk, dv = _dkdv_steps(
        dk,
        dv,
        k,
        v,
        Q,
        DO,
        Lse,
        Delta,
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
    )  # the ragged last block: below the diagonal, unmasked

    cols = tl.arange(0, HEAD_DIM)[None, :]
    keep = offs_n[:, None] < n_ctx
    tl.store(
        DK + off_b * stride_dkb + off_h * stride_dkh + offs_n[:, None] * stride_dkn + cols * stride_dkd,
        (dk * sm_scale).to(k.dtype),
        mask=keep,
    )
    tl.store(
        DV + off_b * stride_dvb + off_h * stride_dvh + offs_n[:, None] * stride_dvn + cols * stride_dvd,
        dv.to(v.dtype),
        mask=keep,
    )


def flash_attention_v2_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    dout: torch.Tensor,
    dq: torch.Tensor,
    dk: torch.Tensor,
    dv: torch.Tensor,
    causal: bool,
) -> None:
    batch, heads, n_ctx, head_dim = q.shape
    assert head_dim in (16, 32, 64, 128, 256), "head dim must be a power of two from 16 to 256"
    n_key = max(16, triton.next_power_of_2(n_ctx))  # one tuning per power of two, not per length
    delta = torch.empty((batch * heads, n_ctx), device=q.device, dtype=torch.float32)  # O(N): 4 bytes a row
    sm_scale = 1.0 / math.sqrt(head_dim)

    def grid_dq(meta):
        return (triton.cdiv(n_ctx, meta["BLOCK_M"]), batch * heads)

    def grid_dkdv(meta):
        return (triton.cdiv(n_ctx, meta["BLOCK_N"]), batch * heads)

    _bwd_dq[grid_dq](
        q,
        k,
        v,
        out,
        lse,
        dout,
        dq,
        delta,
        sm_scale,
        *q.stride(),
        *k.stride(),
        *v.stride(),
        *out.stride(),
        *lse.stride(),
        *dout.stride(),
        *dq.stride(),
        heads,
        n_ctx,
        n_key,
        HEAD_DIM=head_dim,
        CAUSAL=bool(causal),
    )
    _bwd_dkdv[grid_dkdv](
        q,
        k,
        v,
        lse,
        dout,
        dk,
        dv,
        delta,
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
    )
