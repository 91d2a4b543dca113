"""grade-batch starts each grade's child one grade ahead (grader/run/warm_children.py): fresh children only,
one spare per thread and device, and a spare nobody takes ends itself."""

from __future__ import annotations

import time

import pytest

from grader.run.warm_children import WarmChildren


@pytest.mark.slow
def test_the_first_grade_starts_its_own_child_and_the_next_takes_one_already_started():
    children = WarmChildren()
    try:
        assert children.take(None) is None
        spare = children.take(None)
        assert spare is not None and spare.device == "cpu"
        assert spare.wait_ready()["pid"] == spare.proc.pid  # a fresh worker, waiting for its one job
        another = children.take(None)
        assert another is not spare  # never handed out twice
        another.close()
    finally:
        children.close()
    assert spare.proc.poll() is None  # closing the pool leaves a child it handed out to its grade
    spare.close()


@pytest.mark.slow
def test_a_spare_child_nobody_takes_ends_itself():
    children = WarmChildren(idle_s=1)
    try:
        children.take(None)
        spare = children._ready[next(iter(children._ready))]
        spare.wait_ready()
        deadline = time.monotonic() + 15
        while spare.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert spare.proc.poll() == 0, "an idle spare child kept running"
        assert children.take(None) is None  # an ended spare is not handed out; a new one is started instead
    finally:
        children.close()


@pytest.mark.slow
def test_settle_returns_once_the_spare_has_warmed_up_and_drops_one_that_died():
    children = WarmChildren()
    try:
        children.settle(None)  # no spare yet: nothing to wait for
        children.take(None)
        spare = children._ready[next(iter(children._ready))]
        children.settle(None)
        assert spare.ready is not None  # its start-up is over: from now on it runs nothing
        spare.kill()
        spare.proc.wait()
        spare.ready = None  # as if it had died before warming up
        children.settle(None)
        assert not children._ready, "a spare that died was kept for the next grade"
    finally:
        children.close()


@pytest.mark.slow
def test_grade_batch_settles_the_next_grades_spare_before_it_times(monkeypatch, tmp_path):
    """The spare's CUDA start-up once made a correct scan's probe disagree with its timing (1 grade in 10):
    grade_row hands the grade a before_timing that waits for it."""
    from grader.commands import batch
    from grader.core import discovery
    from grader.run import grade

    target = discovery.resolve(("vector_add",), lang="triton")
    seen = {}

    class Graded(Exception):
        pass

    def fake_grade(target, **kwargs):
        kwargs["before_timing"]()
        seen["spare_ready"] = all(c.ready is not None for c in children._ready.values())
        kwargs["child"].close()
        raise Graded

    monkeypatch.setattr(grade, "grade", fake_grade)
    children = WarmChildren()
    try:
        children.take(None)  # the first grade's spare, the child the grade below takes
        try:
            batch.grade_row(target, tmp_path / "x.py", 1, None, None, children)
        except Graded:
            pass
        assert seen == {"spare_ready": True} and children._ready
    finally:
        children.close()


def test_before_timing_ends_the_sanitizer_first_then_what_the_caller_has_on_the_gpu(monkeypatch, tmp_path):
    from grader.core import discovery
    from grader.core.job import Job
    from grader.core.records import GradeResult
    from grader.run import grade

    order = []

    class TimingJudge:  # a judge that reaches the timing phase at once
        child = type("C", (), {"visible_devices": None})()
        phases: dict = {}
        before_timing = None

        def run(self, job):
            self.before_timing()
            order.append("timing")

    monkeypatch.setattr(grade._MemorySafety, "finish", lambda self: order.append("sanitizer"))
    target = discovery.resolve(("vector_add",), lang="triton")
    result = GradeResult(exercise="vector_add", lang="triton", source="x", seed=1)
    run = grade.GradeRun(target, tmp_path / "x.py", result, 1, Job(sanitize=True), gpu=True)
    run.before_timing = lambda: order.append("spare settled")
    grade._judge(run, TimingJudge(), None)
    assert order[:3] == ["sanitizer", "spare settled", "timing"]
