"""Reference: y = A x (A is M x K, row-major; it may be a row slice of a wider matrix)."""

import torch


def reference(A: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return torch.mv(A, x)
