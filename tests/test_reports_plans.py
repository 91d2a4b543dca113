"""`kcourse list` shows one plan unless asked for more; `kcourse report KEY` says which plan KEY went to,
keeps the README's defaults (weekN: the 11-week plan, dayN: the 5-day plan) and asks where a key has
no documented default and several plans have it."""

from click.testing import CliRunner

from grader.cli import main
from grader.core.plans import Plan, Unit, load_plans
from grader.reports import reporting


def run(*args):
    return CliRunner().invoke(main, list(args))


def test_list_shows_only_the_default_plan_and_says_how_to_see_the_others():
    result = run("list")
    assert result.exit_code == 0
    assert result.output.startswith("cuda-11-week: 11 weeks")
    assert "day100" not in result.output and "step1" not in result.output
    assert "Other plans: challenge-100-day (100 days of CUDA and Triton)" in result.output
    assert "`kcourse list --plan PLAN`, or all with `kcourse list --all`" in result.output
    assert len(result.output.splitlines()) < 80


def test_list_plan_shows_that_plan_and_all_shows_every_plan():
    five_day = run("list", "--plan", "triton-5-day").output
    assert five_day.startswith("triton-5-day:") and "week2" not in five_day
    assert "Other plans: challenge-100-day (100 days of CUDA and Triton); cuda-11-week (11 weeks" in five_day
    every = run("list", "--all").output
    assert all(f"{plan}:" in every for plan in load_plans()) and "day100" in every and "Other plans" not in every


def test_list_of_an_unknown_plan_is_a_usage_error_naming_the_plans():
    result = run("list", "--plan", "triton-5-days")
    assert result.exit_code == 2 and "Did you mean 'triton-5-day'?" in result.output


def test_report_day9_says_it_used_the_100_day_plan_and_writes_that_plans_file(isolated_state):
    result = run("report", "day9")
    assert result.exit_code == 0, result.output
    assert "day9 → plan challenge-100-day (100 days of CUDA and Triton)" in result.output
    assert (isolated_state / "reports" / "challenge-100-day_day9_report.md").exists()


def test_report_dayN_keeps_the_5_day_plan_and_names_the_other_plan_that_has_it(isolated_state):
    result = run("report", "day3")
    assert result.exit_code == 0, result.output
    assert "day3 → plan triton-5-day (5 days of Triton, a deliverable a day)" in result.output
    assert "for another plan's day3: `kcourse report day3 --plan challenge-100-day`" in result.output
    assert "Triton in depth (matrix multiply)" in (isolated_state / "reports" / "day3_report.md").read_text()


def test_report_weekN_is_the_11_week_plans_without_a_question(isolated_state):
    result = run("report", "week2")
    assert (
        result.exit_code == 0 and "week2 → plan cuda-11-week" in result.output and "another plan" not in result.output
    )


def test_the_same_day_of_two_plans_goes_to_two_files_with_their_own_notes(isolated_state):
    five_day = reporting.render("day2")
    hundred = reporting.render("day2", plan_id="challenge-100-day")
    assert five_day != hundred and five_day.name == "day2_comparison.md"
    text = hundred.read_text()
    assert "Device functions" in text and "`kcourse report day2 --plan challenge-100-day`" in text
    assert "kcourse grade day2 matrix_transform --plan challenge-100-day" in text


def test_a_key_several_plans_share_without_a_documented_default_asks_which(monkeypatch):
    plans = load_plans()
    plans["gpu-bootcamp"] = Plan(id="gpu-bootcamp", title="A bootcamp", unit_name="day", units=[Unit("day9", "Scan")])
    monkeypatch.setattr(reporting, "load_plans", lambda: plans)
    result = run("report", "day9")
    assert result.exit_code == 2
    assert "'day9' is in several plans (challenge-100-day, gpu-bootcamp)" in result.output
    assert (
        "`kcourse report day9 --plan challenge-100-day` or `kcourse report day9 --plan gpu-bootcamp`" in result.output
    )


def test_report_of_a_key_the_chosen_plan_lacks_suggests_its_keys():
    result = run("report", "week2", "--plan", "triton-5-day")
    assert result.exit_code == 2 and "plan 'triton-5-day' has no 'week2'" in result.output and "day2" in result.output
