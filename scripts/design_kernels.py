"""Kernels that scripts/design_bench.py times beside the Triton solutions, kept out of the solutions (whose text the
mistake tests edit).

histogram_counting_only: the Triton histogram's ceiling. tl.histogram is lowered (triton
lib/Conversion/TritonGPUToLLVM/HistogramOpToLLVM.cpp) to ballots, not to shared-memory atomics per value: for every
32 values a warp takes log2(256) = 8 ballots, then for each of its 8 bins a thread masks and popcounts them, about
100 instructions a warp for 32 values. This kernel loads one tile and counts it TILES times over, so memory never
waits: its rate is what the counting alone allows. Where the solution runs as fast as this, the instructions, not
memory, are its limit.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def histogram_counting_only_kernel(x_ptr, counts_ptr, BINS: tl.constexpr, BLOCK: tl.constexpr, TILES: tl.constexpr):
    values = tl.load(x_ptr + tl.program_id(0) * BLOCK + tl.arange(0, BLOCK))
    local = tl.zeros([BINS], dtype=tl.int32)
    for tile in range(TILES):  # each pass shifted by one bin, so the compiler cannot count once and multiply
        shifted = (values + tile) & (BINS - 1)
        local += tl.histogram(shifted, BINS, mask=shifted >= 0)  # a run-time mask, as the solution's tail has
    tl.atomic_add(counts_ptr + tl.arange(0, BINS), local, sem="relaxed")


def histogram_counting_only(
    x: torch.Tensor, counts: torch.Tensor, n: int, BLOCK: int, TILES: int, num_warps: int
) -> None:
    """Counts n values' worth into counts (+=): as many programs as the solution would launch for n, program p
    counting values p * BLOCK to (p + 1) * BLOCK TILES times."""
    grid = (triton.cdiv(n, TILES * BLOCK),)
    histogram_counting_only_kernel[grid](x, counts, BINS=256, BLOCK=BLOCK, TILES=TILES, num_warps=num_warps)
