"""Reference: SwiGLU's gate, out = silu(x) * y, silu(x) = x * sigmoid(x) = x / (1 + e^-x).

The grader calls it on float64 copies of the inputs for the numerics, and in the case's dtype on the GPU
as the unfused PyTorch formula your kernel is timed against: F.silu writes silu(x) out (rounded to the
dtype), then the product reads it back with y."""

import torch
import torch.nn.functional as F


def reference(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.silu(x) * y
