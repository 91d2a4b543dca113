"""Reference: a per-column scale and shift, then the exact (erf) GELU — three ops PyTorch runs unfused.

    out = gelu(x * scale + shift)        scale and shift: one value per column, broadcast over the rows

The grader calls this on float64 copies of the inputs for the numerics: the truth your float32 kernel,
rounded once at the store, is compared with. On the GPU it is called in the case's dtype and timed beside
your kernel as "torch": there it is three kernels (`x * scale` writes a temporary, `+ shift` reads it and
writes another, `F.gelu` reads that and writes out), 6 MN elements through HBM where yours moves 2 MN."""

import torch
import torch.nn.functional as F


def reference(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    return F.gelu(x * scale + shift)
