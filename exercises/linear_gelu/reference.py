"""References: a linear layer and its GELU, as eager PyTorch runs them — one function per version of the
exercise (spec.toml: each [variants.*] names its `reference`), and the transform that draws w.

    out = gelu(x @ w + b)        x: M x K, w: K x N, b: one per output column (N)

The grader calls the version's function with x, w and b on float64 copies for the numerics: the truth your
kernel (float32 sums, the GELU in float32, one rounding at the store) is compared with. On the GPU it is
called in the case's dtype and timed beside your kernel as "torch": there it is two kernels, cuBLAS's GEMM
with the bias added in its epilogue (F.linear), which writes the M x N pre-activation in x's dtype, then
F.gelu, which reads it back and writes out."""

import math

import torch
import torch.nn.functional as F


def linear_gelu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The exact GELU, F.gelu's default: 0.5 t (1 + erf(t / sqrt 2)) of t = x @ w + b."""
    return F.gelu(F.linear(x, w.T, b))


def linear_gelu_tanh(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """GPT-2's approximation: 0.5 t (1 + tanh(sqrt(2/pi) (t + 0.044715 t^3)))."""
    return F.gelu(F.linear(x, w.T, b), approximate="tanh")


def fan_in(w: torch.Tensor, *, K: int) -> torch.Tensor:
    """w drawn N(0, 1/K), as a layer is initialised: x @ w then has about unit variance whatever K, so the
    pre-activations sit where GELU bends (|t| of a few) rather than where it is already 0 or t."""
    return w / math.sqrt(K)
