"""Reference: RMS norm over the last dimension with a weight, eps = 1e-6 (the grader calls it on float64 copies)."""

import torch

EPS = 1e-6


def reference(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, eps=EPS)
