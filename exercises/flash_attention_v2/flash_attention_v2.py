"""Weeks 9-10 — Flash Attention 2 forward in Triton.

out = softmax(q k^T / sqrt(d)) v for q, k, v, out of shape (B, H, N, d), float16 or bfloat16, and
lse[b, h, i] = log(sum_j exp(s_ij)), the float32 log-sum-exp of each row of scores s = q k^T / sqrt(d):
what the backward pass (flash_attention_v2_backward) rebuilds P from. Start from your flash_attention_v1
kernel; README.md says what v2 changes. Grade with: kcourse grade flash_attention_v2
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
    Lse,
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
    stride_lb,
    stride_lh,
    stride_ln,
    H,
    n_ctx,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
):
    # TODO: one program per (block of BLOCK_M queries, batch * H + head), as in v1:
    #       load the q block once; m_i = -inf, l_i = 0, acc = 0 (float32)
    #       qk_scale = sm_scale * log2(e): then exp(s - m) is tl.math.exp2(qk * qk_scale - m) with m in log2 units
    #       loop 1, no masks: key blocks that need none (non-causal: the whole blocks below n_ctx;
    #                         causal: the blocks before this program's first query)
    #       loop 2, masked:   the ragged last block (non-causal) or the diagonal blocks (causal: key <= query)
    #       each step: m_new = max(m_i, rowmax); p = exp2(...); alpha = exp2(m_i - m_new)
    #                  l_i = l_i * alpha + rowsum(p); acc = acc * alpha + p @ v; m_i = m_new
    #       after the loops only: out = acc / l_i (mask rows >= n_ctx when storing)
    #       lse = (m_i + log2(l_i)) * ln(2)   (natural log of the row's sum of exp(s)), stored with Lse's strides
    pass


def flash_attention_v2(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor, causal: bool
) -> None:
    """out[:] = softmax(q @ k^T / sqrt(d), causal mask if `causal`) @ v, all of shape (B, H, N, d);
    lse[:] = the float32 log-sum-exp of each row of scores, shape (B, H, N)."""
    batch, heads, n_ctx, head_dim = q.shape
    sm_scale = 1.0 / math.sqrt(head_dim)
    # TODO: launch flash_fwd_kernel on the grid (triton.cdiv(n_ctx, BLOCK_M), batch * heads) with
    #       *q.stride(), *k.stride(), *v.stride(), *out.stride(), *lse.stride(), HEAD_DIM=head_dim,
    #       BLOCK_M = 128, BLOCK_N = 64 to start (then @triton.autotune); then delete the line below.
    raise NotImplementedError("write flash_fwd_kernel and launch it in flash_attention_v2()")
