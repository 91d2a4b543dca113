"""Reference: single-head scaled dot-product attention batched over B, out = softmax(q k^T / sqrt(d)) v,
causal (query i sees keys 0..i) or not.

torch's own fused attention. The (B, N, d) tensors go in as (B, 1, N, d) views: SDPA's fused kernels take
4-dimensional inputs only, and a 3-dimensional call falls back to the plain math path. On the grader's
float64 copies (the CPU, where the verdict is computed) it is exact to float64 rounding; on the GPU, where
it is timed as the "torch" figure, float32 inputs take PyTorch's memory-efficient attention, whose matrix
products run on the tensor cores split into three TF32 products (float32 accuracy): the bar to aim at."""

import torch
import torch.nn.functional as F


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False) -> torch.Tensor:
    heads = (x.unsqueeze(1) for x in (q, k, v))
    return F.scaled_dot_product_attention(*heads, is_causal=bool(causal)).squeeze(1)
