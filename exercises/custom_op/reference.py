"""Reference: GELU (tanh approximation) of x plus a scaled residual, the eager PyTorch composite: three
kernels (scale * residual, the add, the GELU) and two intermediates in memory. The grader calls it on
float64 copies for the answer and for the gradients (autograd through it), and times it as the anchor."""

import torch


def reference(x: torch.Tensor, residual: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x + scale * residual, approximate="tanh")
