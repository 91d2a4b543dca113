"""reduction's Triton version (100-day challenge day 40, multi-stage reduction): partial sums, then a second
launch sums them; no atomics, so the same bits every run.

On the CPU, under the Triton interpreter in this process (tests/triton_judging.py): each classic mistake of
a two-stage sum — a one-line edit of the solution — fails on the spec's case built for it while the
solution passes that case, the solution is deterministic, and the exercise keeps its CUDA version as the
default. (Whole grades of the solution and the stub under the interpreter: tests/test_grading_cpu.py; of
the mistakes, on the CPU and on a GPU: the spec's [[mistakes]], tests/test_exercise_mistakes.py.)
On a GPU: the Triton ladder's figures beside the CUDA solution, torch.sum and the copy bandwidth at 2^28,
the real grades of the solution, the stub and ladder step 1
(`python -m pytest -m gpu -s tests/test_reduction_triton.py`)."""

from __future__ import annotations

import pytest
import torch
from conftest import ROOT, submission
from interpreted import interpreter_on, load_interpreted, load_module
from interpreted_kernels import case_named
from triton_judging import judge

from grader.checks import hints
from grader.core.discovery import discover_exercises, resolve
from grader.run.grade import grade

# one worker runs the whole file (pytest-xdist --dist loadgroup): its interpreted kernels are loaded once
pytestmark = [pytest.mark.solutions, pytest.mark.xdist_group("test_reduction_triton")]

SPEC = discover_exercises()["reduction"]
SOLUTION = ROOT / "solutions" / "reduction" / "reduction.py"
STUB = ROOT / "exercises" / "reduction" / "reduction.py"

# name: (edits of the solution [(old, new), ...], the case (n) it fails, a message fragment)
MISTAKES = {
    # full blocks only: the last n % BLOCK elements are never added (n = 7 is all tail)
    "no tail": (
        [("acc += tl.load(x_ptr + tail, mask=tail < tail_end, other=0.0)", "acc += 0.0")],
        "n=7",
        "elements of out wrong",
    ),
    # every program adds the tail: it counts n_programs times
    "the tail in every program": (
        [("tail_end = tl.where(pid == 0, n, 0)", "tail_end = n")],
        "n=1000003",
        "elements of out wrong",
    ),
    # a capped grid without the grid-stride loop: each program sums one block, the rest is lost
    "no grid-stride loop": (
        [
            (
                "for block in range(pid, n // BLOCK, n_programs):",
                "for block in range(pid, tl.minimum(pid + 1, n // BLOCK)):",
            )
        ],
        "n=1000003",
        "elements of out wrong",
    ),
    # stage 2 forgotten: out is program 0's partial
    "first partial only": (
        [
            (
                "tl.store(out_ptr, tl.sum(partials, axis=0))",
                "tl.store(out_ptr, tl.sum(tl.where(offsets == 0, partials, 0.0), axis=0))",
            )
        ],
        "n=1000003",
        "elements of out wrong",
    ),
}


def mistake_file(name, tmp_path):
    text = SOLUTION.read_text()
    for old, new in MISTAKES[name][0]:
        assert old in text, f"{name}: {old!r} is not in the solution: update MISTAKES"
        text = text.replace(old, new)
    path = tmp_path / "reduction.py"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def solution():
    return load_interpreted(SOLUTION, "reduction_triton_solution")


@pytest.fixture(scope="module")
def solution_verdicts(solution):
    return {
        label: judge(SPEC, solution.reduction, case_named(SPEC, label)) for label in {m[1] for m in MISTAKES.values()}
    }


def test_cuda_stays_the_default_version_and_each_language_has_its_own_ladder():
    assert resolve(("reduction",)).variant.lang == "cuda"
    assert resolve(("week2", "reduction")).variant.lang == "cuda"
    triton = resolve(("reduction",), lang="triton").variant
    assert (triton.stub, [a.name for a in triton.args]) == ("reduction.py", ["x", "out", "n"])
    assert [s.title for s in hints.read_ladder(SPEC, "cuda")] == [
        "One atomicAdd per element",
        "A tree per block",
        "Warp shuffles",
        "A grid-stride loop",
    ]
    steps = hints.read_ladder(SPEC, "triton")
    assert [s.number for s in steps] == [1, 2, 3] and all(s.roofline_pct for s in steps)


@pytest.mark.parametrize("name", list(MISTAKES))
def test_each_classic_mistake_fails_on_its_case_which_the_solution_passes(tmp_path, name, solution_verdicts):
    _, label, fragment = MISTAKES[name]
    assert solution_verdicts[label].ok, solution_verdicts[label].message
    module = load_interpreted(mistake_file(name, tmp_path), f"reduction_triton_mistake_{abs(hash(name))}")
    verdict = judge(SPEC, module.reduction, case_named(SPEC, label))
    assert not verdict.ok and fragment in verdict.message, verdict.message


def test_the_sum_is_the_same_bits_every_run_and_the_cap_on_programs_is_honoured(solution):
    x = torch.rand(300_007)
    outs = []
    for max_partials in (8192, 8192, 3):  # 3: every program walks many blocks of the grid stride
        out = torch.full((1,), float("nan"))
        with interpreter_on():
            solution.reduction(x, out, x.numel(), max_partials=max_partials)
        outs.append(out)
    assert torch.equal(outs[0], outs[1])
    want = x.double().sum()
    assert all(abs(float(o) - want) <= 1e-5 * want for o in outs), (outs, want)


def test_the_stub_imports_and_says_what_to_write():
    module = load_interpreted(STUB, "reduction_triton_stub")
    with pytest.raises(NotImplementedError, match="write the two kernels"):
        judge(SPEC, module.reduction, case_named(SPEC, "n=7"))


# --- GPU ------------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.slow  # a sweep (every ladder step timed): gpu and slow, out of the GPU tier
def test_the_triton_ladder_beside_the_cuda_solution_and_torch_sum_at_2_to_the_28():
    from cuda_rows import cuda_caller

    from grader.child import timing

    n = 2**28
    x = torch.rand(n, device="cuda")
    out = torch.empty(1, device="cuda")
    solution = load_module(SOLUTION, "reduction_triton_solution_gpu")
    step1 = load_module(submission("reduction_one_program.py"), "reduction_triton_step1_gpu")
    step2 = load_module(submission("reduction_program_per_block.py"), "reduction_triton_step2_gpu")
    cuda = cuda_caller(SPEC, ROOT / "solutions" / "reduction" / "reduction.cu")
    contestants = {
        "1. one program": lambda: step1.reduction(x, out, n),
        "2. a program per block, stage 2 loops": lambda: step2.reduction(x, out, n),
        "3. solution (Triton)": lambda: solution.reduction(x, out, n),
        "CUDA solution (atomics)": lambda: cuda({"x": x, "out": out}, {"n": n}),
        "torch.sum": lambda: x.sum(),
    }
    want = x.double().sum()
    for name, run in list(contestants.items())[:4]:
        out.fill_(float("nan"))
        run()
        assert abs(float(out) - want) <= 2e-3 * want, name
    measured = timing.time_alternating(contestants)
    copy_gbps = timing.measure_copy_bandwidth()
    rates = {name: n * 4 / (m["median_ms"] / 1000) / 1e9 for name, m in measured.items()}
    print(f"\nreduction 2^28 float32 on {torch.cuda.get_device_name()} (copy {copy_gbps:.0f} GB/s):")
    for name, rate in rates.items():
        print(
            f"  {name:40s} {measured[name]['median_ms'] * 1000:8.1f} us  {rate:6.0f} GB/s  "
            f"{100 * rate / copy_gbps:4.0f}% of roofline"
        )
    assert rates["3. solution (Triton)"] >= 0.85 * copy_gbps
    assert rates["1. one program"] < 0.5 * rates["3. solution (Triton)"]  # below the speed bar (threshold 0.5)


@pytest.mark.gpu
def test_the_triton_sum_is_the_same_bits_every_run_on_the_gpu():
    solution = load_module(SOLUTION, "reduction_triton_solution_gpu2")
    x = torch.rand(2**26 + 3, device="cuda")
    outs = [torch.empty(1, device="cuda") for _ in range(3)]
    for out in outs:
        solution.reduction(x, out, x.numel())
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[1], outs[2])


@pytest.mark.gpu
def test_the_triton_solution_grades_passed_and_the_stub_and_step_1_fail_on_the_gpu():
    target = resolve(("reduction",), lang="triton")
    passed = grade(target, source="solutions", seed=5, record=False)
    assert passed.status == "passed", passed.verdict
    print("\n" + next(c.message for c in passed.checks if c.name == "speed"))
    stub = grade(target, source="stubs", seed=5, record=False, quick=True)
    assert stub.status == "failed" and "not implemented yet" in stub.verdict
    slow = grade(target, submission=submission("reduction_one_program.py"), seed=5, record=False, sanitize_code=False)
    speed = next(c for c in slow.checks if c.name == "speed")
    assert speed.status == "failed", speed.message
