"""Reference: softmax with a temperature, row-wise. The grader differentiates it with autograd (in float64)
for the gradients your backward must give."""

import torch


def reference(x: torch.Tensor, *, T: float) -> torch.Tensor:
    """y = softmax(x / T) over the last dimension; T > 0 (small T sharpens, large T flattens)."""
    return torch.softmax(x / T, dim=-1)
