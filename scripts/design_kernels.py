"""Candidate designs that scripts/design_bench.py times beside the Triton solutions, kept out of the solutions (whose
text the mistake tests edit) until a GPU shows one is faster; then it replaces the solution's loop.

Both let Triton's pipeliner stage the loads: a `tl.range(..., num_stages=S)` loop whose loads it turns into cp.async
copies into shared memory, S - 1 iterations ahead (checked in the sm_90 PTX: cp.async.cg 16 bytes), where the
solutions load a tile or row group when its turn comes (histogram) or one group ahead into registers
(layer_norm_backward), which leaves fewer bytes in flight than an H100 or H200 needs.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def histogram_pipelined_kernel(x_ptr, counts_ptr, n, BINS: tl.constexpr, BLOCK: tl.constexpr, TILES: tl.constexpr,
                               STAGES: tl.constexpr):
    chunk_start = tl.program_id(0) * (TILES * BLOCK)
    local = tl.zeros([BINS], dtype=tl.int32)
    for tile in tl.range(0, TILES, num_stages=STAGES):
        offsets = chunk_start + tile * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        local += tl.histogram(tl.load(x_ptr + offsets, mask=mask, other=0), BINS, mask=mask)
    tl.atomic_add(counts_ptr + tl.arange(0, BINS), local, mask=local > 0, sem="relaxed")


def histogram_pipelined(x: torch.Tensor, counts: torch.Tensor, BLOCK: int, TILES: int, num_warps: int,
                        stages: int) -> None:
    counts.zero_()
    grid = (triton.cdiv(x.numel(), TILES * BLOCK),)
    histogram_pipelined_kernel[grid](x, counts, x.numel(), BINS=256, BLOCK=BLOCK, TILES=TILES, STAGES=stages,
                                     num_warps=num_warps)


@triton.jit
def layer_norm_backward_pipelined_kernel(x_ptr, w_ptr, dy_ptr, mean_ptr, rstd_ptr, dx_ptr, dw_part_ptr, db_part_ptr,
                                         x_row_stride, dy_row_stride, dx_row_stride, n_rows, n_cols,
                                         BLOCK: tl.constexpr, STAGES: tl.constexpr):
    """The solution's stage 1 for rows of up to BLOCK columns, one row a step, the loads left to the pipeliner."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    col_mask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK], tl.float32)
    db = tl.zeros([BLOCK], tl.float32)
    for row in tl.range(pid, n_rows, tl.num_programs(0), num_stages=STAGES):
        r = tl.cast(row, tl.int64)
        x = tl.load(x_ptr + r * x_row_stride + cols, mask=col_mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + r * dy_row_stride + cols, mask=col_mask, other=0.0).to(tl.float32)
        rstd = tl.load(rstd_ptr + row)
        xhat = tl.where(col_mask, (x - tl.load(mean_ptr + row)) * rstd, 0.0)
        wdy = w * dy
        c1 = tl.sum(xhat * wdy, axis=0) / n_cols
        c2 = tl.sum(wdy, axis=0) / n_cols
        dx = (wdy - (xhat * c1 + c2)) * rstd
        tl.store(dx_ptr + r * dx_row_stride + cols, dx.to(dx_ptr.dtype.element_ty), mask=col_mask)
        dw += dy * xhat
        db += dy
    tl.store(dw_part_ptr + pid * n_cols + cols, dw, mask=col_mask)
    tl.store(db_part_ptr + pid * n_cols + cols, db, mask=col_mask)


def layer_norm_backward_pipelined(solution, x, weight, dy, mean, rstd, dx, dw, db, num_warps: int, stages: int,
                                  programs_per_sm: int) -> None:
    """Stage 1 above, then the solution's own stage 2 (`solution`: its module) over the programs' partial rows."""
    n_rows, n_cols = x.shape
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 4
    programs = min(n_rows, sms * programs_per_sm)
    partials = torch.empty((2, programs, n_cols), dtype=torch.float32, device=x.device)
    layer_norm_backward_pipelined_kernel[(programs,)](x, weight, dy, mean, rstd, dx, partials[0], partials[1],
                                                      x.stride(0), dy.stride(0), dx.stride(0), n_rows, n_cols,
                                                      BLOCK=triton.next_power_of_2(n_cols), STAGES=stages,
                                                      num_warps=num_warps)
    block_n = solution.SUM_BLOCK_N if x.is_cuda else solution.CPU_SUM_BLOCK_N
    solution.sum_partials_kernel[(triton.cdiv(n_cols, block_n),)](partials[0], partials[1], dw, db, programs, n_cols,
                                                                  BLOCK_M=solution.SUM_BLOCK_M, BLOCK_N=block_n,
                                                                  num_warps=4)
