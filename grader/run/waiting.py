"""What a grade shows while it waits for the child, at a terminal only: "still running" lines, or, where the
command shows a live status line (grader.reports.console.GradingStatus), the step for that line instead.

This module knows no terminal library: the live line is any object with `show(elapsed_s, limit_s, step)`,
attached by the command that draws it. Learner code never reaches it: the step text comes from the child's
events, read in this (the parent's) process."""

from __future__ import annotations

from typing import Protocol

STILL_RUNNING_S = 10.0  # a "still running" line this often while a grade waits (a terminal only)


class LiveLine(Protocol):
    """A status line drawn while a grade runs: it is told the step and the time it has had (of its limit)."""

    def show(self, elapsed_s: float, limit_s: float, step: str) -> None: ...


_live: list[LiveLine] = []  # the live line shown now (at most one: a grade in the main thread, at a terminal)


def attach(line: LiveLine | None) -> None:
    """Show the grade's progress on `line` from now on, in place of "still running" lines (None: back to them)."""
    _live[:] = [line] if line is not None else []


def live_shown() -> bool:
    """Whether a live status line is drawn now (it stands in for the "still running" lines)."""
    return bool(_live)


def report(elapsed_s: float, limit_s: float, step: str) -> bool:
    """The step and the time a grade has had, for the live line; False where none is shown. The judge's hook:
    called as often as it likes (it only sets what the line shows at its next refresh)."""
    if not _live:
        return False
    _live[0].show(elapsed_s, limit_s, step)
    return True


def hold(on: bool) -> None:
    """Stop the live line's redraws (on) or start them again: while the probe times bursts with this process's
    clock, no other thread of it should take the interpreter (a redraw holds it for about half a millisecond)."""
    if _live and hasattr(_live[0], "hold"):
        _live[0].hold(on)


def waiting_lines_wanted(stream=None) -> bool:
    """ "still running" lines are for a person at a terminal: stderr a TTY, and the grade in the main thread
    (grade-batch's threads have their own progress line; a pipe or a file gets plain output, --json only JSON),
    and no live status line drawn there (it shows the step itself)."""
    import sys
    import threading

    stream = stream or sys.stderr
    tty = getattr(stream, "isatty", lambda: False)()
    return bool(tty) and threading.current_thread() is threading.main_thread() and not _live


def still_running(elapsed_s: float, limit_s: float, step: str) -> str:
    """`still running: 20 s (stopped at 120 s) — checking M=5 N=9001, trial 2`."""
    doing = f" — {step}" if step else ""
    return f"still running: {elapsed_s:.0f} s (stopped at {limit_s:.0f} s){doing}"
