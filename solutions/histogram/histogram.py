"""Solution — 256-bin histogram of int32 values in Triton: privatised per-program counts, few atomics.

Each program owns a chunk of TILES * BLOCK consecutive values. It walks the chunk a tile at a time and
counts each tile with tl.histogram (on the GPU: each warp's ballots and popcounts, added into one 256-bin
histogram in the program's shared memory, which never leaves the SM), keeping a running int32 count per bin
in registers. tl.histogram's instructions, not memory, are the limit: exercises/histogram/README.md. Only at the end
does it touch `counts`: one tl.atomic_add per non-empty bin, 256 at most per program, instead of one per
value. The masked lanes of the last tile are excluded from the count (`mask=`), not loaded as 0 and
counted in bin 0. `counts` is zeroed first (a memset), since the kernel only adds to it.
Bytes moved: 4n read.
"""

import torch
import triton
import triton.language as tl

BINS = 256


@triton.jit
def histogram_kernel(x_ptr, counts_ptr, n, BINS: tl.constexpr, BLOCK: tl.constexpr, TILES: tl.constexpr):
    chunk_start = tl.program_id(0) * (TILES * BLOCK)  # n < 2^31: int32 offsets are enough
    local = tl.zeros([BINS], dtype=tl.int32)  # this program's private counts
    for tile in range(TILES):
        offsets = chunk_start + tile * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        values = tl.load(x_ptr + offsets, mask=mask, other=0)
        local += tl.histogram(values, BINS, mask=mask)
    bins = tl.arange(0, BINS)
    # one atomic per non-empty bin: skewed data leaves most bins 0 and their atomics are skipped
    tl.atomic_add(counts_ptr + bins, local, mask=local > 0, sem="relaxed")


def histogram(x: torch.Tensor, counts: torch.Tensor, BLOCK: int = 2048, TILES: int = 16, num_warps: int = 4) -> None:
    """counts[v] = (x == v).sum() for v in 0..255. BLOCK, TILES and num_warps are yours to tune (`kcourse tune`)."""
    n = x.numel()
    if not x.is_cuda:  # the Triton interpreter (no GPU) takes a Python step per tile: far fewer, larger ones
        BLOCK, TILES = 1 << 16, 4
    counts.zero_()
    grid = (triton.cdiv(n, TILES * BLOCK),)
    histogram_kernel[grid](x, counts, n, BINS=BINS, BLOCK=BLOCK, TILES=TILES, num_warps=num_warps)
