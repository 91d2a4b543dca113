"""Solution — a fused Triton kernel registered as the PyTorch operator kcourse::scaled_residual_gelu.

out = gelu_tanh(x + scale * residual), one read of x and residual and one write of out per element.
gelu_tanh(h) = 0.5 h (1 + tanh(u)) with u = sqrt(2/pi) (h + 0.044715 h^3), and 0.5 (1 + tanh(u)) is
sigmoid(2u): out = h * sigmoid(2u), with no tanh to overflow (exp(2u) is inf past u = 44 in float32).

The operator is registered with torch.library.custom_op (schema from the type hints, mutates_args=()),
a fake implementation (shapes and dtypes only: what torch.compile traces with) and a backward
(register_autograd). scale is a tensor, loaded inside the kernel: a .item() would sync the GPU on
every call, break torch.compile's graph and lose scale's gradient.
"""

import torch
import triton
import triton.language as tl

SQRT_2_OVER_PI = 0.7978845608028654
COEFF = 0.044715
# A @triton.jit kernel may read a global only if it is a tl.constexpr (compiled in; the interpreter is lenient,
# the GPU compiler is not): the kernel uses these two, the Python backward the floats above.
K_SQRT_2_OVER_PI: tl.constexpr = tl.constexpr(SQRT_2_OVER_PI)
K_COEFF: tl.constexpr = tl.constexpr(COEFF)


@triton.jit
def scaled_residual_gelu_kernel(x_ptr, r_ptr, scale_ptr, out_ptr, n, BLOCK: tl.constexpr):
    start = tl.program_id(0).to(tl.int64) * BLOCK  # int64: offsets past 2^31 elements stay right
    offsets = start + tl.arange(0, BLOCK)
    mask = offsets < n
    scale = tl.load(scale_ptr).to(tl.float32)
    x = tl.load(x_ptr + offsets, mask=mask, eviction_policy="evict_first").to(tl.float32)
    r = tl.load(r_ptr + offsets, mask=mask, eviction_policy="evict_first").to(tl.float32)
    h = x + scale * r
    u = K_SQRT_2_OVER_PI * (h + K_COEFF * h * h * h)
    tl.store(out_ptr + offsets, (h * tl.sigmoid(2.0 * u)).to(out_ptr.dtype.element_ty), mask=mask)


@torch.library.custom_op("kcourse::scaled_residual_gelu", mutates_args=())
def scaled_residual_gelu_op(x: torch.Tensor, residual: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    # a custom op gets whatever strides its caller has: the flat kernel needs contiguous rows (a copy only
    # for a strided view; contiguous tensors pass through)
    x, residual = x.contiguous(), residual.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    block = 4096  # 16 elements a thread at 8 warps: 4 float4 loads of each input in flight
    scaled_residual_gelu_kernel[(triton.cdiv(n, block),)](x, residual, scale, out, n, BLOCK=block, num_warps=8)
    return out


@scaled_residual_gelu_op.register_fake
def _(x, residual, scale):
    return torch.empty_like(x, memory_format=torch.contiguous_format)  # what the real one returns: no values read


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)  # x, residual, scale: h is recomputed in the backward, not stored


def _backward(ctx, grad):
    x, residual, scale = ctx.saved_tensors
    h = x.float() + scale.float() * residual.float()
    inner = SQRT_2_OVER_PI * (h + COEFF * h * h * h)
    t = torch.tanh(inner)
    dgelu = 0.5 * (1 + t) + 0.5 * h * (1 - t * t) * SQRT_2_OVER_PI * (1 + 3 * COEFF * h * h)
    dh = grad.float() * dgelu
    grad_scale = (dh * residual.float()).sum().reshape(scale.shape)  # scale was broadcast: its gradient sums
    return dh.to(x.dtype), (dh * scale.float()).to(residual.dtype), grad_scale.to(scale.dtype)


scaled_residual_gelu_op.register_autograd(_backward, setup_context=_setup_context)


def scaled_residual_gelu(x: torch.Tensor, residual: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """gelu_tanh(x + scale * residual) for x and residual of one shape and a one-element scale: what a model
    calls, and what the grader runs under torch.compile(fullgraph=True)."""
    return torch.ops.kcourse.scaled_residual_gelu(x, residual, scale)
