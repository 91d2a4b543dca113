"""Solution — per-row sum, max and argmax over long rows, in one read of x.

Each program walks its stretch of a row in BLOCK-wide steps and keeps, per lane, a float32 running sum
and a running (max, index) pair; only at the end are the lanes reduced: the sum with tl.sum, the max
with tl.max, and the argmax as the smallest index among the lanes holding that max (lane j saw indices
j, j + BLOCK, ... in order and kept the first of equal values with `>`, so that is the row's first).
Full blocks load unmasked (16-byte vector loads); only the one tail block is masked (-inf for the max,
0 for the sum).

Few long rows (M = 8, N = 1M) would leave most of the GPU idle with a program per row, so then each
row is split into chunks, one program each, writing float32 partials; a second small kernel combines
a row's partials (sum, max, and the first chunk holding the max wins the argmax). No atomics: the
result is the same bits on every run."""

import torch
import triton
import triton.language as tl

TARGET_PROGRAMS = 1024  # enough programs to fill an H100 (132 SMs x ~8), fixed so results never depend on the GPU
MIN_CHUNK_BLOCKS = (
    8  # a program walks 8 blocks or more: its final lane reduction and partials stay small beside its loads
)
INDEX_PAST_END = tl.constexpr(
    2**31 - 1
)  # larger than every index: the min over lanes ignores lanes not holding the max


@triton.jit
def row_chunk_kernel(x_ptr, sum_ptr, max_ptr, idx_ptr, n_cols, x_row_stride, chunk, n_parts, BLOCK: tl.constexpr):
    """Program (row, part) reduces columns [part * chunk, min((part + 1) * chunk, n_cols)) of its row and
    writes (sum, max, first index of the max) at [row * n_parts + part]: the final outputs when n_parts == 1."""
    row = tl.program_id(0).to(tl.int64)
    part = tl.program_id(1)
    x_row = x_ptr + row * x_row_stride
    start = part * chunk
    stop = tl.minimum(start + chunk, n_cols)
    lanes = tl.arange(0, BLOCK)
    run_sum = tl.zeros([BLOCK], dtype=tl.float32)
    run_max = tl.full([BLOCK], float("-inf"), dtype=tl.float32)
    run_idx = start + lanes  # a lane that never sees more than -inf answers its first index
    for step in range(0, (stop - start) // BLOCK):  # full blocks: no mask
        cols = start + step * BLOCK + lanes
        x = tl.load(x_row + cols).to(tl.float32)
        run_sum += x
        take = x > run_max  # strictly greater: the first of equal values stays
        run_max = tl.where(take, x, run_max)
        run_idx = tl.where(take, cols, run_idx)
    cols = start + ((stop - start) // BLOCK) * BLOCK + lanes  # the tail (maybe empty)
    mask = cols < stop
    x = tl.load(x_row + cols, mask=mask, other=float("-inf")).to(tl.float32)
    run_sum += tl.where(mask, x, 0.0)
    take = x > run_max
    run_max = tl.where(take, x, run_max)
    run_idx = tl.where(take, cols, run_idx)

    best = tl.max(run_max, axis=0)
    first = tl.min(tl.where(run_max == best, run_idx, INDEX_PAST_END), axis=0)
    slot = row * n_parts + part
    tl.store(sum_ptr + slot, tl.sum(run_sum, axis=0))
    tl.store(max_ptr + slot, best)
    tl.store(idx_ptr + slot, first)


@triton.jit
def combine_parts_kernel(
    part_sum_ptr, part_max_ptr, part_idx_ptr, sum_ptr, max_ptr, idx_ptr, n_parts, PARTS: tl.constexpr
):
    """One program per row: its n_parts partials, in column order, to the row's answers."""
    row = tl.program_id(0).to(tl.int64)
    parts = tl.arange(0, PARTS)
    mask = parts < n_parts
    sums = tl.load(part_sum_ptr + row * n_parts + parts, mask=mask, other=0.0)
    maxes = tl.load(part_max_ptr + row * n_parts + parts, mask=mask, other=float("-inf"))
    idxs = tl.load(part_idx_ptr + row * n_parts + parts, mask=mask, other=INDEX_PAST_END)
    best = tl.max(maxes, axis=0)
    tl.store(sum_ptr + row, tl.sum(sums, axis=0))
    tl.store(max_ptr + row, best)
    tl.store(idx_ptr + row, tl.min(tl.where(maxes == best, idxs, INDEX_PAST_END), axis=0))


def parts_per_row(n_rows: int, n_cols: int, block: int) -> int:
    """How many programs share a row: 1 when the rows alone fill the GPU, else enough to reach
    TARGET_PROGRAMS, never a chunk shorter than MIN_CHUNK_BLOCKS blocks."""
    wanted = triton.cdiv(TARGET_PROGRAMS, max(n_rows, 1))
    return max(1, min(wanted, triton.cdiv(n_cols, MIN_CHUNK_BLOCKS * block)))


def row_reduce(
    x: torch.Tensor,
    sums: torch.Tensor,
    maxes: torch.Tensor,
    argmaxes: torch.Tensor,
    BLOCK: int = 2048,
    num_warps: int = 8,
) -> None:
    """sums[i] = x[i].sum() (float32), maxes[i] = x[i].max(), argmaxes[i] = first index of it (int64)."""
    n_rows, n_cols = x.shape
    n_parts = parts_per_row(n_rows, n_cols, BLOCK)
    chunk = triton.cdiv(triton.cdiv(n_cols, n_parts), BLOCK) * BLOCK  # whole blocks, so only the last chunk is ragged
    n_parts = triton.cdiv(n_cols, chunk)
    if n_parts == 1:
        row_chunk_kernel[(n_rows, 1)](
            x, sums, maxes, argmaxes, n_cols, x.stride(0), chunk, 1, BLOCK=BLOCK, num_warps=num_warps
        )
        return
    part_sum = torch.empty(n_rows * n_parts, dtype=torch.float32, device=x.device)
    part_max = torch.empty(n_rows * n_parts, dtype=torch.float32, device=x.device)
    part_idx = torch.empty(n_rows * n_parts, dtype=torch.int32, device=x.device)
    row_chunk_kernel[(n_rows, n_parts)](
        x, part_sum, part_max, part_idx, n_cols, x.stride(0), chunk, n_parts, BLOCK=BLOCK, num_warps=num_warps
    )
    combine_parts_kernel[(n_rows,)](
        part_sum, part_max, part_idx, sums, maxes, argmaxes, n_parts, PARTS=triton.next_power_of_2(n_parts), num_warps=4
    )
