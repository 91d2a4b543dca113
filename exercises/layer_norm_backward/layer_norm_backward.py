"""Week 5 / day 46 (stretch) — layer norm backward in Triton.

The forward (exercises/layer_norm) saved each row's mean and rstd = 1/sqrt(var + eps). From them, x,
weight and the upstream gradient dy, compute
    xhat = (x - mean) * rstd,  wdy = weight * dy
    dx   = (wdy - (xhat * mean_j(xhat * wdy) + mean_j(wdy))) * rstd     (per row, means over its N columns)
    dw   = sum over rows of dy * xhat,   db = sum over rows of dy        (float32, N values each)
dx is per row, like the forward. dw and db sum over all M rows: do it in two stages — each program sums
its rows into a float32 partial row of a [P, N] buffer, then a second kernel sums the P partial rows.
Read README.md for the details. Grade with: kcourse grade week5 layer_norm_backward
"""

import torch
import triton
import triton.language as tl


@triton.jit
def layer_norm_backward_kernel(
    x_ptr,
    w_ptr,
    dy_ptr,
    mean_ptr,
    rstd_ptr,
    dx_ptr,
    dw_part_ptr,
    db_part_ptr,
    x_row_stride,
    dy_row_stride,
    dx_row_stride,
    n_rows,
    n_cols,
    BLOCK: tl.constexpr,
):
    # TODO: pid = tl.program_id(0); cols = tl.arange(0, BLOCK); mask = cols < n_cols
    #       w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)      (once per program)
    #       dw = tl.zeros([BLOCK], tl.float32); db = the same                  (this program's running sums)
    #       for row in range(pid, n_rows, tl.num_programs(0)):
    #           x, dy: tl.load(... + row * <its own row stride> + cols, mask=mask, other=0.0).to(tl.float32)
    #           mean, rstd = tl.load(mean_ptr + row), tl.load(rstd_ptr + row)
    #           xhat = tl.where(mask, (x - mean) * rstd, 0.0); wdy = w * dy
    #           c1 = tl.sum(xhat * wdy, axis=0) / n_cols; c2 = tl.sum(wdy, axis=0) / n_cols
    #           tl.store(dx_ptr + row * dx_row_stride + cols, ((wdy - (xhat * c1 + c2)) * rstd).to(dx_ptr.dtype.element_ty), mask=mask)
    #           dw += dy * xhat; db += dy
    #       tl.store(dw_part_ptr + pid * n_cols + cols, dw, mask=mask); the same for db
    pass


@triton.jit
def sum_partials_kernel(
    dw_part_ptr, db_part_ptr, dw_ptr, db_ptr, n_parts, n_cols, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr
):
    # TODO: cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    #       loop over the n_parts partial rows in tiles of BLOCK_M: load a [BLOCK_M, BLOCK_N] tile (masked on both
    #       axes, other=0.0) of each buffer and add it to a float32 accumulator; then
    #       tl.store(dw_ptr + cols, tl.sum(acc_dw, axis=0), mask=cols < n_cols); the same for db
    pass


def layer_norm_backward(
    x: torch.Tensor,
    weight: torch.Tensor,
    dy: torch.Tensor,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    dx: torch.Tensor,
    dw: torch.Tensor,
    db: torch.Tensor,
    num_warps: int = 8,
    programs_per_sm: int | None = 2,
) -> None:
    """dx, dw, db of a layer norm over the last dimension of a 2-D x, from the forward's saved mean and
    rstd (float32, one per row). dw and db are float32. num_warps and programs_per_sm are yours to tune
    (`kcourse tune layer_norm_backward`)."""
    # TODO: sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 4
    #       programs = min(n_rows, sms * programs_per_sm)                  (every program gets a row or more)
    #       partials = torch.empty((2, programs, n_cols), dtype=torch.float32, device=x.device)
    #       layer_norm_backward_kernel[(programs,)](x, weight, dy, mean, rstd, dx, partials[0], partials[1],
    #           x.stride(0), dy.stride(0), dx.stride(0), n_rows, n_cols, BLOCK=triton.next_power_of_2(n_cols),
    #           num_warps=num_warps)
    #       sum_partials_kernel[(triton.cdiv(n_cols, 32),)](partials[0], partials[1], dw, db, programs, n_cols,
    #           BLOCK_M=64, BLOCK_N=32)
    #       then delete the line below.
    raise NotImplementedError("write the two kernels and launch them in layer_norm_backward()")
