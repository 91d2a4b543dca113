"""End to end on the CPU: Triton exercises through the interpreter in a real child process, CUDA
exercises through nvcc compile checks and the CPU emulator; every stub fails, every solution passes what can run."""

import pytest

pytestmark = pytest.mark.solutions

from conftest import HAS_GPU

from grader.core import store
from grader.core.discovery import all_targets, resolve
from grader.run.grade import grade

cpu_only = pytest.mark.skipif(HAS_GPU, reason="checks the no-GPU path")


def checks_by_name(result):
    return {c.name: c for c in result.checks}


def code_of(result):
    return next(c.details.get("code") for c in result.checks if c.status in ("failed", "error"))


@pytest.mark.slow
@pytest.mark.parametrize("target", [t for t in all_targets() if t.variant.kind == "triton"], ids=lambda t: t.key)
def test_triton_solution_passes_under_the_interpreter(target):
    result = grade(target, source="solutions", seed=7)
    assert result.status == "passed", result.verdict
    checks = checks_by_name(result)
    assert checks["numerics"].status == "passed" and checks["integrity"].status == "passed"
    if not HAS_GPU:
        assert checks["speed"].status == "skipped" and "Triton interpreter" in checks["speed"].message


@pytest.mark.slow
@pytest.mark.parametrize("target", [t for t in all_targets() if t.variant.kind == "triton"], ids=lambda t: t.key)
def test_triton_stub_reports_not_implemented(target):
    result = grade(target, source="stubs", seed=7)
    assert result.status == "failed"
    assert code_of(result) == "not_implemented"
    assert "not implemented yet" in result.verdict


def test_every_grade_is_recorded_in_the_store():
    target = resolve(("week4", "vector_add"))
    grade(target, source="stubs", seed=3)
    grade(target, source="solutions", seed=4)
    records = [r for r in store.read_all() if r["kind"] == "grade"]
    assert [(r["source"], r["status"], r["seed"]) for r in records] == [
        ("stubs", "failed", 3),
        ("solutions", "passed", 4),
    ]


def test_a_missing_solutions_folder_is_an_error_not_a_traceback(monkeypatch, tmp_path):
    for where in (
        "grader.core.discovery.solution_file",
        "grader.run.grade.solution_file",
    ):  # the file graded, the one timed
        monkeypatch.setattr(where, lambda spec, variant: tmp_path / "nope.py")
    result = grade(resolve(("softmax",)), source="solutions", seed=1)
    assert result.status == "error" and "does not exist" in result.verdict


@cpu_only
@pytest.mark.parametrize("source, status, failed", [("solutions", "passed", None), ("stubs", "failed", "NotImpl")])
def test_the_compile_pass_runs_in_a_real_child_before_the_trials_and_changes_no_verdict(
    monkeypatch, source, status, failed
):
    """compile_steps.compile_first is a GPU grade's; forced here under the interpreter (whose kernel calls do nothing
    in the pass) it runs the protocol end to end in a real, boxed child: COMPILE_CASES, the stand-ins made there,
    COMPILED (with what ended the pass early: the stub's NotImplementedError), then the trials, whose verdict is the
    one a grade without the pass gets."""
    from grader.run import judge

    ended = []
    monkeypatch.setattr(judge.Judge, "_compiles_first", lambda self: True)
    monkeypatch.setattr(judge.gpu_lock, "step_out", lambda: lambda why=None: ended.append(why))
    result = grade(resolve(("vector_add",), lang="triton"), source=source, seed=5, record=False)
    assert result.status == status, result.verdict
    assert len(ended) == 1  # the numerics' pass: nothing is timed without a GPU
    if failed:
        assert ended[0].startswith(failed) and code_of(result) == "not_implemented"
    else:
        assert ended[0] is None
