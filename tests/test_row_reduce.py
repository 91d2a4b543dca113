"""row_reduce (Triton, 100-day challenge day 33): per-row sum, max and first argmax over rows up to ~1M long.

On the CPU, under the Triton interpreter in this process (tests/triton_judging.py): each classic mistake —
a one-line edit of the solution — fails on the case built for it with the message that names it, while the
solution passes that same case (the spec's [[mistakes]] are graded in full, on the CPU and on a GPU, by
tests/test_exercise_mistakes.py; the whole grade of the solution and of the stub under the interpreter is
tests/test_grading_cpu.py's). On a GPU: the solution beside torch's three
reductions and the copy bandwidth at 4096 x 65536 and 64 x 2^20, the ladder's step 1, the real grades of
the solution and the stub (`python -m pytest -m gpu -s tests/test_row_reduce.py`)."""

from __future__ import annotations

import pytest
import torch
from conftest import ROOT, submission
from interpreted import load_interpreted, load_module
from interpreted_kernels import case_named
from triton_judging import judge

from grader.core.discovery import discover_exercises, resolve
from grader.run.grade import grade

# one worker runs the whole file (pytest-xdist --dist loadgroup): its interpreted kernels are loaded once
pytestmark = [pytest.mark.solutions, pytest.mark.xdist_group("test_row_reduce")]

SPEC = discover_exercises()["row_reduce"]
SOLUTION = ROOT / "solutions" / "row_reduce" / "row_reduce.py"
STUB = ROOT / "exercises" / "row_reduce" / "row_reduce.py"

NEG_INF_ROWS = "M=10 N=5000 (x special=neg_inf_rows)"
NEGATIVE = "M=9 N=4099 (x offset=-10.0)"
TIES = "M=3 N=20000 dtype=bfloat16 (x offset=100.0)"
HALF_OVERFLOW = "M=2 N=40000 dtype=float16 (x offset=100.0)"
ROW_SLICE = "M=6 N=4200 (x layout=row_slice)"

# name: (edits of the solution [(old, new), ...], the case it fails, the output, a message fragment). The spec's
# [[mistakes]] are graded in full by tests/test_exercise_mistakes.py.
MISTAKES = {
    # `>=` keeps the last of equal values in each lane: a row of -inf answers an index near its end
    "last index wins": (
        [("take = x > run_max", "take = x >= run_max")],
        NEG_INF_ROWS,
        "argmaxes",
        "the first index must win",
    ),
    # masked lanes loading 0: the max of a row of negative values is 0, found in the padding
    "masked lanes load 0 for the max": (
        [('other=float("-inf")).to(tl.float32)', "other=0.0).to(tl.float32)")],
        NEGATIVE,
        "maxes",
        "must load -inf",
    ),
    # masked lanes (-inf) added to the sum
    "masked lanes in the sum": ([("run_sum += tl.where(mask, x, 0.0)", "run_sum += x")], "M=1 N=1", "sums", "inf"),
    # the lanes' float32 sums added up in x's dtype: float16 overflows past 65504 (bfloat16 keeps 3 digits)
    "sum in half precision": (
        [("tl.sum(run_sum, axis=0))", "tl.sum(run_sum.to(x_ptr.dtype.element_ty), axis=0))")],
        HALF_OVERFLOW,
        "sums",
        "inf",
    ),
    # the argmax of the first LANE holding the max, not the smallest index among those lanes
    "first lane, not first index": (
        [
            (
                "first = tl.min(tl.where(run_max == best, run_idx, INDEX_PAST_END), axis=0)",
                "first = tl.sum(tl.where(lanes == tl.argmax(run_max, axis=0), run_idx, 0), axis=0)",
            )
        ],
        TIES,
        "argmaxes",
        "the first index must win",
    ),
    # the combine kernel stores which chunk holds the max, not the column
    "chunk number as the argmax": (
        [
            (
                "tl.store(idx_ptr + row, tl.min(tl.where(maxes == best, idxs, INDEX_PAST_END), axis=0))",
                "tl.store(idx_ptr + row, tl.argmax(maxes, axis=0))",
            )
        ],
        TIES,
        "argmaxes",
        "expected",
    ),
    # rows found with N instead of the row stride
    "rows at stride N": ([("row * x_row_stride", "row * n_cols")], ROW_SLICE, "sums", "wrong"),
}


def mistake_file(name, tmp_path):
    text = SOLUTION.read_text()
    for old, new in MISTAKES[name][0]:
        assert text.count(old) >= 1, f"{name}: {old!r} is not in the solution: update MISTAKES"
        text = text.replace(old, new)
    path = tmp_path / "row_reduce.py"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def solution_verdicts():
    """The solution's verdict per case label, computed once for the cases the mistakes use."""
    module = load_interpreted(SOLUTION, "row_reduce_solution")
    return {
        label: judge(SPEC, module.row_reduce, case_named(SPEC, label))
        for label in sorted({m[1] for m in MISTAKES.values()})
    }


def test_the_spec_sums_in_float32_and_judges_max_and_argmax_exactly():
    outputs = {t.name: t for t in SPEC.outputs}
    assert outputs["sums"].dtype == "float32" and outputs["argmaxes"].dtype == "int64"
    assert (outputs["maxes"].check, outputs["argmaxes"].check) == ("exact_max", "first_max_index")
    assert [a.name for a in SPEC.variant(None).args] == ["x", "sums", "maxes", "argmaxes"]
    from grader.checks import hints

    steps = hints.read_ladder(SPEC, "triton")
    assert len(steps) == 3 and all(s.roofline_pct for s in steps)


@pytest.mark.parametrize("name", list(MISTAKES))
def test_each_classic_mistake_fails_on_its_case_which_the_solution_passes(tmp_path, name, solution_verdicts):
    _, label, output, fragment = MISTAKES[name]
    assert solution_verdicts[label].ok, solution_verdicts[label].message
    module = load_interpreted(mistake_file(name, tmp_path), f"row_reduce_mistake_{abs(hash(name))}")
    verdict = judge(SPEC, module.row_reduce, case_named(SPEC, label))
    assert not verdict.ok, f"{name} passed {label}"
    print(f"\n{name}: {verdict.message}")
    assert f": {output}: " in verdict.message or f"elements of {output} " in verdict.message, verdict.message
    assert fragment in verdict.message, verdict.message


def test_the_stub_imports_and_says_what_to_write():
    module = load_interpreted(STUB, "row_reduce_stub")
    with pytest.raises(NotImplementedError, match="write row_reduce_kernel"):
        judge(SPEC, module.row_reduce, case_named(SPEC, "M=3 N=5"))


# --- GPU ------------------------------------------------------------------------------------------------


def torch_three(x):
    return x.sum(1), x.amax(1), x.argmax(1)


@pytest.mark.gpu
@pytest.mark.parametrize("M, N, floor", [(4096, 65536, 0.85), (64, 1_048_576, 0.80)])
def test_the_solution_beats_torch_near_copy_bandwidth(M, N, floor):
    from grader.child import timing

    solution = load_module(SOLUTION, "row_reduce_solution_gpu")
    step1 = load_module(submission("row_reduce_block_reductions.py"), "row_reduce_step1_gpu")
    x = torch.randn(M, N, device="cuda")
    sums = torch.empty(M, device="cuda")
    maxes = torch.empty(M, device="cuda")
    argmaxes = torch.empty(M, dtype=torch.int64, device="cuda")
    want = torch_three(x)
    contestants = {
        "1. block reductions, scalar running values": lambda: step1.row_reduce(x, sums, maxes, argmaxes),
        "3. solution": lambda: solution.row_reduce(x, sums, maxes, argmaxes),
        "torch x.sum(1), x.amax(1), x.argmax(1)": lambda: torch_three(x),
    }
    for name, run in list(contestants.items())[:2]:
        sums.fill_(float("nan"))
        run()
        assert torch.allclose(sums, want[0], rtol=1e-4, atol=1e-2) and torch.equal(maxes, want[1]), name
        assert torch.equal(argmaxes, want[2]), name
    measured = timing.time_alternating(contestants)
    copy_gbps = timing.measure_copy_bandwidth()
    rates = {name: M * N * 4 / (m["median_ms"] / 1000) / 1e9 for name, m in measured.items()}
    print(f"\nrow_reduce {M}x{N} float32 on {torch.cuda.get_device_name()} (copy {copy_gbps:.0f} GB/s):")
    for name, rate in rates.items():
        print(
            f"  {name:42s} {measured[name]['median_ms'] * 1000:8.1f} us  {rate:6.0f} GB/s  "
            f"{100 * rate / copy_gbps:4.0f}% of roofline"
        )
    assert rates["3. solution"] >= floor * copy_gbps
    assert rates["3. solution"] > rates["torch x.sum(1), x.amax(1), x.argmax(1)"]


@pytest.mark.gpu
def test_the_solution_grades_passed_and_the_stub_failed_on_the_gpu():
    target = resolve(("row_reduce",))
    passed = grade(target, source="solutions", seed=5, record=False)
    assert passed.status == "passed", passed.verdict
    print("\n" + next(c.message for c in passed.checks if c.name == "speed"))
    stub = grade(target, source="stubs", seed=5, record=False, quick=True)
    assert stub.status == "failed" and "not implemented yet" in stub.verdict
