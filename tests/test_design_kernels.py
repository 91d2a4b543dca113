"""scripts/design_kernels.py, the candidate designs that scripts/design_bench.py times on a GPU beside the Triton
solutions: on the CPU (Triton interpreter, which ignores num_stages), each computes what PyTorch does, so a
design the bench finds faster is a correct one."""

from __future__ import annotations

import pytest
import torch

from conftest import ROOT
from interpreted import interpreter_on, load_interpreted

SOLUTIONS = ROOT / "solutions"


@pytest.fixture
def designs():
    return load_interpreted(ROOT / "scripts" / "design_kernels.py", "design_kernels_cpu")


@pytest.mark.solutions
@pytest.mark.parametrize("n, block, tiles", [(1, 512, 4), (100_003, 1024, 8), (40_000, 2048, 2)])
def test_the_pipelined_histogram_counts_every_value_once(designs, n, block, tiles):
    x = torch.randint(0, 256, (n,), dtype=torch.int32, generator=torch.Generator().manual_seed(n))
    counts = torch.full((256,), -1, dtype=torch.int32)
    with interpreter_on():
        designs.histogram_pipelined(x, counts, BLOCK=block, TILES=tiles, num_warps=1, stages=3)
    assert torch.equal(counts, torch.bincount(x, minlength=256).to(torch.int32))


@pytest.mark.solutions
@pytest.mark.parametrize("M, N", [(1, 1), (37, 300), (5, 1024), (9, 777)])
def test_the_pipelined_layer_norm_backward_matches_autograd(designs, M, N):
    solution = load_interpreted(SOLUTIONS / "layer_norm_backward" / "layer_norm_backward.py", "lnb_solution_cpu")
    generator = torch.Generator().manual_seed(M * N)
    x = torch.randn(M, N, generator=generator)
    w, dy = torch.rand(N, generator=generator) + 0.5, torch.randn(M, N, generator=generator)
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, [N], None, None, 1e-5)
    want = torch.ops.aten.native_layer_norm_backward(dy.double(), x.double(), [N], mean.double(), rstd.double(),
                                                     w.double(), w.double(), [True, True, True])
    dx, dw, db = torch.full_like(x, float("nan")), torch.full((N,), float("nan")), torch.full((N,), float("nan"))
    with interpreter_on():
        designs.layer_norm_backward_pipelined(solution, x, w, dy, mean.view(M), rstd.view(M), dx, dw, db,
                                              num_warps=4, stages=3, programs_per_sm=1)
    for got, expected in zip((dx, dw, db), want):
        assert torch.allclose(got.double(), expected, atol=1e-4, rtol=1e-4)
