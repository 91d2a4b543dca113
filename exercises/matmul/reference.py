"""Reference: C = A @ B."""

import torch


def reference(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    return A @ B
