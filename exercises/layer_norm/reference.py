"""Reference: layer norm over the last dimension, eps = 1e-5 (the grader calls it on float64 copies)."""

import torch

EPS = 1e-5


def reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, eps=EPS)
