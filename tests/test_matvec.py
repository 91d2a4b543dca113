"""matvec (day 8): y = A x, float32, one warp per row; A may be a row slice (its row stride lda is not K),
passed to the kernel as the spec argument "A.stride(0)".

On the CPU the kernels are played in torch against the spec's cases with the grader's own checks
(simulated_kernels.py): the classic mistakes (K where lda belongs, float4 without the K % 4 tail, a grid
rounded down, rows summed over lda columns) each fail some case; honest kernels pass every case, down to one
thread adding a 4099-long row in order (what the absolute tolerance is sized for). On a GPU
(`pytest -m gpu -s`) the solution and the stub are graded, the solution's GB/s printed beside torch.mv's. The
mistakes' fixtures (the spec's [[mistakes]]) are graded on the CPU emulator and on a GPU by
tests/test_exercise_mistakes.py."""

from __future__ import annotations

import pytest
import torch
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

from grader.child.loading import Caller
from grader.core.discovery import resolve
from grader.run.grade import grade
from grader.toolchain import build

SPEC = exercise("matvec")


def rows_as_laid_out(A: torch.Tensor, lda: int, width: int | None = None) -> torch.Tensor:
    """The M x width (K) matrix a kernel reads from A's memory when it steps `lda` elements between rows."""
    storage = A.new_empty(0).set_(A.untyped_storage())
    return storage.as_strided((A.shape[0], width or A.shape[1]), (lda, 1), A.storage_offset())


def warp_per_row(inputs, outputs, params):
    store(outputs["y"], inputs["A"] @ inputs["x"])


def one_thread_per_row(inputs, outputs, params):
    """Each row summed left to right in float32, one product at a time."""
    A, x = inputs["A"], inputs["x"]
    acc = torch.zeros(A.shape[0])
    for k in range(A.shape[1]):
        acc = acc + A[:, k] * x[k]
    store(outputs["y"], acc)


def k_as_the_row_stride(inputs, outputs, params):
    A = inputs["A"]
    store(outputs["y"], rows_as_laid_out(A, A.shape[1]) @ inputs["x"])


def float4_without_tail(inputs, outputs, params):
    K = params["K"]
    A, x = inputs["A"], inputs["x"]
    store(outputs["y"], A[:, : K - K % 4] @ x[: K - K % 4])


def grid_rounded_down(inputs, outputs, params):
    """M / 8 blocks of 8 warps: the last M % 8 rows are never written."""
    M = params["M"]
    full = (M // 8) * 8
    store(outputs["y"][:full], inputs["A"][:full] @ inputs["x"])


def sums_lda_columns(inputs, outputs, params):
    """The loop runs to lda instead of K: the padding of a row slice (and x past its end) joins the sum."""
    A, x = inputs["A"], inputs["x"]
    lda = A.stride(0)
    past_x = torch.full((lda - x.numel(),), float("nan"))  # whatever follows x in memory: not x
    store(outputs["y"], rows_as_laid_out(A, lda, width=lda) @ torch.cat([x, past_x]))


CORRECT = {"one warp per row (float32)": warp_per_row, "one thread per row, in order": one_thread_per_row}
MISTAKES = {
    "K as the row stride (lda ignored)": k_as_the_row_stride,
    "float4 loads without the K % 4 tail": float4_without_tail,
    "a grid of M / 8 blocks (rounded down)": grid_rounded_down,
    "each row summed over lda columns": sums_lda_columns,
}


def test_the_row_stride_reaches_the_kernel_as_an_argument():
    variant = SPEC.variant("cuda")
    stride = variant.args[-1]
    assert stride.stride_of == "A" and stride.stride_dim == 0
    A = torch.full((3, 5 + 37), 1.0)[:, :5]
    args = Caller(variant, lambda *a: a).arguments({"A": A, "x": torch.ones(5), "y": torch.ones(3)}, {"M": 3, "K": 5})
    assert args[-1].value == 42 and args[3].value == 3 and args[4].value == 5


def test_cases_cover_short_long_ragged_and_sliced_rows():
    shapes = {(c.params["M"], c.params["K"]) for c in cpu_cases(SPEC)}
    assert {(1, 1), (7, 1000), (1000, 7), (4097, 4099)} <= shapes
    sliced = [c for c in cpu_cases(SPEC) if c.inputs.get("A", {}).get("layout") == "row_slice"]
    assert any(c.params["K"] % 4 == 0 for c in sliced) or any((c.params["K"] + 37) % 4 == 0 for c in sliced)
    assert any(c.params["K"] % 4 for c in sliced)


@pytest.mark.parametrize("name", list(MISTAKES))
def test_every_classic_mistake_fails_some_case(name):
    found = fails_somewhere(SPEC, MISTAKES[name])
    assert any(v != "ok" for v in found.values()), f"{name} passes every case: {found}"


@pytest.mark.parametrize("name", list(CORRECT))
def test_honest_kernels_pass_every_case(name):
    found = verdicts(SPEC, CORRECT[name])
    assert all(v == "ok" for v in found.values()), found


@pytest.mark.slow
@pytest.mark.nvcc
@pytest.mark.solutions
def test_the_solution_compiles_without_spills():
    result = build.build_shared_library(ROOT / "solutions" / "matvec" / "matvec.cu", device_only=True)
    assert result.ok, result.log
    assert all(k["spill_stores"] == 0 for k in result.resources)


# --- on a GPU: the real kernels ------------------------------------------------------------------------


@pytest.mark.gpu
def test_the_solution_reaches_85_percent_of_copy_bandwidth_and_prints_torch_beside_it():
    result = grade(resolve(("matvec",)), source="solutions", seed=21, record=False)
    assert result.status == "passed", result.verdict
    print("\n" + figure_line("matvec solution", result))
    assert (result.timings[-1].roofline_pct or 0) >= 85


@pytest.mark.gpu
def test_the_stub_fails_on_the_gpu():
    result = grade(resolve(("matvec",)), source="stubs", seed=5, record=False)
    assert first_failure(result).details.get("code") == "not_written", result.verdict


@pytest.mark.bench
@pytest.mark.gpu
def test_one_warp_per_row_with_scalar_loads_passes_numerics_and_prints_its_ladder_figure():
    result = grade_fixture("matvec", "matvec_warp_per_row.cu")
    assert next(c for c in result.checks if c.name == "numerics").status == "passed", result.verdict
    if result.timings:
        print("\n" + figure_line("matvec ladder step 2 (one warp per row, scalar loads)", result))
