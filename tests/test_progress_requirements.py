"""A unit's `requires` (grader/core/plans.py Requirement, checked in grader/reports/progress.py): a record of a kind, of
one exercise and language where the plan names them, or the unit's report with every notes section
written; `kcourse progress` says on the unit's line what counts and the command that records it."""

from click.testing import CliRunner

from grader.cli import main
from grader.core import store
from grader.core.plans import Plan, PlanExercise, Requirement, Unit
from grader.reports import reporting
from grader.reports.progress import record_matches, report_notes, unit_status, what_counts


def progress_line(key: str, plan: str = "challenge-100-day") -> str:
    result = CliRunner().invoke(main, ["progress", "--plan", plan])
    assert result.exit_code == 0, result.output
    return next(line for line in result.output.splitlines() if f"  {key} " in line)


def test_a_record_counts_only_for_the_exercise_and_language_the_plan_names():
    profile = Requirement("profile", "transpose", "cuda")
    assert record_matches(profile, {"kind": "profile", "exercise": "transpose", "lang": "cuda"})
    assert not record_matches(profile, {"kind": "profile", "exercise": "reduction", "lang": "cuda"})
    assert not record_matches(profile, {"kind": "tune", "exercise": "transpose", "lang": "cuda"})
    assert not record_matches(
        Requirement("compare", "softmax", "cuda"), {"kind": "compare", "exercise": "softmax", "lang": "triton"}
    )
    assert record_matches(
        Requirement("compare", "softmax", "cuda"), {"kind": "compare", "exercise": "softmax", "lang": "cuda+triton"}
    )
    assert record_matches(Requirement("profile"), {"kind": "profile", "exercise": "anything"})


def test_a_profile_of_another_exercise_does_not_finish_a_day_that_names_one():
    store.append({"kind": "profile", "exercise": "reduction", "lang": "cuda"})
    assert progress_line("day57").startswith("[ ]")  # profile:matmul:cuda
    assert "profile of matmul (cuda): not yet (`kcourse profile matmul --lang cuda`)" in progress_line("day57")
    assert progress_line("day26").startswith("[x]")  # any profile
    store.append({"kind": "profile", "exercise": "matmul", "lang": "cuda"})
    assert progress_line("day57").startswith("[x]") and "profile of matmul (cuda): recorded" in progress_line("day57")


def test_an_attention_comparison_counts_for_the_day_that_requires_one():
    assert "attention comparison: not yet (`kcourse compare attention`)" in progress_line("day79")
    store.append({"kind": "compare_attention", "implementations": []})
    assert "attention comparison: recorded" in progress_line("day79")


def test_a_day_with_exercises_and_a_record_is_done_only_with_both():
    store.append({"kind": "grade", "exercise": "rms_norm", "lang": "cuda", "source": "learner", "status": "passed"})
    line = progress_line("day13")
    assert line.startswith("[~]") and "rms_norm (cuda): passed" in line
    assert "comparison of rms_norm (cuda): not yet (`kcourse compare rms_norm v1.cu v2.cu`)" in line
    store.append({"kind": "compare", "exercise": "rms_norm", "lang": "cuda", "rows": []})
    assert progress_line("day13").startswith("[x]")


def test_a_report_day_is_done_when_every_notes_section_of_its_report_is_written(isolated_state):
    assert "your notes in the report: not written (`kcourse report day97 --plan challenge-100-day`" in progress_line(
        "day97"
    )
    path = reporting.render("day97", plan_id="challenge-100-day")
    assert progress_line("day97").startswith("[ ]") and "0 of 2 notes written" in progress_line("day97")
    text = path.read_text()
    first = text.index("<!-- notes:day97-1 -->\n") + len("<!-- notes:day97-1 -->\n")
    path.write_text(text[:first] + "I learned tiling.\n" + text[first:])  # the placeholder may stay beside it
    assert progress_line("day97").startswith("[~]") and "1 of 2 notes written" in progress_line("day97")
    text = path.read_text()
    last = text.index("<!-- notes:day97 -->\n") + len("<!-- notes:day97 -->\n")
    path.write_text(text[:last] + "Next: the capstone.\n" + text[text.index("<!-- /notes:day97 -->") :])
    line = progress_line("day97")
    assert line.startswith("[x]") and "your notes in the report: 2 of 2 notes written" in line
    reporting.render("day97", plan_id="challenge-100-day")  # re-rendering keeps the answers
    assert progress_line("day97").startswith("[x]")


def test_report_notes_of_a_unit_never_rendered_are_none(isolated_state):
    plan = Plan(id="p", title="P", unit_name="day", units=[Unit("day1", "x", requires=["report"])])
    assert report_notes(plan, plan.units[0]) == (0, 0)


def test_a_planned_unit_with_only_an_extra_exercise_says_it_is_planned_and_what_is_gradable():
    unit = Unit(
        "step8",
        "x",
        exercises=[PlanExercise("gelu_op", "cuda", extra=True)],
        planned=["activations fused with the residual add"],
    )
    assert unit_status(unit, {}, []) == "planned"
    assert what_counts(unit, {}, []) == (
        "activations fused with the residual add (gradable meanwhile: gelu_op (cuda, extra): not graded)"
    )


def test_unit_status_counts_exercises_and_requirements_alike():
    unit = Unit("day1", "x", requires=["env"])
    assert unit_status(unit, {}, [None]) == "to do" and unit_status(unit, {}, ["met"]) == "done"
    assert unit_status(unit, {}, ["started"]) == "in progress"
    assert unit_status(Unit("day2", "y", planned=["z"]), {}, []) == "planned"
    assert what_counts(Unit("day2", "y", planned=["z"]), {}, []) == "z"
