"""`kcourse watch EXERCISE`: the learner's loop — re-grade whenever the file is saved.

Start-up is paid before the save, not after it: this process imports torch once, and the worker for
the next grade (a fresh child: it imports torch and creates its CUDA context) is started as soon as
the previous grade ends, so it is waiting, warm, when the learner saves. Every grade still runs in a
fresh child of its own: a crash or a hang costs only that grade."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Callable

from grader.checks import op_checks
from grader.core import store
from grader.core.discovery import Target
from grader.reports.console import grading_status
from grader.run import sandbox
from grader.run.grade import BACKGROUND, cuda_available, grade, judge_ahead, learner_file, settle_sanitizer
from grader.run.judge import Judge

POLL_S = 0.05  # a stat() 20 times a second costs nothing and takes ~0.1 s off every save -> verdict
SETTLE_S = 0.1  # after a change, before grading: an editor that writes in several calls has finished


def _fresh_child(target: Target) -> sandbox.Child | None:
    return sandbox.child_for(target.variant.kind, cuda_available(), op_checks.first_use_imports(target.spec.checks))


def _next_grade(target: Target, child: sandbox.Child | None, quick: bool) -> tuple[int, Judge | None]:
    """The next grade's seed and its judge, whose large inputs and references are drawn from now on, while
    the learner edits: the parent's part of handing over large inputs (the draw, the file, the float64
    reference) is done before the save, not after it."""
    seed = random.randrange(1, 2**31)
    return seed, judge_ahead(target, child, seed, quick, timed_sizes="verdict")


def _settle(result, target: Target, superseded: Callable[[], bool], show_later: Callable | None) -> None:
    """Record the grade once its sanitizer verdict is in (or stopped by a new save, or by Ctrl-C)."""
    try:
        if settle_sanitizer(result, target.spec, superseded) and show_later is not None:
            show_later(result)
    finally:
        store.append(result.to_dict())


def _stamp(path: Path) -> tuple[float, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime, stat.st_size


def watch(
    target: Target,
    source: str,
    submission: Path | None,
    show: Callable,
    quick: bool = False,
    max_grades: int | None = None,
    sanitize_code: bool = True,
    show_later: Callable | None = None,
) -> None:
    """Grade now and after every save of the learner's file, until Ctrl-C (or `max_grades`, for tests).
    The verdict is shown without waiting for compute-sanitizer, which runs after timing; its verdict
    is passed to `show_later` when it comes, and the grade is recorded then (with it)."""
    path = learner_file(target, source, submission)
    child = _fresh_child(target)
    seed, ahead = _next_grade(target, child, quick)
    seen, graded = None, 0
    try:
        while max_grades is None or graded < max_grades:
            stamp = _stamp(path)
            if stamp is None or stamp == seen:
                time.sleep(POLL_S)
                continue
            time.sleep(SETTLE_S)  # let an editor finish writing the file
            seen = _stamp(path)
            with grading_status(child):  # a live line at a terminal, until the verdict
                result = grade(
                    target,
                    source=source,
                    submission=submission,
                    quick=quick,
                    child=child,
                    seed=seed,
                    sanitize_code=BACKGROUND if sanitize_code else False,
                    record=False,
                    timed_sizes="verdict",
                    ahead=ahead,
                )
            if ahead is not None:
                ahead.close()  # the grade closed it if it used it: closing again is safe
            child = _fresh_child(target)  # warms up while the learner reads the verdict
            show(result)
            seed, ahead = _next_grade(target, child, quick)
            graded += 1
            _settle(result, target, lambda: _stamp(path) != seen, show_later)
    finally:
        if ahead is not None:
            ahead.close()
        if child is not None:
            child.close()
