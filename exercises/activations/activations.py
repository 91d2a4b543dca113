"""Day 47 — activation functions in Triton: GELU (exact, with erf), GELU (tanh approximation), SiLU, and
bias + GELU (day 41's fusion of a linear layer's bias add with its activation).

One file, four entry points; each is graded on its own against torch's definition:
    kcourse grade activations --lang gelu_erf     (gelu_tanh, silu, bias_gelu)
Every tensor is contiguous; x and out are M x N, bias has N elements (one per column). Compute in float32,
round once when you store. Read README.md for the formulas and what the grader checks.
"""

import torch
import triton
import triton.language as tl

# Globals a kernel reads must be tl.constexpr.
SQRT1_2 = tl.constexpr(0.7071067811865476)  # 1 / sqrt(2)
SQRT_2_OVER_PI = tl.constexpr(0.7978845608028654)  # sqrt(2 / pi)
GELU_CUBIC = tl.constexpr(0.044715)


@triton.jit
def gelu_erf_f32(x):
    # TODO: 0.5 * x * (1 + erf(x / sqrt 2)), with tl.math.erf (x is float32)
    return x


@triton.jit
def gelu_tanh_f32(x):
    # TODO: u = SQRT_2_OVER_PI * (x + GELU_CUBIC * x^3); 0.5 * x * (1 + tanh(u)). Triton has no tl.tanh, and
    #       0.5 * (1 + tanh(u)) is sigmoid(2u): x / (1 + tl.exp(-2u)) neither cancels nor overflows to NaN.
    return x


@triton.jit
def silu_f32(x):
    # TODO: x * sigmoid(x) = x / (1 + tl.exp(-x))   (not x * e^x / (1 + e^x): e^x is inf past x = 88)
    return x


@triton.jit
def activation_kernel(x_ptr, out_ptr, n, ACT: tl.constexpr, BLOCK: tl.constexpr):
    # TODO: offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK); mask = offs < n
    #       x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    #       y = gelu_erf_f32(x) if ACT == "gelu_erf", gelu_tanh_f32(x) if "gelu_tanh", else silu_f32(x)
    #       (an if / elif on the constexpr ACT: only the branch taken is compiled)
    #       tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)
    pass


@triton.jit
def bias_gelu_kernel(x_ptr, bias_ptr, out_ptr, n_rows, n_cols, BLOCK: tl.constexpr):
    # TODO: one program per (row, block of BLOCK columns): row = tl.program_id(0), cols from tl.program_id(1);
    #       bias by COLUMN: tl.load(bias_ptr + cols, ...); x at row * n_cols + cols (row as tl.int64);
    #       v = x + bias in float32, then gelu_erf_f32(v), stored in out's dtype. Mask the columns.
    pass


def _elementwise(x: torch.Tensor, out: torch.Tensor, act: str, BLOCK: int, num_warps: int) -> None:
    # TODO: launch activation_kernel over the x.numel() elements, triton.cdiv(n, BLOCK) programs,
    #       then delete the line below.
    raise NotImplementedError(f"write activation_kernel and {act}_f32, and launch the kernel in _elementwise()")


def gelu_erf(x: torch.Tensor, out: torch.Tensor, BLOCK: int = 1024, num_warps: int = 4) -> None:
    _elementwise(x, out, "gelu_erf", BLOCK, num_warps)


def gelu_tanh(x: torch.Tensor, out: torch.Tensor, BLOCK: int = 1024, num_warps: int = 4) -> None:
    _elementwise(x, out, "gelu_tanh", BLOCK, num_warps)


def silu(x: torch.Tensor, out: torch.Tensor, BLOCK: int = 1024, num_warps: int = 4) -> None:
    _elementwise(x, out, "silu", BLOCK, num_warps)


def bias_gelu(x: torch.Tensor, bias: torch.Tensor, out: torch.Tensor, BLOCK: int = 1024, num_warps: int = 4) -> None:
    """out = gelu_erf(x + bias), bias (N,) added to every row of x (M x N)."""
    # TODO: grid = (M, triton.cdiv(N, BLOCK)); launch bias_gelu_kernel, then delete the line below.
    raise NotImplementedError("write bias_gelu_kernel and launch it in bias_gelu()")
