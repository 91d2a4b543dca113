"""The FA2 forward solution with its unmasked key loop software-pipelined: issue 42's next step toward 90% of SDPA at
d = 128, to be measured beside the solution (scripts/design_bench.py flash) before it replaces anything.

FlashAttention-3's intra-warpgroup overlap, written in plain Triton: block j + 1's scores S = Q K^T are issued
before block j's softmax, so the tensor cores work on the next product while the exponentials of this one run
(on Hopper a `tl.dot` is an asynchronous warpgroup MMA, waited for where its result is first used). The price is
one more score tile live across the loop: with 4 warps and 128 x 64 tiles at d = 128 that is 64 registers a
thread more, which 8 warps halve. Triton's automatic warp specialisation, the other route, is Blackwell's.

The solution's module is loaded afresh and its `_attend` replaced before anything compiles: the masked blocks (the
causal diagonal, the ragged tail) keep the solution's loop, the unmasked ones take `_pipelined`. Checked on the CPU
under Triton's interpreter by tests/test_flash_attention_v2.py."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import triton
import triton.language as tl

_SOLUTION = Path(__file__).resolve().parents[1] / "solutions/flash_attention_v2/flash_attention_v2.py"
_spec = importlib.util.spec_from_file_location("fa2_forward_pipelined_solution", _SOLUTION)
solution = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(solution)
_load_rows, _solutions_attend = solution._load_rows, solution._attend


@triton.jit
def _softmax_step(acc, l_i, m_i, qk, v, qk_scale):
    """One unmasked key block's online-softmax update, in the solution's order (l last)."""
    m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
    p = tl.math.exp2(qk * qk_scale - m_new[:, None])
    alpha = tl.math.exp2(m_i - m_new)
    l_new = tl.sum(p, 1)
    acc = acc * alpha[:, None]
    acc = tl.dot(p.to(v.dtype), v, acc)
    return acc, l_i * alpha + l_new, m_new


@triton.jit
def _pipelined(
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
    n_ctx,
    qk_scale,
    stride_kn,
    stride_kd,
    stride_vn,
    stride_vd,
    BLOCK_N: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    TMA: tl.constexpr,
):
    """Unmasked key blocks lo .. hi (whole blocks, none past n_ctx): block j + 1's scores issued before block j's
    softmax and second product."""
    if lo < hi:
        k = _load_rows(K, off_b, off_h, k_base, lo, n_ctx, stride_kn, stride_kd, BLOCK_N, HEAD_DIM, TMA, False)
        qk = tl.dot(q, k.T)
        for start_n in range(lo, hi - BLOCK_N, BLOCK_N):
            start_n = tl.multiple_of(start_n, BLOCK_N)
            k = _load_rows(
                K, off_b, off_h, k_base, start_n + BLOCK_N, n_ctx, stride_kn, stride_kd, BLOCK_N, HEAD_DIM, TMA, False
            )
            qk_next = tl.dot(q, k.T)
            v = _load_rows(V, off_b, off_h, v_base, start_n, n_ctx, stride_vn, stride_vd, BLOCK_N, HEAD_DIM, TMA, False)
            acc, l_i, m_i = _softmax_step(acc, l_i, m_i, qk, v, qk_scale)
            qk = qk_next
        last = hi - BLOCK_N
        v = _load_rows(V, off_b, off_h, v_base, last, n_ctx, stride_vn, stride_vd, BLOCK_N, HEAD_DIM, TMA, False)
        acc, l_i, m_i = _softmax_step(acc, l_i, m_i, qk, v, qk_scale)
    return acc, l_i, m_i


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
    """The solution's `_attend`, its unmasked blocks pipelined."""
    if MASKED:
        acc, l_i, m_i = _solutions_attend(
            acc, l_i, m_i, q, K, V, k_base, v_base, off_b, off_h, lo, hi, offs_m, n_ctx, qk_scale, stride_kn,
            stride_kd, stride_vn, stride_vd, BLOCK_N, HEAD_DIM, CAUSAL, TMA, MASKED,
        )  # fmt: skip
    else:
        acc, l_i, m_i = _pipelined(
            acc, l_i, m_i, q, K, V, k_base, v_base, off_b, off_h, lo, hi, n_ctx, qk_scale, stride_kn, stride_kd,
            stride_vn, stride_vd, BLOCK_N, HEAD_DIM, TMA,
        )  # fmt: skip
    return acc, l_i, m_i


solution._attend = _attend  # before the first compile: the solution's kernel calls this one
flash_attention_v2 = solution.flash_attention_v2
