"""Reference: scaled dot-product attention, softmax(Q K^T / sqrt(d)) V, causal or not.

torch's own fused attention: on the grader's float64 copies of the bf16 inputs (the CPU, where the verdict is
computed) it is exact to float64 rounding and needs no N x N matrix; on the GPU, on the case's own bf16 tensors,
it is PyTorch's fastest attention (FlashAttention / cuDNN): the "torch" figure the speed check reports beside
yours, the one to measure your kernel against."""

import torch
import torch.nn.functional as F


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
