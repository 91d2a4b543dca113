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
