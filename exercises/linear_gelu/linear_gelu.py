"""Day 51 — a composite kernel: a linear layer and its GELU in one Triton kernel, out = GELU(x @ w + b).

x is M x K, w is K x N, b has N entries (one per output column), out is M x N; all float16 or all bfloat16.
Start from your matmul_triton kernel: the K loop is the same (float32 accumulator, masked K tail). What is
new is the epilogue: once a tile's sum is done, add the bias and apply the GELU to the float32 tile in
registers, then store it once. The M x N pre-activation never goes to memory.

Two entry points, each graded as a version:
    kcourse grade linear_gelu                    linear_gelu: the exact GELU, 0.5 t (1 + erf(t / sqrt 2))
    kcourse grade linear_gelu --lang gelu_tanh   linear_gelu_tanh: 0.5 t (1 + tanh(sqrt(2/pi) (t + 0.044715 t^3)))
M, N and K are not multiples of any block; w may be a transposed view and x or out row slices: index with
the strides. Read README.md (its ladder goes from two kernels to one fused, autotuned kernel).
"""

import os

import torch
import triton
import triton.language as tl

# Globals a kernel reads must be tl.constexpr.
SQRT1_2 = tl.constexpr(0.7071067811865476)  # 1 / sqrt(2)
SQRT_2_OVER_PI = tl.constexpr(0.7978845608028654)  # sqrt(2 / pi)
GELU_CUBIC = tl.constexpr(0.044715)

# The grader runs Triton under the interpreter on a machine without a GPU (TRITON_INTERPRET=1). There
# @triton.autotune would time every config on every new shape, on the CPU: give it one config there.
ON_CPU = os.environ.get("TRITON_INTERPRET") == "1"
GPU_CONFIGS = [
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8}, num_stages=3, num_warps=4),
    # TODO (ladder step 3): add the configs that suit your GPU (bigger tiles, more stages, 8 warps)
]
CPU_CONFIGS = [triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 2})]


@triton.jit
def gelu_erf_f32(t):
    # TODO: 0.5 * t * (1 + erf(t / sqrt 2)), with tl.math.erf (t is float32)
    return t


@triton.jit
def gelu_tanh_f32(t):
    # TODO: u = SQRT_2_OVER_PI * (t + GELU_CUBIC * t^3); 0.5 * t * (1 + tanh(u)). Triton has no tl.tanh, and
    #       0.5 * (1 + tanh(u)) is sigmoid(2u): t / (1 + tl.exp(-2u)) neither cancels nor overflows to NaN.
    return t


@triton.autotune(configs=CPU_CONFIGS if ON_CPU else GPU_CONFIGS, key=["M", "N", "K"])
@triton.jit
def linear_gelu_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    out_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_xk,  # x[m, k] is at x_ptr + m * stride_xm + k * stride_xk
    stride_wk,
    stride_wn,
    stride_om,
    stride_on,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    TANH: tl.constexpr,  # which GELU: a constexpr, so only the branch taken is compiled
):
    # TODO: the matmul, as in matmul_triton: this program's tile (pid_m, pid_n) of out, in groups of
    #       GROUP_M tile-rows (README step 3); acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32); loop
    #       over K in BLOCK_K steps, loads masked with other=0.0 where they hang over an edge (K included),
    #       acc = tl.dot(a, b, acc).
    # TODO: the epilogue, on acc in registers: the bias by COLUMN, tl.load(b_ptr + cols, mask=cols < N),
    #       in float32, added to every row (bias[None, :]); then gelu_tanh_f32 if TANH else gelu_erf_f32.
    #       Store once, in out's dtype (y.to(out_ptr.dtype.element_ty)), masked on rows < M and cols < N.
    pass


def _linear_gelu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, out: torch.Tensor, tanh: bool) -> None:
    # TODO: launch linear_gelu_kernel over cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N) programs, e.g.
    #       grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
    #       passing x.stride(0), x.stride(1), w.stride(0), ... and TANH=tanh, then delete the line below.
    raise NotImplementedError(
        "write linear_gelu_kernel and gelu_erf_f32 / gelu_tanh_f32, and launch the kernel in _linear_gelu()"
    )


def linear_gelu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    """out[:] = gelu(x @ w + b), the exact GELU (F.gelu's default)."""
    _linear_gelu(x, w, b, out, tanh=False)


def linear_gelu_tanh(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    """out[:] = gelu(x @ w + b), the tanh approximation (F.gelu(..., approximate="tanh"))."""
    _linear_gelu(x, w, b, out, tanh=True)
