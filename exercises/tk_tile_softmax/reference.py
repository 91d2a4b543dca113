"""Reference: out = softmax(x + y) along the last dimension.

The verdict compares with this in float64 (the grader's copies of the bf16 inputs, upcast): x + y is exact
there, as it is in float32 in a kernel that converts before adding. In bf16 (the GPU's "torch" figure) it is
what PyTorch runs eagerly: x + y written to memory as bf16, then the softmax kernel reading it back."""

import torch


def reference(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x + y, dim=-1)
