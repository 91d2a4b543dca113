"""The judge's side of the child protocol: the child's next event within the grade's deadline, the failures
the child reports, forgeries of them, and the verdict when the child dies or hangs (grader/run/judge.py).

The child (grader/child/worker.py) runs learner code, so nothing it sends is trusted: an event out of order or
unreadable, or a "passed" it claims, is an integrity failure; its death or silence is the run check's verdict."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

from grader import cuda_cpu
from grader.core import gpu_lock
from grader.core.job import Job
from grader.core.records import ERROR, FAILED, PASSED, Check, GradeResult
from grader.core.vocabulary import COMPILING, CheckName, Code, Event
from grader.run import waiting
from grader.run.sandbox import Child, ChildGone, ChildTimeout, Death, death_message, start_failure

REPORT_LIMIT = 1 << 16  # characters of a dead child's output read for the emulator's fault report


class Finished(Exception):
    """The grade has its verdict (a failure); stop talking to the child."""


class CompileClock:
    """The seconds the child spent in its compile steps (Triton's compiles, and the autotuning between them): from
    such a STEP event to the child's next event, as this process reads them. `alone`: those begun while this process
    held the GPU lock exclusively (the parallel tests' timing), time in which no other grade could use the GPU."""

    def __init__(self):
        self.total = self.alone = 0.0
        self._since: float | None = None
        self._alone = False

    def seen(self, event: dict[str, Any], now: float) -> None:
        if self._since is not None:
            self.total += now - self._since
            self.alone += now - self._since if self._alone else 0.0
            self._since = None
        if event.get("event") == Event.STEP and str(event.get("text", "")).startswith(COMPILING):
            self._since, self._alone = now, gpu_lock.held_alone()

    def phases(self) -> dict[str, float]:
        """{"compiling": s, "compiling_alone": s} where any (beside a grade's phases: they overlap them)."""
        spent = {"compiling": self.total, "compiling_alone": self.alone}
        return {name: round(seconds, 3) for name, seconds in spent.items() if seconds > 0}


class ChildLink:
    def __init__(
        self,
        child: Child,
        result: GradeResult,
        timeout_s: float,
        load_limit_s: float,
        on_fail: Callable[[], None] = lambda: None,
    ):
        self.child, self.result = child, result
        self.timeout_s, self.load_limit_s = timeout_s, load_limit_s
        self.on_fail = on_fail  # the judge's threads stop before the child is killed
        self.deadline = float("inf")
        self.loading = False  # waiting for the learner's file to load (a timeout then is a hang at import)
        self.learner = ""
        self.waited_from = time.monotonic()  # "still running" lines count from the job (next_event)
        self.line_due = self.waited_from + waiting.STILL_RUNNING_S
        self.quiet = False  # no terminal writes (while this process's clock times the probe's bursts)
        self.compiles = CompileClock()

    def start(self, job: Job, started: float) -> None:
        """Send the job; the whole run's limit counts from `started`."""
        self.deadline = started + self.timeout_s
        self.waited_from, self.line_due = started, started + waiting.STILL_RUNNING_S
        self.learner = job.learner
        job.work_dir = str(self.child.dir)
        self.child.send(job.to_message())

    @contextmanager
    def paused(self) -> Iterator[None]:
        """The child waits, not runs (its numerics paused for other grades' timers): its deadline stops meanwhile."""
        deadline, self.deadline, started = self.deadline, math.inf, time.monotonic()
        try:
            yield
        finally:
            self.deadline = deadline + (time.monotonic() - started)

    def expect_loaded(self, started: float) -> None:
        """The learner's file imported within load_limit_s of the job (the whole run's limit counts it too)."""
        whole, self.deadline = self.deadline, min(self.deadline, started + self.load_limit_s)
        self.loading = True
        self.expect(Event.LOADED)
        self.loading, self.deadline = False, whole

    def expect(self, kind: str) -> dict[str, Any]:
        """The child's next event of `kind`; a failure it reports (its own code's) ends the grade."""
        while True:
            event = self.next_event()
            if event["event"] == kind:
                return event
            if event["event"] == Event.CHECK:
                self._child_failure(event.get("check"))
            if event["event"] == Event.DONE:
                raise ChildGone
            if event["event"] == Event.GARBLED:
                self.fail(
                    CheckName.INTEGRITY,
                    f"the grading process sent an unreadable message ({event['text']!r}): "
                    "does your code write to file descriptors it did not open?",
                    code=Code.GARBLED,
                )

    def next_event(self) -> dict[str, Any]:
        """The child's next event; at a terminal, while the grade goes on, a "still running" line every
        waiting.STILL_RUNNING_S (not during the probe, whose bursts this process's clock times)."""
        if not self.quiet:  # the live line at a terminal, where one is drawn, shows the step
            waiting.report(time.monotonic() - self.waited_from, self.deadline - self.waited_from, self.child.last_step)
        lines = not self.quiet and waiting.waiting_lines_wanted()
        while True:  # the deadline read again each second: a pause for other grades' timers stops it (paused)
            now = time.monotonic()
            if lines and now >= self.line_due:
                print(
                    waiting.still_running(
                        now - self.waited_from, self.deadline - self.waited_from, self.child.last_step
                    ),
                    file=sys.stderr,
                    flush=True,
                )
                self.line_due = now + waiting.STILL_RUNNING_S
            try:
                event = self.child.event(min(self.deadline, now + 1.0, self.line_due if lines else math.inf))
                self.compiles.seen(event, time.monotonic())
                return event
            except ChildTimeout:
                if time.monotonic() >= self.deadline:
                    raise

    def _child_failure(self, check: dict) -> None:
        """The child reports failures of the learner's code; a "passed" from it is a forgery."""
        try:
            reported = Check(**check)
        except TypeError:  # not a check's fields (or no check at all): a forgery too
            reported = Check(CheckName.INTEGRITY, PASSED, "")
        if reported.status not in (FAILED, ERROR):
            self.fail(
                CheckName.INTEGRITY,
                f"the grading process reported its own verdict ({reported.name}: "
                f"{reported.status}): verdicts are the grader's — does your code write to the grader's pipe?",
                code=Code.FORGED_VERDICT,
            )
        self.result.add(reported)
        self.child.kill()
        raise Finished

    def fail(self, name: str, message: str, **details: Any) -> None:
        """The grade fails at `name`: the child is stopped, and Finished ends the grade."""
        self.result.add(Check(name, FAILED, message, details))
        self.on_fail()
        self.child.kill()
        raise Finished

    def died(self, timed_out: bool) -> None:
        """The child hung past the deadline or ended before its verdict: the run check says which and where."""
        self.child.kill()
        code = self.child.proc.wait()
        if timed_out and self.loading and Path(self.learner).suffix == ".py":
            self.result.add(Check(CheckName.RUN, FAILED, self._load_timeout_message(), {"code": Code.LOAD_TIMEOUT}))
            return
        kind, message = death_message(Death(timed_out, code, self.child.last_step), self.timeout_s)
        # the emulator's report whole: an AddressSanitizer report's stack runs past the learner-facing 4,000 characters,
        # and its first line says what the access was
        explained = None if timed_out else cuda_cpu.explain(self.child.output(limit=REPORT_LIMIT))
        if explained is not None:  # the CPU emulator stopped a kernel: the verdict a GPU's CUDA error gets
            self.result.add(
                Check(
                    CheckName.NUMERICS,
                    FAILED,
                    f"{explained[1]} (while {self.child.last_step})",
                    {"code": Code.CUDA_ERROR, "emulator": explained[0]},
                )
            )
            return
        self.result.add(Check(CheckName.RUN, FAILED, message, {"code": kind}))

    def _load_timeout_message(self) -> str:
        return (
            f"importing {Path(self.learner).name} ran past the {self.load_limit_s:g} s limit and was stopped: "
            "its module-level code runs when the grader loads it — a loop there that never ends, or a test call "
            'left at the top level? Put test code under `if __name__ == "__main__":` and grade again'
        )


def not_started(child: Child, exc: Exception) -> Check:
    """The verdict on a child that never became ready (a grade's or a tool run's): no learner code had run, so it is
    the grader's error, saying what the child reported or how it ended."""
    child.kill()
    code, message = start_failure(exc, child.proc.wait())
    return Check(CheckName.GRADER, ERROR, message, {"code": code})
