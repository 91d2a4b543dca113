"""Hint rules (grader/checks/hints.py) on the toy exercise: what tests/test_hints.py (the catalog's ladders and
failure modes) leaves out — the language a hint is written for, the speed hint's tune advice and where the
ladder runs out, the tail arithmetic, and that a hint never breaks a grade."""

from __future__ import annotations

import pytest

from grader.checks import hints
from grader.checks.hints import Step, next_steps
from grader.core.records import FAILED, PASSED, Check, GradeResult
from grader.core.spec import load_spec

from .conftest import toy_spec

LADDER = (
    "# Toy\n\n## Ladder\n\n1. **Naive**: one element a thread (about 10% of roofline).\n"
    "2. **Vectorised**: float4 loads (about 60% of roofline).\n3. **Persistent**: a grid-stride loop (about 85% of roofline).\n"
)


@pytest.fixture
def tuned(exercise_dir):
    folder = exercise_dir(toy_spec(after="[tuning.triton]\nBLOCK = [256, 1024]\n"))
    (folder / "README.md").write_text(LADDER)
    return load_spec(folder)


def hint(spec, check: Check, lang: str = "triton", **fields) -> str | None:
    result = GradeResult(spec.id, lang, "learner", 1, checks=[check], **fields)
    hints.annotate(result, spec)
    return check.details.get("hint")


def speed_check(ratio: float, roofline_pct: float | None = None) -> Check:
    return Check(
        "speed", FAILED, "n=64: slow", {"ratio": ratio, "threshold": 0.7, "roofline_pct": roofline_pct, "code": "slow"}
    )


def test_the_speed_hint_names_the_next_step_above_the_learners_roofline(tuned):
    text = hint(tuned, speed_check(0.3, roofline_pct=30))
    assert text.startswith("correct, at 30% of this GPU's roofline, 0.30× the solution's speed (needed: 0.70×)")
    assert "step 2: Vectorised: float4 loads (about 60% of roofline)" in text and "kcourse tune" not in text


def test_close_to_the_bar_the_speed_hint_offers_the_tuner(tuned):
    assert "`kcourse tune toy` times your kernel over the exercise's configurations" in hint(
        tuned, speed_check(0.6, 70)
    )


def test_past_the_last_figure_the_last_step_is_next():
    steps = [Step(1, "a", "a", 10.0), Step(2, "b", "b", 50.0), Step(3, "c", "c", 80.0)]
    assert [s.number for s in next_steps(steps, 95.0)] == [3]
    assert [s.number for s in next_steps(steps, None)] == [2, 3]


def test_a_step_without_a_figure_leaves_the_rest_to_the_learner():
    steps = [Step(1, "a", "a", 10.0), Step(2, "b", "b", None), Step(3, "c", "c", 80.0)]
    assert [s.number for s in next_steps(steps, 50.0)] == [2, 3]


def test_a_speed_check_without_a_ratio_gets_no_hint(tuned):
    assert hint(tuned, Check("speed", FAILED, "x", {"code": "gpu_shared"})) is None


@pytest.mark.parametrize(
    "code, cuda_words, triton_words",
    [
        ("timeout", "__syncthreads() inside a branch", "Triton interpreter"),
        ("crash", "compute-sanitizer", "mask every access with offsets < n"),
    ],
)
def test_run_failures_are_explained_in_the_learners_language(toy, code, cuda_words, triton_words):
    check = lambda: Check("run", FAILED, "x", {"code": code})  # noqa: E731
    assert cuda_words in hint(toy, check(), lang="cuda") and triton_words in hint(toy, check(), lang="triton")


def test_wrong_values_only_past_an_aligned_index_point_at_the_last_block(toy):
    check = Check(
        "numerics",
        FAILED,
        "n=2048, trial 1: 1024 of 2048 elements of c wrong",
        {
            "code": "mismatch",
            "wrong": 1024,
            "first_index": 1024,
            "last_wrong": 2047,
            "total": 2048,
            "case": {"n": 2048},
        },
    )
    assert hint(toy, check).startswith(
        "only the last 1024 elements (from index 1024 = 1 × 1024, where a block of 1024 starts) are wrong"
    )


def test_a_hint_that_fails_leaves_the_check_without_one(toy, monkeypatch):
    def broken(check, context):
        raise ZeroDivisionError

    monkeypatch.setitem(hints._BY_CODE, "mismatch", broken)
    assert hint(toy, Check("numerics", FAILED, "x", {"code": "mismatch"})) is None


def test_passed_and_unknown_codes_get_no_hint(toy):
    assert hint(toy, Check("numerics", PASSED, "ok", {"code": "mismatch"})) is None
    assert hint(toy, Check("numerics", FAILED, "x", {"code": "something_new"})) is None
