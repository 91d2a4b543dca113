"""Instructors' side: swapping solutions in, calibrated thresholds, exports for CI and course tools, and
grading a class (releases: test_release.py)."""

import json
import shutil
import xml.etree.ElementTree as ET

import pytest
from click.testing import CliRunner
from conftest import ROOT, submission

from grader.cli import main
from grader.core import calibration
from grader.core.records import Check, GradeResult
from grader.reports import exports

pytestmark = pytest.mark.solutions


def run(*args, env=None):
    return CliRunner().invoke(main, list(args), catch_exceptions=False, env=env)


@pytest.mark.slow
def test_kcourse_source_variable_swaps_the_solutions_in_like_the_flag():
    result = run("grade", "week5", "softmax", "--json", env={"KCOURSE_SOURCE": "solutions"})
    data = json.loads(result.output)
    assert data["source"] == "solutions" and data["status"] == "passed"


@pytest.mark.slow
def test_validate_filters_by_plan_and_week_and_rejects_unknown_ones():
    result = run("validate", "--source", "stubs", "--plan", "triton-5-day", "--unit", "day2")
    assert result.exit_code == 0
    assert "softmax" in result.output and "vector_add" in result.output and "reduction" not in result.output
    bad = CliRunner().invoke(main, ["validate", "--unit", "week99"])
    assert bad.exit_code == 2 and "week9" in bad.output


@pytest.mark.slow
def test_validate_repeat_grades_each_exercise_that_many_times_and_says_how_many_were_as_expected():
    result = run("validate", "--only", "vector_add", "--lang", "triton", "--repeat", "2", "--json")
    assert result.exit_code == 0, result.output
    row = json.loads(result.output)["rows"][0]
    assert (row["exercise"], row["outcome"], row["runs"]) == ("vector_add", "ok", "2/2")
    assert CliRunner().invoke(main, ["validate", "--repeat", "0"]).exit_code == 2


def test_validate_times_every_size_on_a_targets_first_run_and_the_verdict_size_on_its_repeats(monkeypatch):
    """The repeats' speed verdict is taken at the same size; the other sizes' runs (~2 s a grade) are skipped."""
    from grader.commands import batch, validation

    asked = []

    def grade_row(target, path, seed, timeout_s, device, children=None, timed_sizes="all"):
        asked.append((target.spec.id, timed_sizes))
        result = GradeResult(exercise=target.spec.id, lang=target.variant.lang, source="solutions", seed=1)
        result.status, result.verdict = "passed", "passed"
        return batch.result_row("", target, result, "passed")

    monkeypatch.setattr(batch, "grade_row", grade_row)
    summary, _ = validation.validate(validation.select({"vector_add", "softmax"}, "triton"), repeat=3, workers=1)
    assert sorted(asked) == sorted([(e, s) for e in ("vector_add", "softmax") for s in ("all", "verdict", "verdict")])
    assert [row["runs"] for row in summary["rows"]] == ["3/3", "3/3"]


def test_validate_calibrate_records_each_ok_exercises_first_run_and_nothing_else(monkeypatch, tmp_path):
    """The first run timed every size beside the solution; an exercise with a failed run records nothing."""
    from grader.commands import batch
    from grader.core.records import Timing

    runs = {"vector_add": 0, "softmax": 0}

    def grade_row(target, path, seed, timeout_s, device, children=None, timed_sizes="all"):
        runs[target.spec.id] += 1
        result = GradeResult(exercise=target.spec.id, lang=target.variant.lang, source="solutions", seed=1)
        passed = target.spec.id == "vector_add" or runs["softmax"] == 1
        result.status, result.verdict = ("passed", "passed") if passed else ("failed", "speed: 0.5x")
        result.device = {"name": "GPU A", "copy_gbps": 3000.0}
        cases = ["n=1", "n=2"] if timed_sizes == "all" else ["n=2"]
        result.timings = [
            Timing(
                case,
                solution_ms=float(runs[target.spec.id]),
                unit="GB/s",
                solution_rate=2900.0,
                solution_roofline_pct=96.7,
                torch_rate=2000.0 if timed_sizes == "all" else None,
                solution_source="live solution",
            )
            for case in cases
        ]
        return batch.result_row("", target, result, result.status)

    monkeypatch.setattr(batch, "grade_row", grade_row)
    path = tmp_path / "calibration.json"
    monkeypatch.setenv("KCOURSE_CALIBRATION", str(path))
    result = CliRunner().invoke(
        main,
        [
            "validate",
            "--only",
            "vector_add",
            "--only",
            "softmax",
            "--lang",
            "triton",
            "--repeat",
            "2",
            "--workers",
            "1",
            "--calibrate",
        ],
    )
    assert result.exit_code == 1  # softmax's second run failed
    entries = calibration.load(path)
    assert list(entries) == ["vector_add:triton"]
    assert {case: gpus["GPU A"]["solution_ms"] for case, gpus in entries["vector_add:triton"].items()} == {
        "n=1": 1.0,
        "n=2": 1.0,
    }
    # the solutions' figures beside PyTorch at the verdict size: only for the exercise that passed every run
    figures = result.output[result.output.index("PyTorch timed beside them") :]
    assert "vector_add" in figures and "n=2" in figures and "2,900 GB/s" in figures and "97%" in figures
    assert "2,000" in figures and "1.45x" in figures and "softmax" not in figures
    refused = CliRunner().invoke(main, ["validate", "--source", "stubs", "--calibrate"])
    assert refused.exit_code == 2 and "--source solutions" in refused.output


def test_one_run_that_is_not_as_expected_makes_the_exercise_unexpected_with_that_runs_verdict():
    from grader.commands.validation import _row
    from grader.core.discovery import resolve
    from grader.core.records import GradeResult

    def graded(status, verdict):
        result = GradeResult(exercise="reduction", lang="cuda", source="solutions", seed=1)
        result.status, result.verdict = status, verdict
        return result

    target = resolve(["reduction"], lang="cuda")
    runs = [graded("passed", "passed: all"), graded("failed", "speed: 0.61x the solution's"), graded("passed", "ok")]
    row = _row(target, runs, "solutions")
    assert (row["outcome"], row["runs"], row["status"]) == ("unexpected", "2/3", "failed")
    assert row["verdict"].startswith("speed: 0.61x")
    skipped = _row(target, [graded("skipped", "no GPU")] * 2, "solutions")
    assert (skipped["outcome"], skipped["runs"]) == ("skipped", "0/2, 2 skipped")


# --- calibration --------------------------------------------------------------------------------


def test_calibrate_missing_picks_the_solutions_without_figures_for_this_gpu_at_every_timed_size():
    from grader.core.discovery import resolve

    scan, blur = resolve(["scan"]), resolve(["blur"])
    sizes = [c.label() for c in scan.spec.performance.cases]
    entries = {
        "scan:cuda": {label: {"GPU A": {"solution_ms": 1.0}} for label in sizes},
        "blur:cuda": {c.label(): {"GPU B": {"solution_ms": 1.0}} for c in blur.spec.performance.cases},
    }
    assert calibration.lacking([scan, blur], entries, "GPU A") == [blur]
    entries["scan:cuda"].pop(sizes[0])  # one timed size short: measured again
    assert calibration.lacking([scan, blur], entries, "GPU A") == [scan, blur]
    assert calibration.lacking([scan, blur], entries, "GPU B") == [scan]


def test_calibration_for_this_gpu_is_used_first_then_an_estimate_that_says_so():
    cal = {"n=1": {"GPU A": {"solution_ms": 2.0, "roofline_fraction": 0.5}}}
    assert calibration.solution_bar(cal, "n=1", "GPU A", work=1.0, ceiling=100.0) == (2.0, "calibration for GPU A (?)")
    ms, source = calibration.solution_bar(cal, "n=1", "GPU B", work=1.0, ceiling=1000.0)
    assert ms == pytest.approx(1.0 / 500 * 1000) and source.startswith("ESTIMATE")
    assert calibration.solution_bar(cal, "n=2", "GPU A", 1.0, 1.0) is None


def test_a_corrupt_calibration_file_is_a_clear_error_and_is_left_alone(tmp_path, monkeypatch):
    path = tmp_path / "calibration.json"
    path.write_text('{"entries": {"x": ')
    monkeypatch.setenv("KCOURSE_CALIBRATION", str(path))
    with pytest.raises(calibration.CalibrationError, match="is corrupt.*kcourse calibrate"):
        calibration.merge({"a:cuda": {"n=1": {"G": {"solution_ms": 1.0}}}})
    assert path.read_text() == '{"entries": {"x": '


def test_calibration_merge_keeps_other_gpus(tmp_path, monkeypatch):
    monkeypatch.setenv("KCOURSE_CALIBRATION", str(tmp_path / "c.json"))
    calibration.merge({"a:cuda": {"n=1": {"G1": {"solution_ms": 1.0}}}})
    calibration.merge({"a:cuda": {"n=1": {"G2": {"solution_ms": 2.0}}}})
    assert set(calibration.load()["a:cuda"]["n=1"]) == {"G1", "G2"}


def test_calibrate_without_a_gpu_is_a_usage_error():
    from conftest import HAS_GPU

    if HAS_GPU:
        pytest.skip("this machine has a GPU")
    result = CliRunner().invoke(main, ["calibrate"])
    assert result.exit_code == 2 and "GPU" in result.output


# --- exports ------------------------------------------------------------------------------------


def fake_result(status_by_check, exercise="reduction"):
    result = GradeResult(
        exercise=exercise,
        lang="cuda",
        source="learner",
        seed=1,
        file=f"exercises/{exercise}/x.cu",
        scoring={"numerics": 6.0, "speed": 4.0},
        output="printed % stuff",
    )
    for name, status in status_by_check.items():
        result.add(Check(name, status, f"{name} {status}\nsecond line"))
    return result.finish()


def test_junit_has_one_testcase_per_check_with_failures_and_skips_counted():
    xml = exports.junit_xml([fake_result({"build": "passed", "numerics": "failed", "speed": "skipped"})])
    suite = ET.fromstring(xml)
    assert suite.attrib["tests"] == "3" and suite.attrib["failures"] == "1" and suite.attrib["skipped"] == "1"
    failure = suite.find("testcase[@name='numerics']/failure")
    assert failure.attrib["message"] == "numerics failed" and "second line" in failure.text


def test_gradescope_gives_partial_credit_from_the_spec():
    passed_slow = fake_result({"numerics": "passed", "integrity": "passed", "speed": "failed"})
    data = exports.gradescope_json([passed_slow])
    assert data["score"] == 6.0 and data["max_score"] == 10.0
    assert {t["name"] for t in data["tests"]} == {"reduction (cuda): numerics", "reduction (cuda): speed"}
    assert all(t["visibility"] == "visible" and "output" in t for t in data["tests"])


def test_a_correct_result_that_cheated_earns_no_numerics_points():
    cheat = fake_result({"numerics": "passed", "integrity": "failed"})
    assert exports.gradescope_json([cheat])["score"] == 0.0


def test_github_annotations_escape_newlines_and_name_the_file():
    [line] = exports.github_annotations([fake_result({"numerics": "failed"})])
    assert line.startswith(
        "::error file=exercises/reduction/x.cu,title=reduction (cuda) numerics::numerics failed%0Asecond"
    )


@pytest.mark.slow
def test_grade_writes_junit_and_gradescope_files(tmp_path):
    result = run("grade", "softmax", "--junit", str(tmp_path / "r.xml"), "--gradescope", str(tmp_path / "g.json"))
    assert result.exit_code == 1
    assert ET.parse(tmp_path / "r.xml").getroot().attrib["failures"] == "1"
    assert json.loads((tmp_path / "g.json").read_text())["score"] == 0


# --- grading a class ----------------------------------------------------------------------------


@pytest.mark.slow
def test_grade_batch_grades_everyone_even_when_one_learner_hangs(tmp_path):
    subs = tmp_path / "subs"
    (subs / "ada").mkdir(parents=True)
    (subs / "bo" / "exercises" / "vector_add").mkdir(parents=True)
    (subs / "cy").mkdir()
    shutil.copy(ROOT / "solutions/vector_add/vector_add.py", subs / "ada" / "vector_add.py")
    shutil.copy(submission("vector_add_hangs.py"), subs / "bo" / "exercises" / "vector_add" / "vector_add.py")
    out = tmp_path / "book"
    result = run(
        "grade-batch", str(subs), "--only", "vector_add", "--lang", "triton", "--out", str(out), "--timeout", "8"
    )
    assert result.exit_code == 0
    rows = {r["learner"]: r for r in json.loads((out / "gradebook.json").read_text())}
    assert rows["ada"]["status"] == "passed" and rows["ada"]["score"] == 7.0
    assert rows["bo"]["status"] == "failed" and "8 s limit" in rows["bo"]["verdict"]
    assert rows["cy"]["status"] == "missing"
    assert (out / "gradebook.csv").read_text().splitlines()[0].startswith("learner,exercise,lang,status,score")


def test_validate_solutions_without_a_solutions_folder_is_a_clear_usage_error(tmp_path, monkeypatch):
    monkeypatch.setattr("grader.core.paths.solutions_dir", lambda: tmp_path / "solutions")
    result = CliRunner().invoke(main, ["validate", "--source", "solutions"])
    assert result.exit_code == 2 and "solutions/ folder" in result.output


def test_a_host_side_exercises_figures_name_its_speedup_over_its_own_serial_run():
    """stream_overlap's anchor is its own one-stream run, not PyTorch: validate's table says the speedup."""
    from grader.commands import validation
    from grader.core.records import Timing

    result = GradeResult(exercise="stream_overlap", lang="cuda", source="solutions", seed=1)
    result.timings = [
        Timing(
            "n=67108864 n_streams=4",
            learner_ms=10.0,
            solution_ms=10.0,
            unit="GB/s",
            solution_rate=84.0,
            baseline_ms=20.4,
            baseline_args="n_streams=1",
            solution_source="live solution",
        )
    ]
    row = {"exercise": "stream_overlap", "lang": "cuda", "outcome": "ok"}
    text = validation.format_figures([validation._figures(row, [result], "solutions")])
    assert "84 GB/s" in text and "stream_overlap (cuda): 2.04x its own run with n_streams=1" in text
