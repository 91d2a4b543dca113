"""Reference: scaled dot-product attention, softmax(Q K^T / sqrt(d)) V, causal or not.

torch's own fused attention: on the grader's float64 copies of the bf16 inputs (where the verdict is computed) it is
exact to float64 rounding; float64 has only torch's plain math path, which holds the N x N scores and their softmax,
so it runs a few heads at a time (SCORES_PER_CHUNK: at once, the timed sizes' 4 x 32 heads of 4096 x 4096 need tens
of GB). On the GPU, on the case's own bf16 tensors, it is PyTorch's fastest attention (FlashAttention / cuDNN): the
"torch" figure the speed check reports beside yours, the one to measure your kernel against."""

import torch
import torch.nn.functional as F

SCORES_PER_CHUNK = 2**24  # float64 scores held at once: 128 MB


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False) -> torch.Tensor:
    if q.dtype != torch.float64:
        return F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
    batch, heads, n_ctx, _ = q.shape
    flat = [t.reshape(batch * heads, 1, t.shape[-2], t.shape[-1]) for t in (q, k, v)]
    step = max(1, SCORES_PER_CHUNK // (n_ctx * k.shape[-2]))
    parts = [
        F.scaled_dot_product_attention(*(t[start : start + step] for t in flat), is_causal=bool(causal))
        for start in range(0, batch * heads, step)
    ]
    return torch.cat(parts).reshape(batch, heads, n_ctx, v.shape[-1])
