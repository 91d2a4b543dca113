"""Week 5 — fused row softmax backward in Triton.

Given y = softmax(x) (what the forward pass saved) and the upstream gradient dy, compute
dx = y * (dy - sum(y * dy)) row by row: each program loads one row of y and dy, takes the row sum of
y * dy, and stores the update. Read README.md for the details.
Grade with: kcourse grade week5 softmax_backward
"""

import torch
import triton
import triton.language as tl


@triton.jit
def softmax_backward_kernel(
    y_ptr, dy_ptr, dx_ptr, y_row_stride, dy_row_stride, dx_row_stride, n_cols, BLOCK: tl.constexpr
):
    # TODO: row = tl.program_id(0); cols = tl.arange(0, BLOCK); mask = cols < n_cols
    #       y and dy: tl.load(... + row * <its row stride> + cols, mask=mask, other=0.0).to(tl.float32)
    #       dot = tl.sum(y * dy, axis=0); dx = y * (dy - dot)
    #       tl.store(dx_ptr + row * dx_row_stride + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)
    pass


def softmax_backward(y: torch.Tensor, dy: torch.Tensor, dx: torch.Tensor, num_warps: int = 4) -> None:
    """dx[:] = y * (dy - (y * dy).sum(-1, keepdim=True)) for 2-D y, dy and dx. num_warps is yours to
    tune (`kcourse tune softmax_backward`)."""
    # TODO: launch softmax_backward_kernel with one program per row, BLOCK = triton.next_power_of_2(n_cols)
    #       and the three row strides (y.stride(0), dy.stride(0), dx.stride(0)), then delete the line below.
    raise NotImplementedError("write softmax_backward_kernel and launch it in softmax_backward()")
