"""Reference: scaled dot-product attention and the log-sum-exp of each row of its scores.

    out = softmax(S) V,   lse = log(sum_j exp(S_ij)),   S = Q K^T / sqrt(d)  (S_ij = -inf for j > i if causal)

The verdict is computed in float64 on the CPU, plainly: the scores of a few heads at a time (so the
timed sizes fit in memory), their logsumexp, exp(S - lse) V. In the case's own dtype (the GPU, where it is
timed as the "torch" figure) it is torch's scaled_dot_product_attention, PyTorch's fastest attention
(FlashAttention / cuDNN kernels): the bar to aim at. The public function returns `out` only; its kernels
keep their logsumexp for autograd, N floats a row, nothing beside the N x d output."""

import math

import torch
import torch.nn.functional as F

SCORES_PER_CHUNK = 2**24  # float64 scores held at once: 128 MB


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) of plain attention, in the inputs' precision, a few (batch, head) pairs at a time."""
    batch, heads, n_ctx, head_dim = q.shape
    flat = [t.reshape(batch * heads, n_ctx, head_dim) for t in (q, k, v)]
    step = max(1, SCORES_PER_CHUNK // (n_ctx * n_ctx))
    outs, lses = [], []
    for start in range(0, batch * heads, step):
        qc, kc, vc = (t[start : start + step] for t in flat)
        scores = qc @ kc.transpose(-1, -2) / math.sqrt(head_dim)
        if causal:
            above = torch.ones(n_ctx, n_ctx, dtype=torch.bool, device=q.device).triu(1)
            scores = scores.masked_fill(above, float("-inf"))
        lse = torch.logsumexp(scores, dim=-1)
        outs.append(torch.exp(scores - lse[..., None]) @ vc)
        lses.append(lse)
    return (torch.cat(outs).reshape(batch, heads, n_ctx, head_dim), torch.cat(lses).reshape(batch, heads, n_ctx))


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False):
    if q.dtype != torch.float64:  # the "torch" time beside yours: PyTorch's fused kernel
        return F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal)), None
    return attention(q, k, v, bool(causal))
