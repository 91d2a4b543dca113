"""Days 66-69 — your own forward and backward kernels as a torch.autograd.Function.

A kernel launched from Python computes an answer, but autograd cannot differentiate through it: it
never saw the arithmetic. torch.autograd.Function is how you give autograd a forward and the backward
that goes with it. Here the op is softmax with a temperature, row-wise over x (M x N):

    y  = softmax(x / T)                         (forward kernel: one program per row, max subtracted)
    dx = y * (dy - sum(y * dy, row)) / T        (backward kernel: from the saved OUTPUT y and dy)

The grader checks y, then your gradients against autograd through the reference (float64 truth, your
dtype's tolerance), runs torch.autograd.gradcheck on float64 copies of a tiny case (so your kernels must
take float64 and compute in float64 then), and fails a backward that computes with torch operators
(the gradient must come from your backward kernel; torch.empty / empty_like for the output are fine).

Read README.md. Grade with: kcourse grade autograd_function
"""

import torch
import triton
import triton.language as tl


@triton.jit
def softmax_forward_kernel(
    x_ptr, y_ptr, x_row_stride, y_row_stride, n_cols, inv_t, BLOCK: tl.constexpr, ACC: tl.constexpr
):
    # TODO: row = tl.program_id(0).to(tl.int64); cols = tl.arange(0, BLOCK); mask = cols < n_cols
    #       x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=-float("inf")).to(ACC)
    #       z = (x - max(x)) * inv_t      (T > 0: subtract the max BEFORE dividing by a small T, or exp overflows)
    #       y = exp(z) / sum(exp(z));  tl.store(y_ptr + row * y_row_stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
    pass


@triton.jit
def softmax_backward_kernel(
    y_ptr,
    dy_ptr,
    dx_ptr,
    y_row_stride,
    dy_row_stride,
    dx_row_stride,
    n_cols,
    inv_t,
    BLOCK: tl.constexpr,
    ACC: tl.constexpr,
):
    # TODO: load a row of y and of dy (masked, other=0.0, .to(ACC))
    #       dot = sum(y * dy);  dx = y * (dy - dot) * inv_t      (both terms, and the chain rule's 1 / T)
    #       store dx in dx's dtype
    pass


def _acc(t: torch.Tensor):
    """The kernels' arithmetic type: float64 for float64 tensors (gradcheck), float32 otherwise."""
    return tl.float64 if t.dtype == torch.float64 else tl.float32


class SoftmaxTemperature(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, T: float) -> torch.Tensor:
        # TODO: y = torch.empty_like(x, memory_format=torch.contiguous_format); launch
        #       softmax_forward_kernel[(M,)](x, y, x.stride(0), y.stride(0), N, 1.0 / T,
        #                                   BLOCK=triton.next_power_of_2(N), ACC=_acc(x))
        #       (x may be a row slice: pass its row stride; columns are contiguous)
        #       ctx.save_for_backward(y)   — the OUTPUT: the backward formula is written in y
        #       ctx.T = T                  — a float is kept on ctx (save_for_backward takes tensors)
        #       return y
        raise NotImplementedError("write softmax_forward_kernel and launch it in SoftmaxTemperature.forward()")

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        # TODO: (y,) = ctx.saved_tensors; dx = torch.empty_like(y)
        #       launch softmax_backward_kernel (dy may arrive with any strides: dy = dy.contiguous() if dy.stride(1) != 1)
        #       return dx, None            — one gradient per forward argument, in their order; T is a float: None
        raise NotImplementedError("write softmax_backward_kernel and launch it in SoftmaxTemperature.backward()")


def softmax_temperature(x: torch.Tensor, T: float) -> torch.Tensor:
    """softmax(x / T) over each row of a 2-D x, differentiable through your backward kernel."""
    return SoftmaxTemperature.apply(x, T)
