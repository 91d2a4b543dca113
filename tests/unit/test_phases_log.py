"""The tests' phases log (tests/conftest.py's `phases_log`, KCOURSE_TEST_PHASES_LOG) and its report: with the GPU
lock's log, where a parallel GPU test run's time goes inside its grades (docs/testing.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grader.core.discovery import resolve
from grader.run.grade import grade

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "scripts" / "gpu_lock_report.py"


def test_a_file_that_is_not_there_is_a_load_error(tmp_path):
    result = grade(resolve(("vector_add",), lang="triton"), submission=tmp_path / "nope.py", seed=1, record=False)
    assert result.status == "error" and "does not exist" in result.verdict


@pytest.mark.slow
def test_each_grade_of_a_test_is_logged_with_its_phases_and_the_report_sums_them(tmp_path):
    log = tmp_path / "phases.jsonl"
    test = f"{Path(__file__).relative_to(ROOT)}::test_a_file_that_is_not_there_is_a_load_error"
    env = dict(os.environ, KCOURSE_TEST_PHASES_LOG=str(log))
    ran = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test], cwd=ROOT, env=env)
    assert ran.returncode == 0
    (line,) = [json.loads(text) for text in log.read_text().splitlines()]
    assert (line["test"], line["exercise"], line["lang"], line["status"]) == (test, "vector_add", "triton", "error")
    assert line["wall"] >= 0 and isinstance(line["phases"], dict)
    assert line["children"] == {"forked": 0, "fresh": 0}  # a file that is not there is refused before any child
    phases_report = _report_script().phases_report
    grades = [line, dict(line, exercise="softmax", phases={"numerics": 3.0, "start": 1.0})]
    grades.append(dict(line, exercise="scan", phases={"numerics": 5.0}, children={"forked": 2, "fresh": 1}))
    report = phases_report(grades).splitlines()
    assert report[0].startswith("3 grades")
    assert report[-1] == "grading children: 2 forked by the fork server, 1 started fresh"
    assert report[1].split() == ["numerics", "8", "s", "(longest:", "scan", "5", "s,", "softmax", "3", "s)"]
    assert report[2].split()[:3] == ["start", "1", "s"]


def test_the_lock_report_divides_the_span_into_the_gpu_held_alone_shared_and_by_none():
    """Exclusive 10-20 s (its timer waiting from 5 s), shared 0-12 s (the timer's own grade) and 15-30 s, then
    beside 33-35 s: alone 10 s; shared 22 s (0-10, 20-30, 33-35), 5 of them with the timer waiting; none 30-33 s."""
    occupancy, report = _report_script().occupancy, _report_script().report
    holds = [
        {"mode": "exclusive", "asked": 5.0, "waited": 5.0, "held": 10.0, "pid": 1, "test": "t"},
        {"mode": "shared", "asked": 0.0, "waited": 0.0, "held": 12.0, "pid": 1, "test": "t"},
        {"mode": "shared", "asked": 14.0, "waited": 1.0, "held": 15.0, "pid": 2, "test": "u"},
        {"mode": "beside", "asked": 33.0, "waited": 0.0, "held": 2.0, "pid": 3, "test": "u"},
    ]
    assert occupancy(holds) == (10.0, 22.0, 5.0, 3.0)
    line = (
        "the GPU: held alone (timing) 10 s, shared by numerics 22 s (a timer waiting in 5 s of them), held by none 3 s"
    )
    assert line in report(holds).splitlines()


def test_a_shared_hold_let_go_while_its_child_compiled_is_not_counted_as_the_gpu_shared():
    """A shared hold 0-20 s stepped out 5-15 s (its child compiling, compile_steps.compile_first) and paused 16-18 s
    (a batch of timers first): shared 8 s, held by none 12 s (5-15 and 16-18), and the report counts the pass that
    ended early."""
    occupancy, report = _report_script().occupancy, _report_script().report
    holds = [
        {"mode": "shared", "asked": 0.0, "waited": 0.0, "held": 20.0, "pid": 1, "test": "t"},
        {"mode": "stepped_out", "asked": 5.0, "waited": 10.0, "held": 0.0, "pid": 1, "test": "t", "failed": "Err: x"},
        {"mode": "paused", "asked": 16.0, "waited": 2.0, "held": 0.0, "pid": 1, "test": "t"},
    ]
    assert occupancy(holds) == (0.0, 8.0, 0.0, 12.0)
    lines = report(holds).splitlines()
    assert "stepped_out: 1 holds, held 0 s in all, waited 10 s in all" in lines
    assert "compile passes ended early: 1" in lines and "  t: Err: x" in lines


def _report_script():
    """scripts/gpu_lock_report.py as a module (a test that reads it skips in a learner's kit, which has no scripts/)."""
    import importlib.util

    if not REPORT.exists():
        pytest.skip("scripts/gpu_lock_report.py is the instructors' (not in the learner's kit)")
    spec = importlib.util.spec_from_file_location("gpu_lock_report", REPORT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
