"""Reference: scaled dot-product attention, softmax(Q K^T / sqrt(d)) V, causal or not.

torch's own fused attention: on the grader's float64 copies of the inputs (the CPU, where the verdict
is computed) it is exact to float64 rounding and needs no N x N matrix; on the GPU, where it is timed as
the "torch" figure, it is PyTorch's fastest attention (FlashAttention / cuDNN), the bar to aim at."""

import torch
import torch.nn.functional as F


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
