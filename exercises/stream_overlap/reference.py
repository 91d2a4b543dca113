"""Reference: y = 1 / sqrt(1 + x^2), elementwise (what transform_kernel's Newton steps converge to)."""

import torch


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.rsqrt(1 + x * x)
