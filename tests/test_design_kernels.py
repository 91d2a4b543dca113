"""scripts/design_kernels.py, the kernels that scripts/design_bench.py times on a GPU beside the Triton solutions:
on the CPU (Triton interpreter), the histogram's counting-only ceiling counts what it says it counts, so the rate
the bench prints for it is the rate of real counting work."""

from __future__ import annotations

import pytest
import torch
from conftest import ROOT
from interpreted import interpreter_on, load_interpreted


@pytest.fixture
def designs():
    return load_interpreted(ROOT / "scripts" / "design_kernels.py", "design_kernels_cpu")


@pytest.mark.solutions  # scripts/ is the instructors' (a learner's kit has only scripts/setup.sh)
@pytest.mark.parametrize("programs, block, tiles", [(1, 512, 1), (3, 256, 4)])
def test_the_counting_only_histogram_counts_each_programs_tile_tiles_times_shifted(designs, programs, block, tiles):
    x = torch.randint(
        0, 256, (programs * block * tiles,), dtype=torch.int32, generator=torch.Generator().manual_seed(block + tiles)
    )
    counts = torch.zeros(256, dtype=torch.int32)
    with interpreter_on():
        designs.histogram_counting_only(x, counts, x.numel(), BLOCK=block, TILES=tiles, num_warps=4)
    tiles_read = x[: programs * block]  # program p's tile: values p * BLOCK to (p + 1) * BLOCK
    want = sum(torch.bincount((tiles_read + t) % 256, minlength=256) for t in range(tiles))
    assert torch.equal(counts, want.to(torch.int32))
