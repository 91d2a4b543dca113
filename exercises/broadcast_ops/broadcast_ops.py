"""100-day challenge, days 31 and 34 — element-wise, compound and conditional operations on a 2-D tile.

    out[i, j] = x[i, j] * scale[j] + bias[i]   if x[i, j] > threshold   (strictly greater)
                leaky * x[i, j]                 otherwise

scale has one entry per COLUMN (N of them), bias one per ROW (M of them). Each program owns a
BLOCK_M x BLOCK_N tile: load the tile of x, the BLOCK_N entries of scale and the BLOCK_M entries of bias,
broadcast the two vectors over the tile, and pick a branch per element with tl.where. Read README.md for
the details (strides, masks, dtypes) and a path to a fast kernel.
Grade with: kcourse grade broadcast_ops
"""

import torch
import triton
import triton.language as tl


@triton.jit
def broadcast_ops_kernel(
    x_ptr,
    scale_ptr,
    bias_ptr,
    out_ptr,
    M,
    N,
    x_row_stride,
    out_row_stride,
    threshold,
    leaky,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # TODO: rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)   -> shape [BLOCK_M]
    #       cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)   -> shape [BLOCK_N]
    #       mask = (rows < M)[:, None] & (cols < N)[None, :]            -> shape [BLOCK_M, BLOCK_N]
    #       x: tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    #       scale: tl.load(scale_ptr + cols, mask=cols < N, ...) and use it as scale[None, :] (same for every row)
    #       bias:  tl.load(bias_ptr + rows, mask=rows < M, ...)  and use it as bias[:, None]  (same for every column)
    #       out = tl.where(x > threshold, x * scale[None, :] + bias[:, None], leaky * x)
    #       tl.store(out_ptr + rows[:, None] * out_row_stride + cols[None, :], out.to(out_ptr.dtype.element_ty), mask=mask)
    pass


def broadcast_ops(
    x: torch.Tensor,
    scale: torch.Tensor,
    bias: torch.Tensor,
    out: torch.Tensor,
    threshold: float,
    leaky: float,
    BLOCK_M: int = 32,
    BLOCK_N: int = 32,
    num_warps: int = 4,
) -> None:
    """out[:] = where(x > threshold, x * scale[None, :] + bias[:, None], leaky * x) for 2-D x and out, scale
    of length N and bias of length M. BLOCK_M, BLOCK_N and num_warps are yours to tune (`kcourse tune`)."""
    # TODO: M, N = x.shape; launch broadcast_ops_kernel over the grid
    #       (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N)) with x.stride(0) and out.stride(0),
    #       then delete the line below.
    raise NotImplementedError("write broadcast_ops_kernel and launch it in broadcast_ops()")
