"""conv1d (day 7): the "same"-length 1-D convolution with zero padding, radius r a case parameter.

On the CPU the kernels are played in torch against the spec's cases with the grader's own checks
(simulated_kernels.py): every classic mistake fails some case, every honest summation passes them all —
among them the solution's own scheme (tiles of 2048 with a halo, taps padded with zeros to a multiple of
4). The solution compiles for sm_90 without spills. On a GPU (`pytest -m gpu -s`) the solution and the stub
are graded, and the solution's GB/s is printed beside torch.nn.functional.conv1d's. The mistakes' fixtures (the
spec's [[mistakes]]) are graded on the CPU emulator and on a GPU by tests/test_exercise_mistakes.py."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import ROOT
from simulated_kernels import (
    cpu_cases,
    exercise,
    fails_somewhere,
    figure_line,
    first_failure,
    grade_fixture,
    store,
    verdicts,
)

from grader.core import exprs
from grader.core.discovery import resolve
from grader.run.grade import grade
from grader.toolchain import build

SPEC = exercise("conv1d")


def correlate(x: torch.Tensor, w: torch.Tensor, pad: str = "zeros") -> torch.Tensor:
    """out[i] = sum_k x[i + k - r] w[k] in float32, x extended by `pad` (zeros, or the edge values)."""
    r = (w.numel() - 1) // 2
    x3 = x.float().view(1, 1, -1)
    if pad == "replicate" and r:
        x3 = F.pad(x3, (r, r), mode="replicate")
        return F.conv1d(x3, w.float().view(1, 1, -1)).view(-1)
    return F.conv1d(x3, w.float().view(1, 1, -1), padding=r).view(-1)


def solution_scheme(inputs, outputs, params):
    """The solution's arithmetic: tiles of 2048 outputs, a halo of RP = r rounded up to a multiple of 4, the
    taps padded with zero weights to 2 RP + 1, each output summed tap by tap in float32."""
    x, w, r = inputs["x"].float(), inputs["w"].float(), params["r"]
    rp = (r + 3) // 4 * 4
    wp = torch.zeros(2 * rp + 1)
    wp[rp - r : rp + r + 1] = w
    padded = F.pad(x, (rp, rp))
    acc = torch.zeros_like(x)
    for k in range(2 * rp + 1):
        acc = acc + padded[k : k + x.numel()] * wp[k]
    store(outputs["out"], acc)


def tiled(tile: int, halo: bool):
    """Shared-memory tiles of `tile` outputs, each loading x[start - r, start + tile + r) (zeros outside x);
    without the halo, each loads only x[start, start + tile) and taps past the tile's edges read zeros."""

    def model(inputs, outputs, params):
        x, w, r = inputs["x"].float(), inputs["w"].float(), params["r"]
        n = x.numel()
        tiles = -(-n // tile)
        whole = F.pad(x, (0, tiles * tile - n))
        if halo:
            windows = F.pad(whole, (r, r)).unfold(0, tile + 2 * r, tile)  # each tile with r on each side
            out = F.conv1d(windows.unsqueeze(1), w.view(1, 1, -1))
        else:
            out = F.conv1d(whole.view(tiles, 1, tile), w.view(1, 1, -1), padding=r)
        store(outputs["out"], out.reshape(-1)[:n])

    return model


def shifted_by_one(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """out[i] = sum_k x[i + k - r + 1] w[k]: an off-by-one in the window's start (zeros outside x)."""
    r = (w.numel() - 1) // 2
    padded = F.pad(x.float(), (r - 1, r + 1))  # padded[j] = x[j - r + 1]; a negative pad crops (r = 0)
    return F.conv1d(padded.view(1, 1, -1), w.float().view(1, 1, -1)).view(-1)


def float4_without_tail(inputs, outputs, params):
    """float4 loads and stores over the first n - n % 4 outputs; the last 1-3 never written."""
    n = inputs["x"].numel()
    full = correlate(inputs["x"], inputs["w"])
    store(outputs["out"][: n - n % 4], full[: n - n % 4])


CORRECT = {
    "float32 convolution (torch's order)": lambda i, o, p: store(o["out"], correlate(i["x"], i["w"])),
    "the solution's scheme (zero-padded taps, tiles of 2048)": solution_scheme,
    "a tile of 1024 with its halo": tiled(1024, halo=True),
}
MISTAKES = {
    "the weights flipped (signal-processing convolution)": lambda i, o, p: store(
        o["out"], correlate(i["x"], i["w"].flip(0))
    ),
    "edges clamped (x[0] and x[n-1] repeated) instead of zeros": lambda i, o, p: store(
        o["out"], correlate(i["x"], i["w"], "replicate")
    ),
    "the window one to the right (x[i + k - r + 1])": lambda i, o, p: store(o["out"], shifted_by_one(i["x"], i["w"])),
    "a tile of 1024 without its halo": tiled(1024, halo=False),
    "float4 without the scalar tail": float4_without_tail,
}


def test_the_reference_is_a_zero_padded_cross_correlation():
    x, w = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([10.0, 100.0, 1000.0])
    from grader.checks.checking import load_reference

    out = load_reference(SPEC.folder / "reference.py")(x, w)
    # out[0] = 0*10 + 1*100 + 2*1000; out[2] = 2*10 + 3*100 + 0*1000: tap k meets x[i + k - r]
    assert out.tolist() == [2100.0, 3210.0, 320.0]


def test_cases_cover_tiny_ragged_and_every_radius_kind():
    params = [c.params for c in cpu_cases(SPEC)]
    assert {1, 7, 5} <= {p["n"] for p in params}
    assert any(2 * p["r"] + 1 > p["n"] for p in params)  # a window wider than the input
    assert {0, 1, 3, 7, 32} <= {p["r"] for p in params}
    assert any(p["n"] > 4096 and p["n"] % 4 for p in params)  # several tiles and a ragged float4 tail
    assert SPEC.performance.cases[-1].params["n"] * 8 >= 256 * 2**20  # the verdict size moves >= 256 MB


@pytest.mark.parametrize("name", list(MISTAKES))
def test_every_classic_mistake_fails_some_case(name):
    found = fails_somewhere(SPEC, MISTAKES[name])
    assert any(v != "ok" for v in found.values()), f"{name} passes every case: {found}"


@pytest.mark.parametrize("name", list(CORRECT))
def test_honest_kernels_pass_every_case(name):
    found = verdicts(SPEC, CORRECT[name])
    assert all(v == "ok" for v in found.values()), found


def test_timed_bytes_count_x_out_and_the_taps():
    params = {"n": 100, "r": 3, "elem": 4}
    assert exprs.evaluate(SPEC.performance.bytes, params) == 4 * (100 + 100 + 7)


@pytest.mark.slow
@pytest.mark.nvcc
@pytest.mark.solutions
def test_the_solution_compiles_every_radius_without_spills():
    result = build.build_shared_library(ROOT / "solutions" / "conv1d" / "conv1d.cu", device_only=True)
    assert result.ok, result.log
    tiles = [k for k in result.resources if "conv1d_tile" in k["kernel"]]
    assert len(tiles) == 9  # RP = 0, 4, ..., 32
    assert all(k["spill_stores"] == 0 and k["registers"] <= 255 for k in result.resources)


# --- on a GPU: the real kernels ------------------------------------------------------------------------


@pytest.mark.gpu
def test_the_solution_reaches_85_percent_of_copy_bandwidth_and_prints_torch_beside_it():
    result = grade(resolve(("conv1d",)), source="solutions", seed=21, record=False)
    assert result.status == "passed", result.verdict
    print("\n" + figure_line("conv1d solution", result))
    assert (result.timings[-1].roofline_pct or 0) >= 85


@pytest.mark.gpu
def test_the_stub_fails_on_the_gpu():
    result = grade(resolve(("conv1d",)), source="stubs", seed=5, record=False)
    assert first_failure(result).details.get("code") == "not_written", result.verdict


@pytest.mark.bench
@pytest.mark.gpu
def test_the_naive_kernel_passes_numerics_and_prints_its_ladder_figure():
    result = grade_fixture("conv1d", "conv1d_naive.cu")
    assert next(c for c in result.checks if c.name == "numerics").status == "passed", result.verdict
    if result.timings:
        print("\n" + figure_line("conv1d ladder step 1 (naive)", result))
