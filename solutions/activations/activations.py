"""Solution — activation functions in Triton: GELU (erf), GELU (tanh approximation), SiLU, and bias + GELU.

Each is one read and one write per element, computed in float32 and rounded once to out's dtype:

    gelu_erf(x)  = 0.5 x (1 + erf(x / sqrt 2))                     F.gelu(x)
    gelu_tanh(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)   F.gelu(x, approximate="tanh")
    silu(x)      = x / (1 + e^-x)                                  F.silu(x)
    bias_gelu    = gelu_erf(x + bias[col])                         F.gelu(x + bias)

0.5 (1 + tanh(u)) is sigmoid(2u), so the tanh form is x / (1 + e^-2u): no cancellation of 1 + tanh(u) for
x < 0, and no inf / inf where e^2u overflows (u passes 44 from x ~ 10 up). The three plain activations
run one flat kernel over the contiguous tensor; bias + GELU runs on tiles of ROWS x BLOCK, its bias
block loaded once per tile and reused down the rows (no per-element integer modulo to find the column).
"""

import torch
import triton
import triton.language as tl

SQRT1_2 = tl.constexpr(0.7071067811865476)  # 1 / sqrt(2)
SQRT_2_OVER_PI = tl.constexpr(0.7978845608028654)  # sqrt(2 / pi)
GELU_CUBIC = tl.constexpr(0.044715)


# erf in 11 instructions (a degree-7 polynomial and one exp2), where libdevice's erff (tl.math.erf) takes about
# 28: in 16-bit dtypes an H200's memory delivers elements faster than its ALUs get through those (README, ladder
# step 3). erfc(a) ~ 2^p(a) for a = |x| in [0, 4], p fitted to log2(erfc) with p(0) = 0 (minimax of erf's
# absolute error): erf is within 8e-8, 1.6e-7 in float32 arithmetic, and the GELU's error is |t| / 2 times that,
# about 2% of float32's tolerance at most. At a = 4, 2^p < 2^-25 and 1 - 2^p rounds to exactly 1: the GELU is
# exactly t far right and exactly 0 far left, never NaN.
@triton.jit
def erf(x):
    a = tl.minimum(tl.abs(x), 4.0)  # p holds on [0, 4] only; erf is +-1 in float32 from |x| = 3.93 anyway
    p = tl.fma(a, 1.0022153e-04, -4.6157712e-04)  # tl.fma: one instruction whatever the fp-fusion setting
    p = tl.fma(p, a, -2.3022252e-03)
    p = tl.fma(p, a, 2.9452497e-02)
    p = tl.fma(p, a, -1.4896366e-01)
    p = tl.fma(p, a, -9.1832864e-01)
    p = tl.fma(p, a, -1.6279137e00)
    r = 1.0 - tl.exp2(p * a)  # erf(a) = 1 - erfc(a)
    sign = x.to(tl.uint32, bitcast=True) & 0x80000000  # copysign(r, x): one LOP3 (a compare and a select: two)
    return (r.to(tl.uint32, bitcast=True) | sign).to(tl.float32, bitcast=True)


@triton.jit
def gelu_erf_f32(x):
    return 0.5 * x * (1.0 + erf(x * SQRT1_2))


@triton.jit
def gelu_tanh_f32(x):
    u = SQRT_2_OVER_PI * (x + GELU_CUBIC * x * x * x)
    return x / (1.0 + tl.exp(-2.0 * u))  # = 0.5 x (1 + tanh(u))


@triton.jit
def silu_f32(x):
    return x / (1.0 + tl.exp(-x))  # e^-x = inf for x << 0 gives -0, as silu(x) ~ x e^x is there


@triton.jit
def activation_kernel(x_ptr, out_ptr, n, ACT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    if ACT == "gelu_erf":
        y = gelu_erf_f32(x)
    elif ACT == "gelu_tanh":
        y = gelu_tanh_f32(x)
    else:
        y = silu_f32(x)
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def bias_gelu_kernel(x_ptr, bias_ptr, out_ptr, n_rows, n_cols, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    bias = tl.load(bias_ptr + cols, mask=cols < n_cols).to(tl.float32)  # by column: one per tile
    offs = rows[:, None].to(tl.int64) * n_cols + cols[None, :]
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    v = x + bias[None, :]  # in float32: x + bias rounded to x's dtype first is the unfused formula's error
    tl.store(out_ptr + offs, gelu_erf_f32(v).to(out_ptr.dtype.element_ty), mask=mask)


def _elementwise(x: torch.Tensor, out: torch.Tensor, act: str, BLOCK: int, num_warps: int) -> None:
    if not (x.is_contiguous() and out.is_contiguous()):
        raise ValueError("x and out must be contiguous (the exercise's tensors are): use a strided kernel otherwise")
    n = x.numel()
    activation_kernel[(triton.cdiv(n, BLOCK),)](x, out, n, ACT=act, BLOCK=BLOCK, num_warps=num_warps)


def gelu_erf(x: torch.Tensor, out: torch.Tensor, BLOCK: int = 4096, num_warps: int = 8) -> None:
    _elementwise(x, out, "gelu_erf", BLOCK, num_warps)


def gelu_tanh(x: torch.Tensor, out: torch.Tensor, BLOCK: int = 4096, num_warps: int = 8) -> None:
    _elementwise(x, out, "gelu_tanh", BLOCK, num_warps)


def silu(x: torch.Tensor, out: torch.Tensor, BLOCK: int = 4096, num_warps: int = 8) -> None:
    _elementwise(x, out, "silu", BLOCK, num_warps)


def bias_gelu(x: torch.Tensor, bias: torch.Tensor, out: torch.Tensor, BLOCK: int = 1024, num_warps: int = 4) -> None:
    """out = gelu_erf(x + bias), bias (N,) added to every row of the contiguous M x N x."""
    n_rows, n_cols = x.shape
    BLOCK = min(BLOCK, triton.next_power_of_2(n_cols))
    rows = max(1, 4096 // BLOCK)  # tiles of about 4096 elements: 32 a thread at 4 warps (tuned on the H200: +5% over 8)
    num_warps = max(1, min(num_warps, rows * BLOCK // 256))
    grid = (triton.cdiv(n_rows, rows), triton.cdiv(n_cols, BLOCK))
    bias_gelu_kernel[grid](x, bias, out, n_rows, n_cols, ROWS=rows, BLOCK=BLOCK, num_warps=num_warps)
