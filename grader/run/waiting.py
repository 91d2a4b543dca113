"""The "still running" lines a grade prints while it waits for the child, at a terminal only."""

from __future__ import annotations

STILL_RUNNING_S = 10.0  # a "still running" line this often while a grade waits (a terminal only)


def waiting_lines_wanted(stream=None) -> bool:
    """"still running" lines are for a person at a terminal: stderr a TTY, and the grade in the main thread
    (grade-batch's threads have their own progress line; a pipe or a file gets plain output, --json only JSON)."""
    import sys
    import threading

    stream = stream or sys.stderr
    tty = getattr(stream, "isatty", lambda: False)()
    return bool(tty) and threading.current_thread() is threading.main_thread()


def still_running(elapsed_s: float, limit_s: float, step: str) -> str:
    """`still running: 20 s (stopped at 120 s) — checking M=5 N=9001, trial 2`."""
    doing = f" — {step}" if step else ""
    return f"still running: {elapsed_s:.0f} s (stopped at {limit_s:.0f} s){doing}"
