"""Weeks 9-10 — Flash Attention 2 backward in Triton.

Given q, k, v, the forward's out and lse (float32 log-sum-exp of each row of scores s = q k^T / sqrt(d)),
and dout = dLoss/dout, all (B, H, N, d) except lse (B, H, N), write dq, dk, dv without ever holding an
N x N matrix:

    P = exp(S - lse)   dV = P^T dO   dP = dO V^T   delta = rowsum(dO * O)   dS = P * (dP - delta)
    dQ = dS K / sqrt(d)   dK = dS^T Q / sqrt(d)

Read README.md first. Grade with: kcourse grade flash_attention_v2_backward
"""

import math

import torch
import triton
import triton.language as tl


@triton.jit
def bwd_dq_kernel(
    Q,
    K,
    V,
    O,
    Lse,
    DO,
    DQ,
    Delta,
    sm_scale,
    stride_qb,
    stride_qh,
    stride_qn,
    stride_qd,  # (batch, head, row, column) of each tensor
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
    stride_ln,  # lse: (batch, head, row)
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
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
):
    # TODO: one program per (block of BLOCK_M queries, batch * H + head):
    #       load q, dO and O of the block (mask rows >= n_ctx); delta = rowsum(dO * O) in float32;
    #       store delta to Delta (a float32 (B*H, N) buffer) for the dK/dV kernel
    #       lse2 = lse * log2(e) per row (load rows >= n_ctx as +inf: then their P is exactly 0)
    #       dq = zeros([BLOCK_M, HEAD_DIM], float32)
    #       for each key block (causal: only up to this block's last query):
    #           p = exp2(q @ k^T * sm_scale * log2(e) - lse2);  zero it where key > query (causal)
    #                                                          or key >= n_ctx (k = 0 there, but exp2(-lse2) is not 0)
    #           dp = dO @ v^T;  ds = p * (dp - delta);  dq += ds.to(k.dtype) @ k
    #       store dq * sm_scale in DQ's dtype (mask rows >= n_ctx)
    pass


@triton.jit
def bwd_dkdv_kernel(
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
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
):
    # TODO: one program per (block of BLOCK_N keys, batch * H + head): load k and v of the block once
    #       dk, dv = zeros([BLOCK_N, HEAD_DIM], float32)
    #       for each query block (causal: only from this block's first key on):
    #           q, dO, lse2 (+inf past n_ctx), delta of those rows
    #           p_t = exp2(k @ q^T * sm_scale * log2(e) - lse2[None, :])   (keys x queries; causal: 0 where query < key)
    #           dv += p_t.to(dO.dtype) @ dO
    #           dp_t = v @ dO^T;  ds_t = p_t * (dp_t - delta[None, :]);  dk += ds_t.to(q.dtype) @ q
    #       store dk * sm_scale and dv in their dtype (mask rows >= n_ctx)
    pass


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
    """dq, dk, dv[:] = the gradients of attention (causal if `causal`) with respect to q, k, v."""
    batch, heads, n_ctx, head_dim = q.shape
    sm_scale = 1 / math.sqrt(head_dim)
    # TODO: delta = torch.empty((batch * heads, n_ctx), device=q.device, dtype=torch.float32)
    #       launch bwd_dq_kernel on (triton.cdiv(n_ctx, BLOCK_M), batch * heads), then bwd_dkdv_kernel on
    #       (triton.cdiv(n_ctx, BLOCK_N), batch * heads), with every tensor's .stride(), HEAD_DIM=head_dim;
    #       start with BLOCK_M = BLOCK_N = 64; then delete the line below.
    raise NotImplementedError(
        "write bwd_dq_kernel and bwd_dkdv_kernel and launch them in flash_attention_v2_backward()"
    )
