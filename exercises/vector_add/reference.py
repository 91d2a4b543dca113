"""Reference: c = a + b, elementwise."""

import torch


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a + b
