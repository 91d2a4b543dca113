"""100-day challenge, day 39 — atomics in Triton: a 256-bin histogram of int32 values.

x holds n whole numbers in [0, 256); write counts[v] = how many of them equal v, for every v (0 for an
empty bin). counts holds garbage when you are called. Many programs add into the same 256 counters at
once: a plain load, add and store of a counter loses the other programs' updates (a race); an atomic
add does not. Under the Triton interpreter programs run one after another, so a race can pass on the
CPU and fail on the GPU. Read README.md for a path to a fast kernel.
Grade with: kcourse grade histogram --lang triton
"""

import torch
import triton
import triton.language as tl

BINS = 256


@triton.jit
def histogram_kernel(x_ptr, counts_ptr, n, BINS: tl.constexpr, BLOCK: tl.constexpr):
    # TODO (step 1): offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK); mask = offsets < n
    #       values = tl.load(x_ptr + offsets, mask=mask)
    #       tl.atomic_add(counts_ptr + values, 1, mask=mask)   # one atomic per value: correct, slow
    # Faster (README steps 2-3): count the block first with tl.histogram(values, BINS, mask=mask) (the
    #       mask keeps the lanes past n out of bin 0), then tl.atomic_add the block's BINS counts at once.
    #       Never tl.load + tl.store a counter other programs also update: that loses their updates.
    pass


def histogram(x: torch.Tensor, counts: torch.Tensor, BLOCK: int = 1024, num_warps: int = 4) -> None:
    """counts[v] = (x == v).sum() for v in 0..255, computed by histogram_kernel. BLOCK and num_warps are
    yours to tune (`kcourse tune histogram --lang triton`)."""
    # TODO: zero counts (counts.zero_(): the kernel only adds), launch histogram_kernel over
    #       triton.cdiv(x.numel(), BLOCK) programs with BINS=BINS, then delete the line below.
    raise NotImplementedError("write histogram_kernel and launch it in histogram()")
