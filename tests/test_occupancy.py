"""occupancy (100-day plan, day 23), and what the grader grew for it: the build check's theoretical
occupancy per kernel (grader/toolchain/occupancy.py) — registers and static shared memory from ptxas, threads per
block from __launch_bounds__ (no figure without one), the SM's limits by architecture (sm_90's
without a GPU, and said so) — with the limit that binds.

The exercise's stub is correct and slow: its whole-row shared staging leaves 4 of 64 warps per SM. On the
CPU: the calculator's arithmetic against known figures, the stub's and the solution's occupancy lines,
and the classic mistakes played in torch against the spec's cases (simulated_kernels.py). On a GPU
(`pytest -m gpu -s`) the solution passes near copy bandwidth, the stub passes numerics and fails the
speed bar, and each prints its figure beside torch.flip's. The mistakes' fixtures (the spec's [[mistakes]]) are
graded on the CPU emulator and on a GPU by tests/test_exercise_mistakes.py."""

from __future__ import annotations

import os
import subprocess

import pytest
import torch
from conftest import ROOT
from simulated_kernels import (
    cpu_cases,
    exercise,
    fails_somewhere,
    figure_line,
    grade_fixture,
    store,
    verdicts,
)

from grader.core.discovery import resolve
from grader.run.grade import grade
from grader.toolchain import build, occupancy

SPEC = exercise("occupancy")
SM90 = occupancy.LIMITS["sm_90"]


# --- the calculator -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "registers,shared,threads,blocks,limited_by",
    [
        (128, 0, 128, 4, ["registers"]),  # 4096 registers a warp: 16 warps = 25%
        (40, 0, 256, 6, ["registers"]),  # 1280 a warp: 12 warps a sub-partition, 48 in all
        (32, 0, 1024, 2, ["registers", "threads"]),  # exactly the register file and the 64 warps
        (20, 49152, 64, 4, ["shared memory"]),  # 48 KB + 1 KB reserved: 4 fit in 228 KB
        (16, 0, 32, 32, ["blocks"]),  # one warp a block: 32 blocks = 50%
        (16, 0, 256, 8, ["threads"]),
        (255, 0, 1024, 0, ["registers"]),  # 255 x 1024 registers: no block fits
        (16, 232448, 32, 1, ["shared memory"]),  # 227 KB + 1 KB reserved: exactly 228 KB, one block
        (16, 232449, 32, 0, ["shared memory"]),  # a byte more: none
    ],
)
def test_the_calculator_counts_resident_blocks_and_names_the_binding_limit(
    registers, shared, threads, blocks, limited_by
):
    assert occupancy.theoretical(registers, shared, threads, SM90) == (blocks, limited_by)


def test_each_architecture_has_its_limits_and_an_unknown_one_gets_sm_90s_and_says_so():
    assert occupancy.theoretical(16, 0, 256, occupancy.LIMITS["sm_86"]) == (6, ["threads"])  # 48 warps
    assert occupancy.limits_for("sm_90a") == ("sm_90", SM90)
    assert occupancy.limits_for("sm_103") == ("sm_90", SM90)
    line, _ = occupancy.describe(
        [_kernel("k(float*)", 16, 0)], "__global__ void __launch_bounds__(256) k(float* y) {}", "sm_103", gpu=True
    )
    assert "sm_90's limits: sm_103 is not in the table" in line


def _kernel(name: str, registers: int, shared: int) -> dict:
    return {
        "kernel": name,
        "arch": "sm_90",
        "registers": registers,
        "smem_bytes": shared,
        "stack_bytes": 0,
        "spill_stores": 0,
        "spill_loads": 0,
    }


SOURCE = """
#define THREADS 64
#define MAX_COLS (12288)   // 48 KB
constexpr int BLOCK = 4 * 32;
static constexpr unsigned int WIDE = 256u;
__global__ void __launch_bounds__(THREADS) staged(const float* x) {}
__global__ __launch_bounds__(BLOCK, 2) void pair(float* y) {}
template <int T> __global__ void __launch_bounds__(T) templated(float* y) {}
__launch_bounds__(WIDE) __global__ void first(int n) {}
__global__ void plain(int n) {}
"""


def test_block_sizes_are_read_from_launch_bounds_written_as_numbers_defines_or_constexprs():
    assert occupancy.launch_bounds(SOURCE) == {"staged": 64, "pair": 128, "first": 256}
    assert occupancy.kernel_name("void templated<4>(float const*, int)") == "templated"


def test_the_build_line_names_the_block_size_origin_the_figure_and_whose_limits():
    kernels = [_kernel("staged(float const*)", 42, 49152), _kernel("plain(int)", 10, 0)]
    line, figures = occupancy.describe(kernels, SOURCE, "sm_90", gpu=False)
    assert line.strip() == (
        "occupancy of staged: 4 blocks of 64 threads (its __launch_bounds__) per SM → 8 of 64 warps "
        "= 12.5% (limited by shared memory (49152 B per block); sm_90's limits)"
    )
    assert [f["kernel"] for f in figures] == ["staged(float const*)"]  # plain: no block size, no guess
    line, figures = occupancy.describe([_kernel("first(int)", 10, 0)], SOURCE, "sm_90", gpu=True)
    assert "= 100% (limited by threads (64 warps per SM); this GPU's sm_90 limits)" in line
    assert occupancy.describe([_kernel("plain(int)", 10, 0)], SOURCE, "sm_90", gpu=False) == ("", [])


def test_a_kernel_that_cannot_launch_says_so():
    line, _ = occupancy.describe([_kernel("pair(float*)", 255, 0)], SOURCE.replace("BLOCK, 2", "1024"), "sm_90", False)
    assert "does not fit on an SM" in line and "the launch fails" in line


# --- the exercise on the CPU: the stub's and the solution's occupancy ------------------------------------


@pytest.mark.slow
@pytest.mark.nvcc
@pytest.mark.solutions
def test_the_stub_is_held_to_a_sixteenth_of_the_sm_by_shared_memory_and_the_solution_fills_it():
    if torch.cuda.is_available():
        pytest.skip("a GPU grades for real (below)")
    stub = grade(resolve(("occupancy",)), source="stubs", seed=1, record=False)
    built = next(c for c in stub.checks if c.name == "build")
    assert built.status == "passed" and "= 6.2% (limited by shared memory (49152 B per block)" in built.message
    assert built.details["occupancy"][0]["percent"] == 6.2
    solution = grade(resolve(("occupancy",)), source="solutions", seed=1, record=False)
    figures = next(c for c in solution.checks if c.name == "build").details["occupancy"]
    assert {f["percent"] for f in figures} == {100.0} and len(figures) == 2
    resources = next(c for c in solution.checks if c.name == "build").details["resources"]
    assert not any(k["spill_stores"] for k in resources)


@pytest.mark.slow
@pytest.mark.nvcc
def test_the_fixtures_compile():
    fixtures = ROOT / "tests" / "fixtures" / "submissions"
    if not fixtures.is_dir():
        pytest.skip("tests/fixtures/submissions/ is absent (a learner's kit)")
    names = [*(m.fixture for m in SPEC.mistakes), "occupancy_staged_256.cu"]  # the mistakes and ladder step 2
    jobs = [
        subprocess.Popen(
            [build.find_nvcc(), "-std=c++17", "-arch=sm_90", "-cubin", "-o", os.devnull, str(fixtures / n)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for n in names
    ]
    for name, job in zip(names, jobs):
        assert job.wait() == 0, f"{name}: {job.stdout.read()}"


# --- the mistakes, played in torch against the spec's cases ---------------------------------------------


def off_by_one(inputs, outputs, params):
    """y[r][c] = x[r][cols - c]: the flat element one past the mirror (the next row's first; NaN past x)."""
    x = inputs["x"]
    rows, cols = x.shape
    flat = torch.cat([x.reshape(-1), torch.tensor([float("nan")])])
    index = torch.arange(rows).view(-1, 1) * cols + (cols - torch.arange(cols)).view(1, -1)
    store(outputs["y"], flat[index])


def float4_unreversed(inputs, outputs, params):
    x = inputs["x"]
    rows, cols = x.shape
    if cols % 4:
        store(outputs["y"], x.flip(1))
        return
    store(outputs["y"], x.view(rows, cols // 4, 4).flip(1).reshape(rows, cols))


def grid_y_without_loop(inputs, outputs, params):
    if params["rows"] <= 65535:  # more rows than gridDim.y allows: the launch fails, nothing is written
        store(outputs["y"], inputs["x"].flip(1))


CORRECT = {
    "mirrored element by element": lambda i, o, p: store(o["y"], i["x"].flip(1)),
    "mirrored float4 with its lanes reversed": lambda i, o, p: store(
        o["y"],
        i["x"].view(p["rows"], -1, 4).flip(1).flip(2).reshape(p["rows"], p["cols"])
        if p["cols"] % 4 == 0
        else i["x"].flip(1),
    ),
}
MISTAKES = {
    "cols - c instead of cols - 1 - c": off_by_one,
    "a float4 not reversed inside": float4_unreversed,
    "a row per block along y, no loop": grid_y_without_loop,
}


def test_cases_hold_ragged_rows_float4_rows_the_longest_row_and_more_rows_than_grid_y():
    params = [c.params for c in cpu_cases(SPEC)]
    assert max(p["cols"] for p in params) == 12288  # what the stub's shared array holds
    assert any(p["cols"] % 4 == 0 and p["rows"] > 1 for p in params) and any(p["cols"] % 4 for p in params)
    assert any(p["rows"] > 65535 for p in params) and {"rows": 1, "cols": 1} in params
    timed = SPEC.performance.cases[-1].params
    assert 2 * 4 * timed["rows"] * timed["cols"] >= 256 * 2**20


@pytest.mark.parametrize("name", list(MISTAKES))
def test_every_classic_mistake_fails_some_case(name):
    found = fails_somewhere(SPEC, MISTAKES[name])
    assert any(v != "ok" for v in found.values()), f"{name} passes every case: {found}"


@pytest.mark.parametrize("name", list(CORRECT))
def test_honest_kernels_pass_every_case(name):
    found = verdicts(SPEC, CORRECT[name])
    assert all(v == "ok" for v in found.values()), found


# --- on a GPU ---------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.solutions
def test_the_solution_reaches_85_percent_of_copy_bandwidth_and_prints_torch_beside_it():
    result = grade(resolve(("occupancy",)), source="solutions", seed=21, record=False)
    assert result.status == "passed", result.verdict
    print("\n" + figure_line("occupancy solution", result))
    assert (result.timings[-1].roofline_pct or 0) >= 85


@pytest.mark.gpu
def test_the_given_kernel_is_correct_and_fails_only_the_speed_bar():
    # as `kcourse grade` does: only the verdict's size is timed (the stub is slow: every size took 76 s in the tier)
    result = grade(
        resolve(("occupancy",)),
        source="stubs",
        seed=5,
        record=False,
        timed_sizes="verdict",
        job_extra={"torch_anchor": True},
    )
    checks = {c.name: c for c in result.checks}
    assert checks["numerics"].status == "passed", result.verdict
    assert checks["speed"].status == "failed", result.verdict
    assert "6.2%" in checks["build"].message
    print("\n" + figure_line("occupancy stub (6.2% occupancy)", result))


@pytest.mark.gpu
@pytest.mark.slow  # a sweep (every ladder step timed): gpu and slow, out of the GPU tier
def test_bigger_blocks_with_the_same_staging_print_their_ladder_figure():
    result = grade_fixture("occupancy", "occupancy_staged_256.cu")
    assert next(c for c in result.checks if c.name == "numerics").status == "passed", result.verdict
    assert "= 50% (limited by shared memory" in next(c for c in result.checks if c.name == "build").message
    print("\n" + figure_line("occupancy ladder step 2 (256 threads, staged: 50%)", result))
