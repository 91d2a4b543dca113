"""profile and tune's wait for the child (grade._run_tool): the findings it reports, its failures as it gave them,
a verdict of its own as a forgery, a hang as the run's failure, and each step the child names on the live line
(tune's progress bar reads the configuration at work from it)."""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

import pytest

from grader.core.job import Job
from grader.core.records import FAILED, PASSED, GradeResult
from grader.core.vocabulary import Code, Event
from grader.run import sandbox, waiting
from grader.run.grade import _run_tool

FOUND = {"rows": [], "best": None}


class ScriptedChild:
    """sandbox.Child's side for a tool run: sends `script`'s events in order, then hangs (or ends: GONE)."""

    def __init__(self, tmp_path, *script):
        self.script, self.sent, self.killed = list(script), [], False
        self.dir, self.last_step = tmp_path, "starting"
        self.proc = SimpleNamespace(wait=lambda timeout=None: -9 if self.killed else 0)
        self.pid = os.getpid()  # (the GPU lock, where one is on, favours it while the tool times)
        self.ready, self.start_fails = None, None

    def wait_ready(self):
        if self.start_fails is not None:  # as sandbox.Child: no ready event came, and what came instead is raised
            raise self.start_fails
        self.ready = {"event": Event.READY, "device": {"type": "cpu", "name": "fake"}}
        return self.ready

    def send(self, message):
        self.sent.append(message)

    def event(self, deadline: float) -> dict:
        if not self.script:
            time.sleep(max(0.0, deadline - time.monotonic()))
            raise sandbox.ChildTimeout
        event = self.script.pop(0)
        if event == "GONE":
            raise sandbox.ChildGone
        if event["event"] == Event.STEP:
            self.last_step = event["text"]
        return event

    def kill(self):
        self.killed = True


class Recorder:
    """A live line that keeps what it was shown."""

    def __init__(self):
        self.steps: list[str] = []

    def show(self, elapsed_s, limit_s, step):
        self.steps.append(step)


def run(child, timeout=5.0) -> GradeResult:
    result = GradeResult("softmax", "triton", "learner", 1)
    _run_tool(child, Job(mode="tune", learner="/x/softmax.py"), timeout, result)
    return result


def step(text: str) -> dict:
    return {"event": Event.STEP, "text": text}


@pytest.fixture
def live_line():
    line = Recorder()
    waiting.attach(line)
    yield line
    waiting.attach(None)


def test_the_findings_are_kept_and_each_step_reaches_the_live_line(tmp_path, live_line):
    child = ScriptedChild(tmp_path, step("loading your code"), step("tuning configuration 1 of 2: x"), step("2 of 2"))
    child.script.append({"event": Event.TOOL, "result": FOUND})
    result = run(child)
    assert result.extra["tune"] == FOUND and [c.status for c in result.checks] == [PASSED]
    assert ["loading your code", "tuning configuration 1 of 2: x", "2 of 2"] == [
        s for s in dict.fromkeys(live_line.steps) if s != "starting"
    ]
    assert child.sent[0]["mode"] == "tune" and child.sent[0]["work_dir"] == str(tmp_path)


def test_a_failure_of_the_learners_code_is_kept_as_the_child_reported_it(tmp_path):
    failure = {"name": "load", "status": FAILED, "message": "NameError: x", "details": {"code": "load_error"}}
    check = run(ScriptedChild(tmp_path, {"event": Event.CHECK, "check": failure})).checks[-1]
    assert (check.name, check.status, check.message) == ("load", FAILED, "NameError: x")


@pytest.mark.parametrize("claimed", [{"name": "speed", "status": PASSED, "message": "fast"}, {"nonsense": 1}, None])
def test_a_verdict_the_tool_run_claims_is_a_forgery_never_a_grader_error(tmp_path, claimed):
    check = run(ScriptedChild(tmp_path, {"event": Event.CHECK, "check": claimed})).checks[-1]
    assert (check.status, check.details["code"]) == (FAILED, Code.FORGED_VERDICT)


def test_a_hang_is_stopped_at_the_limit_and_a_death_is_the_runs_failure(tmp_path):
    child = ScriptedChild(tmp_path, step("tuning configuration 1 of 2: x"))
    started = time.monotonic()
    hung = run(child, timeout=0.3).checks[-1]
    assert time.monotonic() - started < 2.0 and child.killed
    assert (hung.name, hung.status) == ("run", FAILED) and "tuning configuration 1 of 2" in hung.message
    died = run(ScriptedChild(tmp_path, "GONE")).checks[-1]
    assert (died.name, died.status) == ("run", FAILED)


def test_a_child_that_never_became_ready_is_the_graders_error_and_no_job_is_sent(tmp_path):
    child = ScriptedChild(tmp_path)
    child.start_fails = sandbox.ChildGone({"message": "internal grader error: CUDA out of memory"})
    check = run(child).checks[-1]
    assert (check.name, check.status, check.details["code"]) == ("grader", "error", Code.CHILD_START)
    assert "could not start, before your code ran: it reported: CUDA out of memory" in check.message
    assert child.sent == [] and child.killed
