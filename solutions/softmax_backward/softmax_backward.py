"""Solution — fused row softmax backward: dx = y * (dy - sum(y * dy)), one read of y and dy, one write.

Rows that fit in registers (N up to 8192 here) are loaded once: the row sum and the update both work
on the registers. Longer rows take two passes over blocks (the sum, then the update); the second pass
finds the row in L2, where the first left it, so DRAM still sees about one read. num_warps grows with
the row so each thread holds a handful of elements of each input. Sums and arithmetic are float32
even for float16 inputs.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def softmax_backward_kernel(
    y_ptr, dy_ptr, dx_ptr, y_row_stride, dy_row_stride, dx_row_stride, n_cols, BLOCK: tl.constexpr
):
    row = tl.program_id(0).to(tl.int64)  # 64-bit offsets: row * stride passes 2^31 on big tensors
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    y = tl.load(y_ptr + row * y_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    dot = tl.sum(y * dy, axis=0)  # masked columns have y = 0: they add nothing
    dx = y * (dy - dot)
    tl.store(dx_ptr + row * dx_row_stride + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def softmax_backward_long_kernel(
    y_ptr, dy_ptr, dx_ptr, y_row_stride, dy_row_stride, dx_row_stride, n_cols, BLOCK: tl.constexpr
):
    row = tl.program_id(0).to(tl.int64)
    y_row, dy_row, dx_row = y_ptr + row * y_row_stride, dy_ptr + row * dy_row_stride, dx_ptr + row * dx_row_stride
    partial = tl.zeros([BLOCK], tl.float32)  # one running sum per lane, reduced once at the end
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        y = tl.load(y_row + cols, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_row + cols, mask=mask, other=0.0).to(tl.float32)
        partial += y * dy
    dot = tl.sum(partial, axis=0)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        y = tl.load(y_row + cols, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_row + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(dx_row + cols, (y * (dy - dot)).to(dx_ptr.dtype.element_ty), mask=mask)


MAX_FUSED = 8192


def softmax_backward(y: torch.Tensor, dy: torch.Tensor, dx: torch.Tensor, num_warps: int | None = None) -> None:
    n_rows, n_cols = y.shape
    strides = (y.stride(0), dy.stride(0), dx.stride(0))
    block = triton.next_power_of_2(n_cols)
    if block <= MAX_FUSED:
        num_warps = num_warps or (4 if block <= 1024 else 8 if block <= 4096 else 16)
        softmax_backward_kernel[(n_rows,)](y, dy, dx, *strides, n_cols, BLOCK=block, num_warps=num_warps)
    else:
        softmax_backward_long_kernel[(n_rows,)](y, dy, dx, *strides, n_cols, BLOCK=4096, num_warps=num_warps or 16)
