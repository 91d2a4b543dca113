"""Weeks 7-8 — Flash Attention forward in Triton.

out = softmax(q k^T / sqrt(d)) v for q, k, v, out of shape (B, H, N, d), float16 or bfloat16, without
ever holding the N x N scores: each program keeps BLOCK_M queries in registers and streams the keys and
values through an online softmax. Read README.md first. Grade with: kcourse grade flash_attention_v1
"""

import math

import torch
import triton
import triton.language as tl


@triton.jit
def flash_fwd_kernel(
    Q,
    K,
    V,
    Out,
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
    stride_ob,
    stride_oh,
    stride_on,
    stride_od,
    H,
    n_ctx,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
):
    # TODO: start_m = tl.program_id(0) (a block of BLOCK_M queries), off_bh = tl.program_id(1) (batch * H + head)
    #       offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M); offs_n = tl.arange(0, BLOCK_N); offs_d = tl.arange(0, HEAD_DIM)
    #       load the q block once (mask rows >= n_ctx); use the strides, never assume contiguous rows
    #       m_i = -inf, l_i = 0 (float32, one per query row); acc = zeros([BLOCK_M, HEAD_DIM], float32)
    #       for start_n in range(0, end, BLOCK_N):        (causal: end = min((start_m + 1) * BLOCK_M, n_ctx))
    #           k, v blocks (mask keys >= n_ctx); s = tl.dot(q, tl.trans(k)) * sm_scale
    #           s = -inf where the key is past n_ctx (and, causal, where key > query)
    #           m_new = max(m_i, rowmax(s)); p = exp(s - m_new); alpha = exp(m_i - m_new)
    #           l_i = l_i * alpha + rowsum(p); acc = acc * alpha + tl.dot(p.to(v.dtype), v); m_i = m_new
    #       out = acc / l_i, stored in Out's dtype (mask rows >= n_ctx)
    pass


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, causal: bool) -> None:
    """out[:] = softmax(q @ k^T / sqrt(d), causal mask if `causal`) @ v, all of shape (B, H, N, d)."""
    batch, heads, n_ctx, head_dim = q.shape
    sm_scale = 1.0 / math.sqrt(head_dim)
    # TODO: launch flash_fwd_kernel on the grid (triton.cdiv(n_ctx, BLOCK_M), batch * heads) with
    #       *q.stride(), *k.stride(), *v.stride(), *out.stride(), HEAD_DIM=head_dim and, to start,
    #       BLOCK_M = BLOCK_N = 64; then delete the line below.
    raise NotImplementedError("write flash_fwd_kernel and launch it in flash_attention()")
