"""Reference: c = a + b, elementwise, for rows x cols matrices (row strides are the grader's business)."""

import torch


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a + b
