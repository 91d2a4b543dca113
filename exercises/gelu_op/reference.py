"""Reference: GELU with the tanh approximation, y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""

import math

import torch


def reference(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
