"""Solution — out = where(x > threshold, x * scale[col] + bias[row], leaky * x), one read and one write.

Each program owns a BLOCK_M x BLOCK_N tile of 16 KB: wide along the rows (2 KB of contiguous columns, so
each thread moves 16 bytes at a time) and 8 rows deep (deeper when x is narrower). The tile loads its BLOCK_N entries of the
column vector `scale` and its BLOCK_M entries of the row vector `bias` once and broadcasts them over the
tile: scale[None, :] is the same for every row, bias[:, None] the same for every column. Both branches of
the condition are computed for every element and tl.where picks one (a select, never a blend: 0 * inf
would be NaN). Arithmetic is float32 whatever the dtype, rounded once on the store. Row offsets are
64-bit: row * stride passes 2^31 on big matrices.
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
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_in, col_in = rows < M, cols < N
    mask = row_in[:, None] & col_in[None, :]  # ragged edges in both directions
    rows64 = rows.to(tl.int64)[:, None]
    x = tl.load(x_ptr + rows64 * x_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    scale = tl.load(scale_ptr + cols, mask=col_in, other=0.0).to(tl.float32)  # one per column
    bias = tl.load(bias_ptr + rows, mask=row_in, other=0.0).to(tl.float32)  # one per row
    affine = x * scale[None, :] + bias[:, None]
    out = tl.where(x > threshold, affine, leaky * x)  # strictly greater: x == threshold takes leaky * x
    tl.store(out_ptr + rows64 * out_row_stride + cols[None, :], out.to(out_ptr.dtype.element_ty), mask=mask)


def broadcast_ops(
    x: torch.Tensor,
    scale: torch.Tensor,
    bias: torch.Tensor,
    out: torch.Tensor,
    threshold: float,
    leaky: float,
    BLOCK_M: int | None = None,
    BLOCK_N: int | None = None,
    num_warps: int = 4,
) -> None:
    M, N = x.shape
    tile = 16384 // x.element_size()  # 16 KB of x per program: 32 float32 (16 bf16 pairs) per thread at 4 warps
    block_n = BLOCK_N or min(2048 // x.element_size(), triton.next_power_of_2(N))  # up to 2 KB of a row
    block_m = BLOCK_M or min(max(1, tile // block_n), triton.next_power_of_2(M))  # deep tiles for narrow x
    grid = (triton.cdiv(M, block_m), triton.cdiv(N, block_n))
    broadcast_ops_kernel[grid](
        x,
        scale,
        bias,
        out,
        M,
        N,
        x.stride(0),
        out.stride(0),
        threshold,
        leaky,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        num_warps=num_warps,
    )
