"""Reference: C = A @ B for row-major A (M x K) and B (K x N), which may be row slices of wider matrices."""

import torch


def reference(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    return A @ B
