"""Solution — Flash Attention 2 forward in Triton (after Dao's FlashAttention-2 and the Triton tutorial
"Fused Attention", whose Hopper path reads through tensor descriptors).

One program per (block of BLOCK_M queries, batch x head); it keeps its queries, its running row max m, row
sum l and float32 accumulator on chip and walks every key/value block of its head (FlashAttention-2's
partitioning: the queries are split across programs and warps, the keys are not, so no program ever
exchanges partial results). The accumulator is rescaled by exp(m_old - m_new) as the max grows, but divided
by l only once, at the end, where the row's log-sum-exp, m + log(l), is written too: the backward pass
rebuilds P = exp(S - lse) from it without a second online softmax.

Speed: 1/sqrt(d) and log2(e) are one scale so each exponential is exp2 of a fused multiply-add; full key
blocks run without masks and only the ragged last block (non-causal) or the diagonal blocks (causal) pay
for them; causal programs skip every block above the diagonal and the longest rows start first; on Hopper
the blocks arrive through TMA (tensor descriptors: a copy engine moves them, rows past the end of a head
read as zeros and stores past it are dropped), other layouts through pointer loads; tiles and pipeline
depth are tuned per head dimension, causality and length.
"""

import math
import os

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

USE_TMA = True  # tensor descriptors wherever the layout allows them (see _tma_ok); False: pointer loads only


@triton.jit
def _load_rows(
    X,
    off_b,
    off_h,
    base,
    row0,
    n_ctx,
    stride_n,
    stride_d,
    BLOCK: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    TMA: tl.constexpr,
    MASKED: tl.constexpr,
):
    """Rows row0 .. row0 + BLOCK of one head, as a BLOCK x HEAD_DIM tile; rows past n_ctx read as 0."""
    if TMA:  # X is a descriptor of shape (B, H, N, d): the copy engine pads past N with zeros itself
        tile = X.load([off_b.to(tl.int32), off_h.to(tl.int32), row0, 0]).reshape(BLOCK, HEAD_DIM)
    else:
        rows = row0 + tl.arange(0, BLOCK)
        ptrs = X + base + rows[:, None] * stride_n + tl.arange(0, HEAD_DIM)[None, :] * stride_d
        if MASKED:
            tile = tl.load(ptrs, mask=rows[:, None] < n_ctx, other=0.0)
        else:
            tile = tl.load(ptrs)
    return tile


@triton.jit
def _attend(
    acc,
    l_i,
    m_i,
    q,
    K,
    V,
    k_base,
    v_base,
    off_b,
    off_h,
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
    TMA: tl.constexpr,
    MASKED: tl.constexpr,
):
    """Key blocks lo .. hi: scores, the online-softmax update of (m, l) and of the accumulator, in the order
    of the Triton tutorial's Hopper kernel: l is updated last, after the second dot, so fewer values stay live
    across the dots (measured on an H200: 77-84% of SDPA against 68-71% for the same steps ordered as the
    algorithm reads, with l updated before the dot)."""
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = _load_rows(K, off_b, off_h, k_base, start_n, n_ctx, stride_kn, stride_kd, BLOCK_N, HEAD_DIM, TMA, MASKED)
        qk = tl.dot(q, k.T)
        if MASKED:
            cols = start_n + offs_n
            if CAUSAL:  # key <= query; rows < n_ctx then never see a key >= n_ctx
                keep = offs_m[:, None] >= cols[None, :]
            else:
                keep = cols[None, :] < n_ctx
            # -inf, not the tutorial's -1e6: scaled scores of large inputs can lie below -1e6 themselves.
            # Only the diagonal or tail blocks pay for the select.
            qk = tl.where(keep, qk * qk_scale, -float("inf"))
            m_new = tl.maximum(m_i, tl.max(qk, 1))  # finite: each row met a visible key in its first block
            qk -= m_new[:, None]
        else:
            m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_new[:, None]
        p = tl.math.exp2(qk)
        alpha = tl.math.exp2(m_i - m_new)  # what the old max's terms are worth under the new one
        l_new = tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = _load_rows(V, off_b, off_h, v_base, start_n, n_ctx, stride_vn, stride_vd, BLOCK_N, HEAD_DIM, TMA, MASKED)
        acc = tl.dot(p.to(v.dtype), v, acc)
        l_i = l_i * alpha + l_new
        m_i = m_new
    return acc, l_i, m_i


def _configs():
    if os.environ.get("TRITON_INTERPRET") == "1":  # the CPU interpreter: one configuration, large blocks
        return [triton.Config({"BLOCK_M": 128, "BLOCK_N": 128}, num_warps=4, num_stages=1, pre_hook=_block_shapes)]
    # Hopper: 128-row query tiles (one or two warpgroups), 64-128 keys a step, 2-4 stages of K/V in flight;
    # 8 warps only with 128 x 128 tiles (smaller ones leave each warp too little work: the tutorial's rule);
    # 64-row tiles for short sequences. Few: each is compiled per dtype, head dimension, causality and path.
    return [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s, pre_hook=_block_shapes)
        for bm, bn, w, s in [
            (128, 64, 4, 2),
            (128, 64, 4, 3),
            (128, 64, 4, 4),
            (128, 128, 8, 2),
            (128, 128, 8, 3),
            (64, 64, 4, 3),
        ]
    ]


def _block_shapes(nargs):
    """A descriptor's block is a compile-time shape: set it to the configuration being run."""
    for name, rows in (("Q", "BLOCK_M"), ("Out", "BLOCK_M"), ("K", "BLOCK_N"), ("V", "BLOCK_N")):
        if isinstance(nargs[name], TensorDescriptor):
            nargs[name].block_shape = [1, 1, nargs[rows], nargs["HEAD_DIM"]]


TUNE_FROM = 2048  # shorter sequences (the correctness sizes) take the first configuration that fits, untimed


SMALL_HEADS = (64, 64, 4, 3)  # (BLOCK_M, BLOCK_N, warps, stages) for head dimensions up to 64 on the TMA path


def _prune(configs, named_args, **kwargs):
    """The configurations the autotuner times. At head dimension 64 or less on the TMA path, SMALL_HEADS alone: the
    autotuner's own timing picked a 128-row tile there, a few per cent slower than 64 x 64 beside SDPA with the L2
    flushed (docs/measurements.md, "FA2 forward at d = 64"; scripts/design_bench.py flash measures it)."""
    n_key = named_args["N_KEY"]
    kept = [c for c in configs if c.kwargs["BLOCK_M"] <= max(64, n_key)]
    kept = kept or configs[-1:]
    if n_key < TUNE_FROM:
        return kept[:1]
    if kwargs["TMA"] and kwargs["HEAD_DIM"] <= 64:  # keyword arguments of the call
        return [c for c in kept if _shape(c) == SMALL_HEADS] or kept
    return kept


def _shape(config) -> tuple[int, int, int, int]:
    return config.kwargs["BLOCK_M"], config.kwargs["BLOCK_N"], config.num_warps, config.num_stages


@triton.autotune(
    configs=_configs(), key=["N_KEY", "HEAD_DIM", "CAUSAL", "TMA"], prune_configs_by={"early_config_prune": _prune}
)
@triton.jit
def _flash_fwd(
    Q,
    K,
    V,
    Out,
    Lse,
    sm_scale,  # Q, K, V, Out: descriptors (TMA) or pointers
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
    H,
    n_ctx,
    N_KEY,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    TMA: tl.constexpr,
):
    tl.static_assert(BLOCK_M % BLOCK_N == 0)  # the diagonal starts on a key-block boundary
    if CAUSAL:  # the longest rows (last query blocks) first: the tail of the grid is short work
        start_m = tl.num_programs(0) - 1 - tl.program_id(0)
    else:
        start_m = tl.program_id(0)
    off_bh = tl.program_id(1)
    off_b = (off_bh // H).to(tl.int64)
    off_h = (off_bh % H).to(tl.int64)
    row0 = start_m * BLOCK_M
    offs_m = row0 + tl.arange(0, BLOCK_M)

    q = _load_rows(
        Q,
        off_b,
        off_h,
        off_b * stride_qb + off_h * stride_qh,
        row0,
        n_ctx,
        stride_qn,
        stride_qd,
        BLOCK_M,
        HEAD_DIM,
        TMA,
        True,
    )
    k_base = off_b * stride_kb + off_h * stride_kh
    v_base = off_b * stride_vb + off_h * stride_vh
    m_i = tl.full([BLOCK_M], -float("inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    qk_scale = sm_scale * 1.4426950408889634  # exp(x * s) = exp2(x * s * log2(e))

    if CAUSAL:  # keys before the block's first query are visible to all its rows; the diagonal blocks mask
        full_end = row0
        end = tl.minimum(row0 + BLOCK_M, n_ctx)
    else:  # whole key blocks without masks, then the ragged tail
        full_end = (n_ctx // BLOCK_N) * BLOCK_N
        end = n_ctx
    acc, l_i, m_i = _attend(
        acc,
        l_i,
        m_i,
        q,
        K,
        V,
        k_base,
        v_base,
        off_b,
        off_h,
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
        TMA,
        False,
    )
    acc, l_i, m_i = _attend(
        acc,
        l_i,
        m_i,
        q,
        K,
        V,
        k_base,
        v_base,
        off_b,
        off_h,
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
        TMA,
        True,
    )

    # m is in log2 units of the scaled scores: lse = ln(sum exp(s)) = (m + log2(l)) * ln(2)
    lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453
    tl.store(Lse + off_b * stride_lb + off_h * stride_lh + offs_m * stride_ln, lse, mask=offs_m < n_ctx)
    out = (acc / l_i[:, None]).to(q.dtype)
    if TMA:  # rows past N are dropped by the copy engine
        Out.store([off_b.to(tl.int32), off_h.to(tl.int32), row0, 0], out.reshape(1, 1, BLOCK_M, HEAD_DIM))
    else:
        o_ptrs = (
            Out
            + off_b * stride_ob
            + off_h * stride_oh
            + offs_m[:, None] * stride_on
            + tl.arange(0, HEAD_DIM)[None, :] * stride_od
        )
        tl.store(o_ptrs, out, mask=offs_m[:, None] < n_ctx)


def _tma_ok(*tensors: torch.Tensor) -> bool:
    """TMA reads (1, 1, rows, d) boxes of a (B, H, N, d) descriptor: rows contiguous, every other stride and
    the base 16-byte aligned. Contiguous tensors qualify, and so do q, k, v sliced from a fused QKV projection
    (B, N, 3, H, d) in bf16/fp16; a row slice's odd row stride does not (pointer loads then)."""
    for t in tensors:
        size = t.element_size()
        if t.stride(3) != 1 or any((s * size) % 16 for s in t.stride()[:3]) or t.data_ptr() % 16:
            return False
    return True


def _descriptor(t: torch.Tensor) -> TensorDescriptor:
    return TensorDescriptor(t, list(t.shape), list(t.stride()), [1, 1, 16, t.shape[3]])


def flash_attention_v2(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor, causal: bool
) -> None:
    batch, heads, n_ctx, head_dim = q.shape
    assert head_dim in (16, 32, 64, 128, 256), "head dim must be a power of two from 16 to 256"
    n_key = max(16, triton.next_power_of_2(n_ctx))  # one tuning per power of two, not per length
    tma = USE_TMA and (q.is_cuda or os.environ.get("TRITON_INTERPRET") == "1") and _tma_ok(q, k, v, out)
    args = [_descriptor(t) for t in (q, k, v, out)] if tma else [q, k, v, out]

    def grid(meta):
        return (triton.cdiv(n_ctx, meta["BLOCK_M"]), batch * heads)

    _flash_fwd[grid](
        *args,
        lse,
        1.0 / math.sqrt(head_dim),
        *q.stride(),
        *k.stride(),
        *v.stride(),
        *out.stride(),
        *lse.stride(),
        heads,
        n_ctx,
        n_key,
        HEAD_DIM=head_dim,
        CAUSAL=bool(causal),
        TMA=tma,
    )
