"""Reference: the inclusive prefix sum, y[i] = x[0] + ... + x[i], in int32 (exact: the inputs keep every
prefix inside int32), and the transform that makes the inputs."""

import torch


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.cumsum(x, 0, dtype=torch.int32)


def small_ints(x: torch.Tensor) -> torch.Tensor:
    """Whole numbers in [-16, 32) from U[0, 1) draws (wrapped, so a second trial's draws in [0, 1.5) stay in
    range): mean about 7.5, so prefixes pass 2^24 by n = 2^24 and stay far below 2^31 at n = 2^27."""
    return torch.floor(x * 48).remainder_(48).sub_(16)  # whole numbers; the grader casts them to int32
