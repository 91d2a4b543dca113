"""Reference: how many values fall in each of the 256 bins (value v counts in bin v), and the transforms
that make the inputs (values 0..255, drawn as U[0,1) floats, times 1.5 on a second trial)."""

import torch

BINS = 256


def reference(x: torch.Tensor) -> torch.Tensor:
    if x.is_cuda:  # torch's GPU histogram, timed beside yours; on int32 it counts exactly in int32
        return torch.histc(x, bins=BINS, min=0, max=BINS)
    return torch.bincount(x.flatten(), minlength=BINS)  # the grader's truth (on the CPU histc takes floats only)


def uniform_bins(x: torch.Tensor) -> torch.Tensor:
    """Every bin equally likely (on a second trial's x in [0, 1.5) the low half of the bins twice as likely)."""
    return torch.floor(x * BINS).remainder_(BINS)  # whole numbers; the grader casts them to int32


def one_bin(x: torch.Tensor) -> torch.Tensor:
    """Every value the same (which one depends on the draw): the worst case for contention on one counter."""
    value = int(torch.floor(x.flatten()[0] * BINS)) % BINS
    return torch.full(x.shape, value, dtype=torch.int32)


def sorted_bins(x: torch.Tensor) -> torch.Tensor:
    """All bins, in ascending order: runs of about n / 256 equal values."""
    return uniform_bins(x).flatten().sort().values.reshape(x.shape)
