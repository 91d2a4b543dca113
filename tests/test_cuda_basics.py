"""matrix_add, matrix_transform and transpose: the 100-day challenge's 2-D grids (days 2-3), matrix
transpose (day 6) and coalescing / bank conflicts (days 21-22).

On the CPU the CUDA kernels cannot run, so each exercise's classic mistakes are played in torch: a
launch is simulated thread by thread (its grid, its bounds check, its index arithmetic, its strides)
on the grader's own tensors, laid out as each case asks (row slices included), and judged with the
grader's own checks; every mistake must fail some case of the spec, and the correct launch shapes must
pass every case. The stubs and solutions are compiled for sm_90. The tests marked gpu grade the real
solutions (printing their figure and PyTorch's), the stubs and the ladder's kernels
(`python -m pytest -m gpu -s tests/test_cuda_basics.py`). The mistakes' fixtures (each spec's [[mistakes]]) are
graded on the CPU emulator and on a GPU by tests/test_exercise_mistakes.py."""

from __future__ import annotations

from functools import lru_cache

import pytest
import torch
from conftest import ROOT, submission

from grader.checks.checking import judge_output, load_reference, reference_outputs
from grader.checks.inputs import generate, make_outputs, place, written_outside
from grader.core.discovery import discover_exercises, resolve
from grader.run.grade import grade
from grader.toolchain import build

EXERCISES = ("matrix_add", "matrix_transform", "transpose")
GRID_Y_LIMIT = 65535
GARBAGE = 1234.5  # what a shared-memory slot nobody loaded holds


@lru_cache(maxsize=None)
def spec_of(exercise: str):
    return discover_exercises()[exercise]


def cpu_cases(exercise: str):
    return [c for c in spec_of(exercise).cases if not c.gpu_only]


# --- a 2-D launch and its memory, simulated ---------------------------------------------------------------


class OutOfBounds(Exception):
    """A load or store outside the tensor's allocation: a fault, or another tensor's memory."""


def _ceil(a: int, b: int) -> int:
    return (a + b - 1) // b


def launch_2d(along_x: int, along_y: int, block=(32, 8), round_up=True) -> tuple[torch.Tensor, torch.Tensor]:
    """Global (x, y) of every thread of a grid covering along_x by along_y; none for a launch CUDA refuses."""
    grid = [(_ceil if round_up else int.__floordiv__)(n, b) for n, b in ((along_x, block[0]), (along_y, block[1]))]
    if grid[1] > GRID_Y_LIMIT or block[0] * block[1] > 1024 or 0 in grid:
        return torch.empty(0, dtype=torch.long), torch.empty(0, dtype=torch.long)
    y, x = torch.meshgrid(torch.arange(grid[1] * block[1]), torch.arange(grid[0] * block[0]), indexing="ij")
    return x.flatten(), y.flatten()


def _whole(t: torch.Tensor, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    whole = t.new_empty(0).set_(t.untyped_storage())  # the allocation, flat: a row slice's padding, a guard
    index = index + t.storage_offset()
    if bool(((index < 0) | (index >= whole.numel())).any()):
        raise OutOfBounds
    return whole, index


def load(t: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    whole, index = _whole(t, index)
    return whole[index]


def store(t: torch.Tensor, index: torch.Tensor, values: torch.Tensor) -> None:
    whole, index = _whole(t, index)
    whole[index] = values.to(whole.dtype)


def stride(t: torch.Tensor) -> int:
    return t.stride(0)


@lru_cache(maxsize=None)
def _inputs_and_references(exercise: str, index: int):
    """One draw of a case's inputs and the reference's answer, shared by every simulated kernel."""
    spec = spec_of(exercise)
    inputs = generate(spec, spec.cases[index], 3)
    reference = load_reference(spec.folder / "reference.py")
    return inputs, reference_outputs(reference, spec, inputs, spec.cases[index].params)


def simulated_verdict(exercise: str, kernel, case) -> str:
    """The grader's verdict code for `kernel` (a simulated launch) on one case: ok, out_of_bounds, or judge_output's."""
    spec = spec_of(exercise)
    inputs, refs = _inputs_and_references(exercise, spec.cases.index(case))
    tensors = {name: place(v, case.inputs.get(name, {}).get("layout"), "cpu") for name, v in inputs.items()}
    outputs = make_outputs(spec, case, "cpu")
    try:
        kernel({**tensors, **outputs}, case.params)
    except OutOfBounds:
        return "out_of_bounds"
    if any(written_outside(t) for t in outputs.values()):
        return "out_of_bounds"
    for spec_out, ref in zip(spec.outputs, refs):
        result = judge_output(spec, spec_out, outputs[spec_out.name], ref, spec.tolerance_of(case), case.label())
        if not result.ok:
            return result.code
    return "ok"


def threads(p, *, block=(32, 8), round_up=True, check=True, row_on_x=False, grid_follows=False):
    """(row, col) of the threads of an elementwise 2-D kernel that do work, mistakes switched on by keyword."""
    rows, cols = p["rows"], p["cols"]
    along_x, along_y = (rows, cols) if row_on_x and grid_follows else (cols, rows)
    x, y = launch_2d(along_x, along_y, block, round_up)
    row, col = (x, y) if row_on_x else (y, x)
    if check:
        keep = (row < rows) & (col < cols)
        row, col = row[keep], col[keep]
    return row, col


# --- matrix_add ----------------------------------------------------------------------------------------


def matrix_add(strides="own", **launch):
    def kernel(t, p):
        row, col = threads(p, **launch)
        sa, sb, sc = {
            "own": (stride(t["a"]), stride(t["b"]), stride(t["c"])),
            "cols": (p["cols"],) * 3,
            "a's": (stride(t["a"]),) * 3,
            "rows": (p["rows"],) * 3,
        }[strides]
        store(t["c"], row * sc + col, load(t["a"], row * sa + col) + load(t["b"], row * sb + col))

    return kernel


# --- matrix_transform ----------------------------------------------------------------------------------


def f(v, row, col, integer_division=False):
    """The README's f in float32, as a kernel computes it."""
    scale = 1 + (row % 5) // 4 if integer_division else 1 + 0.25 * (row % 5)
    return (((0.5 * v - 1) * v + 2) * v - 3) * scale.float() + ((col % 3) - 1).float()


def matrix_transform(swap_in_f=False, integer_division=False, out_stride_from_x=False, **launch):
    def kernel(t, p):
        row, col = threads(p, **launch)
        sx = stride(t["x"])
        so = sx if out_stride_from_x else stride(t["out"])
        v = load(t["x"], row * sx + col)
        args = (col, row) if swap_in_f else (row, col)
        store(t["out"], row * so + col, f(v, *args, integer_division=integer_division))

    return kernel


# --- transpose -----------------------------------------------------------------------------------------


def transpose_naive(sizes_as_strides=False, not_transposed=False, **launch):
    def kernel(t, p):
        row, col = threads(p, **launch)
        sx, so = (p["cols"], p["rows"]) if sizes_as_strides else (stride(t["x"]), stride(t["out"]))
        where = row * so + col if not_transposed else col * so + row
        store(t["out"], where, load(t["x"], row * sx + col))

    return kernel


def transpose_tiled(tile=32, store_checks_x_bounds=False, blocks_not_swapped=False):
    """The shared-memory tile kernel, element by element: the store phase of every block, each tile slot
    holding what the load phase put there (x's element where it is in bounds, garbage elsewhere)."""

    def kernel(t, p):
        rows, cols = p["rows"], p["cols"]
        bx, by, tx, k = torch.meshgrid(
            torch.arange(_ceil(cols, tile)),
            torch.arange(_ceil(rows, tile)),
            torch.arange(tile),
            torch.arange(tile),
            indexing="ij",
        )
        row0, col0 = (by * tile).flatten(), (bx * tile).flatten()
        tx, k = tx.flatten(), k.flatten()
        src_row, src_col = row0 + tx, col0 + k  # tile[tx][k] = x[row0 + tx][col0 + k], if it was loaded
        loaded = (src_row < rows) & (src_col < cols)
        value = torch.full(src_row.shape, GARBAGE)
        value[loaded] = load(t["x"], src_row[loaded] * stride(t["x"]) + src_col[loaded])
        out_row, out_col = (row0 + k, col0 + tx) if blocks_not_swapped else (col0 + k, row0 + tx)
        keep = (out_row < rows) & (out_col < cols) if store_checks_x_bounds else (out_row < cols) & (out_col < rows)
        store(t["out"], out_row[keep] * stride(t["out"]) + out_col[keep], value[keep])

    return kernel


MISTAKES = {
    "matrix_add": {
        "grid rounded down": matrix_add(round_up=False),
        "no bounds check": matrix_add(check=False),
        "row from x, column from y": matrix_add(row_on_x=True),
        "blocks one row tall (256 x 1)": matrix_add(block=(256, 1)),
        "cols where the strides belong": matrix_add(strides="cols"),
        "a's stride for b and c too": matrix_add(strides="a's"),
        "rows where the strides belong": matrix_add(strides="rows"),
    },
    "matrix_transform": {
        "row and column swapped in f": matrix_transform(swap_in_f=True),
        "integer division in the row scale": matrix_transform(integer_division=True),
        "x's stride for out": matrix_transform(out_stride_from_x=True),
        "grid rounded down": matrix_transform(round_up=False),
        "no bounds check": matrix_transform(check=False),
        "blocks one row tall (256 x 1)": matrix_transform(block=(256, 1)),
    },
    "transpose": {
        "not transposed (a copy)": transpose_naive(not_transposed=True),
        "sizes where the strides belong": transpose_naive(sizes_as_strides=True),
        "no bounds check": transpose_naive(check=False),
        "tile stored with x's bounds": transpose_tiled(store_checks_x_bounds=True),
        "tile stored at its own block's place": transpose_tiled(blocks_not_swapped=True),
    },
}
CORRECT = {
    "matrix_add": {
        "32 x 8 blocks, column on x": matrix_add(),
        # uncoalesced but right: the speed ladder's business
        "row on x, grid sized for it": matrix_add(row_on_x=True, grid_follows=True),
        "16 x 16 blocks": matrix_add(block=(16, 16)),
    },
    "matrix_transform": {"32 x 8 blocks, column on x": matrix_transform()},
    "transpose": {"naive": transpose_naive(), "32 x 32 tiles": transpose_tiled()},
}


@pytest.mark.parametrize("exercise,name", [(e, n) for e in MISTAKES for n in MISTAKES[e]])
def test_every_classic_mistake_fails_some_case(exercise, name):
    for case in cpu_cases(exercise):
        if simulated_verdict(exercise, MISTAKES[exercise][name], case) != "ok":
            return
    pytest.fail(f"{exercise}: {name} passes every case")


@pytest.mark.parametrize("exercise,name", [(e, n) for e in CORRECT for n in CORRECT[e]])
def test_correct_launch_shapes_pass_every_case(exercise, name):
    for case in cpu_cases(exercise):
        assert simulated_verdict(exercise, CORRECT[exercise][name], case) == "ok", (name, case.label())


def test_each_stride_mistake_is_caught_by_the_row_slice_of_that_tensor():
    cases = {c.label(): c for c in cpu_cases("matrix_add")}
    sliced_b = cases["rows=29 cols=600 (b layout=row_slice)"]
    sliced_c = cases["rows=50 cols=257 (c layout=row_slice)"]
    assert simulated_verdict("matrix_add", MISTAKES["matrix_add"]["a's stride for b and c too"], sliced_b) == "mismatch"
    assert (
        simulated_verdict("matrix_add", MISTAKES["matrix_add"]["a's stride for b and c too"], sliced_c)
        == "out_of_bounds"
    )


def test_matrix_transform_reference_is_the_readmes_formula():
    x = torch.tensor([[1.0, -2.0, 0.5], [3.0, 0.0, -1.0]], dtype=torch.float64)
    out = load_reference(spec_of("matrix_transform").folder / "reference.py")(x)
    p = lambda v: 0.5 * v**3 - v**2 + 2 * v - 3  # noqa: E731
    want = [
        [p(1.0) * 1 - 1, p(-2.0) * 1 + 0, p(0.5) * 1 + 1],
        [p(3.0) * 1.25 - 1, p(0.0) * 1.25 + 0, p(-1.0) * 1.25 + 1],
    ]
    assert torch.allclose(out, torch.tensor(want, dtype=torch.float64))


def test_strides_are_passed_per_tensor_and_timed_bytes_count_every_access():
    from grader.core import exprs

    moved = {"matrix_add": 3, "matrix_transform": 2, "transpose": 2}
    for exercise in EXERCISES:
        spec = spec_of(exercise)
        strides = [a.stride_of for a in spec.variant("cuda").args if a.stride_of]
        assert strides == [t.name for t in spec.inputs + spec.outputs], exercise
        largest = spec.performance.cases[-1].params
        assert exprs.evaluate(spec.performance.bytes, {**largest, "elem": 4}) >= 256 * 2**20 * moved[exercise]
        assert any(c.inputs or c.outputs for c in spec.cases), f"{exercise}: no row-slice case"


@pytest.mark.parametrize("roofline,advice", [(30.0, "32-way bank conflict"), (55.0, "tile[32][33]"), (80.0, "float4")])
def test_a_slow_transpose_is_sent_to_the_next_step_coalescing_then_bank_conflicts(roofline, advice):
    from grader.checks import hints
    from grader.core.records import Check, GradeResult

    check = Check(
        "speed",
        "failed",
        "rows=8192 cols=8192: too slow",
        {"ratio": roofline / 90, "threshold": 0.75, "roofline_pct": roofline},
    )
    result = GradeResult(exercise="transpose", lang="cuda", source="learner", seed=1, checks=[check])
    hints.annotate(result, spec_of("transpose"))
    assert advice in check.details["hint"], check.details["hint"]


@pytest.mark.slow
@pytest.mark.nvcc
@pytest.mark.parametrize("exercise", EXERCISES)
def test_stub_and_solution_compile_for_sm_90(exercise):
    stub = spec_of(exercise).folder / spec_of(exercise).variant("cuda").stub
    solution = ROOT / "solutions" / exercise / stub.name  # absent from a learner's kit
    for source in [stub] + [solution] * solution.exists():
        result = build.build_shared_library(source, device_only=True)
        assert result.ok, result.log


# --- on a GPU: the real kernels ----------------------------------------------------------------------------


def _checks(result) -> dict[str, str]:
    return {c.name: c.status for c in result.checks}


def _failure(result):
    return next(c for c in result.checks if c.status in ("failed", "error"))


@pytest.mark.gpu
@pytest.mark.solutions
@pytest.mark.parametrize("exercise", EXERCISES)
def test_the_solution_passes_near_copy_bandwidth_and_beats_torch(exercise):
    result = grade(resolve((exercise,)), source="solutions", seed=11, record=False)
    assert not [c for c in result.checks if c.status in ("failed", "error")], result.verdict
    t = result.timings[-1]
    print(
        f"\n{exercise} {t.case}: you {t.learner_rate:.0f} GB/s ({t.roofline_pct:.0f}% of roofline), "
        f"torch {t.torch_rate or 0:.0f} GB/s; {t.learner_ms:.4g} ms vs torch {t.torch_ms or 0:.4g} ms"
    )
    assert t.roofline_pct >= 85
    assert t.learner_rate >= 0.97 * (t.torch_rate or 0)  # matrix_add: torch's own add is near the roofline too


@pytest.mark.gpu
@pytest.mark.parametrize("exercise", EXERCISES)
def test_the_stub_fails_numerics_on_the_gpu(exercise):
    result = grade(resolve((exercise,)), source="stubs", seed=11, record=False, quick=True, sanitize_code=False)
    assert _failure(result).details.get("code") == "not_written", result.verdict


@pytest.mark.gpu
@pytest.mark.sanitizer
def test_a_tile_without_a_barrier_fails_numerics_or_the_race_check():
    result = grade(
        resolve(("transpose",)), submission=submission("transpose_no_sync.cu"), seed=11, record=False, quick=True
    )
    failed = _failure(result)
    assert failed.name in ("numerics", "sanitizer"), result.verdict
    print(f"\ntranspose without __syncthreads: {failed.name}: {failed.message[:200]}")


LADDER = {  # fixture -> whether it must meet the speed bar
    "matrix_add_one_per_thread.cu": True,
    "matrix_transform_one_per_thread.cu": True,
    "transpose_naive.cu": False,
    "transpose_tile_no_padding.cu": False,
    "transpose_tile_padded.cu": True,
}


@pytest.mark.gpu
@pytest.mark.solutions
@pytest.mark.parametrize("name", list(LADDER))
def test_ladder_steps_are_correct_and_only_coalesced_conflict_free_ones_meet_the_bar(name):
    exercise = next(e for e in EXERCISES if name.startswith(e + "_"))
    result = grade(  # as `kcourse grade` does: the verdict's size alone timed, torch beside it for the figure
        resolve((exercise,)),
        submission=submission(name),
        seed=11,
        record=False,
        sanitize_code=False,
        timed_sizes="verdict",
        job_extra={"torch_anchor": True},
    )
    checks = _checks(result)
    assert checks["numerics"] == "passed", result.verdict
    t = result.timings[-1]
    print(
        f"\n{name}: {t.case}: {t.learner_rate:.0f} GB/s, {t.roofline_pct:.0f}% of roofline, {t.ratio:.2f}x the "
        f"solution ({t.solution_roofline_pct:.0f}%); torch {t.torch_rate or 0:.0f} GB/s"
    )
    assert (checks["speed"] == "passed") == LADDER[name], result.verdict
