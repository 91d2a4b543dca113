import json

import pytest
from click.testing import CliRunner

from grader.cli import main


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.mark.slow
def test_grade_by_week_prints_the_verdict_and_exits_1_for_a_stub():
    result = run("grade", "week4", "vector_add", "--seed", "5")
    assert result.exit_code == 1
    assert "not implemented yet" in result.output and "=> FAILED" in result.output


@pytest.mark.slow
@pytest.mark.solutions
def test_grade_solution_exits_0_and_strict_counts_skips_as_failures():
    assert run("grade", "week5", "softmax", "--source", "solutions").exit_code == 0
    # without a GPU the timing is skipped, which --strict refuses
    from conftest import HAS_GPU

    assert run("grade", "week5", "softmax", "--source", "solutions", "--strict").exit_code == (0 if HAS_GPU else 1)


@pytest.mark.slow
def test_json_prints_the_full_result_as_one_document():
    result = run("grade", "softmax", "--json", "--seed", "9")
    data = json.loads(result.output)
    assert data["exercise"] == "softmax" and data["seed"] == 9 and data["status"] == "failed"
    assert {c["name"] for c in data["checks"]} >= {"load", "numerics"}


def test_unknown_exercise_is_a_usage_error_with_a_suggestion():
    result = CliRunner().invoke(main, ["grade", "week2", "reduce"])
    assert result.exit_code == 2
    assert "Did you mean 'reduction'?" in result.output


def test_ambiguous_id_asks_for_lang():
    result = CliRunner().invoke(main, ["grade", "vector_add"])
    assert result.exit_code == 2 and "--lang" in result.output


@pytest.mark.slow
def test_list_shows_plans_units_exercises_and_status():
    run("grade", "week4", "vector_add")
    output = run("list", "--plan", "cuda-11-week").output
    assert "week2" in output and "reduction [cuda]: not graded" in output
    assert "vector_add [triton]: failed" in output
    assert "flash_attention_v2_backward [triton]: not graded" in output
    assert "+ attention comparison: `kcourse compare attention`" in output  # a record the week needs, and how


@pytest.mark.slow
def test_env_check_records_and_day1_report_renders_it(isolated_state):
    result = run("env-check")
    assert result.exit_code == 0 and "triton" in result.output
    report = run("report", "day1")
    assert report.exit_code == 0
    text = (isolated_state / "reports" / "day1_env_check.md").read_text()
    assert "# Day 1" in text and "| Triton |" in text and "What this machine can do" in text


def test_day1_report_before_env_check_says_what_to_run():
    result = CliRunner().invoke(main, ["report", "day1"])
    assert result.exit_code == 2 and "kcourse env-check" in result.output


@pytest.mark.slow
def test_final_report_lists_graded_exercises(isolated_state):
    run("grade", "week4", "vector_add", "--seed", "1")
    assert run("report", "final").exit_code == 0
    text = (isolated_state / "reports" / "final_report.md").read_text()
    assert "| vector_add | triton | failed | not implemented yet" in text


@pytest.mark.slow
@pytest.mark.solutions
def test_validate_solutions_passes_and_stubs_fail_for_triton():
    """The command, on a few exercises: every Triton solution passes under the interpreter in
    test_grading_cpu.py, and CI (.ci/run) validates the whole catalog (this once took 4 minutes of it again)."""
    solutions = run(
        "validate",
        "--source",
        "solutions",
        "--lang",
        "triton",
        "--only",
        "vector_add",
        "--only",
        "softmax",
        "--only",
        "layer_norm",
    )
    assert solutions.exit_code == 0 and "0 unexpected" in solutions.output and "3 ok" in solutions.output
    stubs = run(
        "validate", "--source", "stubs", "--only", "softmax"
    )  # the CUDA one compiled only (the emulator is off)
    assert stubs.exit_code == 0 and "1 ok" in stubs.output


@pytest.mark.slow
def test_the_command_ends_at_once_with_its_exit_code_and_every_line_written(tmp_path):
    """`kcourse grade` skips the interpreter's teardown (most of a second with torch loaded): the exit code,
    the whole output and the record must still be there."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "KCOURSE_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "grader", "grade", "vector_add", "--lang", "triton", "--json", "--seed", "5"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["status"] == "failed"
    assert "leaked" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    records = list(tmp_path.rglob("results.jsonl"))
    assert records and json.loads(records[0].read_text().splitlines()[-1])["status"] == "failed"


def test_a_kcourse_error_no_verb_handles_is_its_message_and_exit_status_2_never_a_traceback():
    import click
    from click.testing import CliRunner

    from grader.cli import Commands
    from grader.core.errors import KcourseError
    from grader.core.plans import PlanError

    @click.group(cls=Commands)
    def group():
        pass

    @group.command()
    def fails():
        raise PlanError("plans/x.toml: week 3 lists no exercise; add one or remove the week")

    result = CliRunner().invoke(group, ["fails"])
    assert result.exit_code == 2 and "plans/x.toml: week 3 lists no exercise" in result.output
    assert "Traceback" not in result.output and isinstance(PlanError("x"), KcourseError)
