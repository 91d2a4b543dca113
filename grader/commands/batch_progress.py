"""What an instructor sees while a class is graded: one line (done / running / failed / waiting, grades
per minute, time left), printed every few seconds into a log, and at a terminal a progress bar (rich's) with
the same counts beside it; then a summary. Runners call `started` (from any thread) and the batch calls
`finished`. A grade is counted once: done, or running, or waiting to start (a running grade is not also
"remaining")."""

from __future__ import annotations

import atexit
import threading
import time
from collections import Counter
from typing import Callable, TextIO

from grader.reports.console import at_terminal

BAD = ("failed", "error")


class Progress:
    def __init__(
        self, stream: TextIO | None = None, interval_s: float = 5.0, clock: Callable[[], float] = time.monotonic
    ):
        self.total = self.already = 0
        self.stream, self.interval_s, self.clock = stream, interval_s, clock
        self.done = self.failed = self.retried = 0
        self.running: set[str] = set()
        self.started_at = clock()
        self._shown_at = float("-inf")
        self._lock = threading.Lock()
        self._bar = None  # rich's progress bar and its task, at a terminal (drawn from the first _show on)

    def begin(self, total: int, already: int) -> None:
        """`total` grades to do now; `already` reused from the gradebook."""
        self.total, self.already, self.started_at = total, already, self.clock()

    def started(self, name: str, worker: str = "") -> None:
        """`name` began on `worker` (Dask runners name it; a retried task starts again elsewhere)."""
        with self._lock:
            self.running.add(name)
            self._show()

    def stopped(self, name: str) -> None:
        """A grade's worker is free again (its row may reach `finished` a moment later)."""
        with self._lock:
            self.running.discard(name)

    def finished(self, name: str, row: dict) -> None:
        with self._lock:
            self.running.discard(name)
            self.done += 1
            self.failed += row.get("status") in BAD
            self.retried += (row.get("attempts") or 0) > 1
            self._show(force=self.done == self.total)

    @property
    def elapsed_s(self) -> float:
        return self.clock() - self.started_at

    def per_minute(self) -> float:
        return 60.0 * self.done / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def line(self) -> str:
        return f"graded {self.done}/{self.total} {self.counts()}"

    def counts(self, failed: str = "{} failed") -> str:
        """`(1 failed), 1 running, 2 waiting; 2.0/min, about 1m30s left`: what stands beside done/total.
        `failed`: how the failures are written (the bar's markup colours them)."""
        remaining = self.total - self.done  # running or waiting: what the time left is for
        waiting = max(0, remaining - len(self.running))
        text = (
            f"({failed.format(self.failed)}), {len(self.running)} running, {waiting} waiting; "
            f"{self.per_minute():.1f}/min"
        )
        if self.done and remaining:
            text += f", about {_duration(self.elapsed_s / self.done * remaining)} left"
        return text

    def _show(self, force: bool = False) -> None:
        if self.stream is None:
            return
        now = self.clock()
        tty = getattr(self.stream, "isatty", lambda: False)()
        if tty and at_terminal(self.stream):
            self._draw_bar()
        elif tty:  # TERM=dumb: the line rewritten in place
            self.stream.write("\r" + self.line().ljust(100)[:120])
        elif force or now - self._shown_at >= self.interval_s:
            self.stream.write(self.line() + "\n")
        else:
            return
        self._shown_at = now
        self.stream.flush()

    def _draw_bar(self) -> None:
        """rich's bar: done/total, and beside it the failures so far (red once there is one), running, waiting."""
        fresh = self._bar is None
        if fresh:
            self._bar = _new_bar(self.stream)
        bar, task = self._bar
        failed = "[bold red]{} failed[/]" if self.failed else "{} failed"
        bar.update(task, total=self.total, completed=self.done, counts=self.counts(failed))
        if fresh:  # drawn from now on, its first frame already right
            bar.start()
            atexit.register(bar.stop)  # a batch ended by an error or Ctrl-C still gives the terminal its cursor back

    def close(self) -> None:
        if self._bar is not None:
            self._bar[0].stop()  # the last state stays on screen
        elif self.stream is not None and getattr(self.stream, "isatty", lambda: False)():
            self.stream.write("\n")
            self.stream.flush()

    def summary(self, rows: list[dict]) -> str:
        """Counts by status over the whole class (this run's grades and those reused from the gradebook)."""
        counts = Counter(r["status"] for r in rows)
        statuses = ", ".join(
            f"{counts[s]} {s}" for s in ("passed", "failed", "error", "skipped", "missing") if counts[s]
        )
        text = (
            f"{len(rows)} grades ({statuses or 'none'}): {self.done} graded now in {_duration(self.elapsed_s)} "
            f"({self.per_minute():.1f}/min), {self.already} already in the gradebook"
        )
        if self.retried:
            text += f"; {self.retried} retried after their worker died (column attempts)"
        return text


def _new_bar(stream: TextIO):
    """A rich progress bar on `stream` (a terminal), not started yet: (bar, its one task). Prints while it runs go
    above it (stdout's only where stdout is this terminal too)."""
    import sys

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    bar = Progress(
        SpinnerColumn(),
        TextColumn("graded"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[counts]}"),
        TimeElapsedColumn(),
        console=Console(file=stream, highlight=False),
        redirect_stdout=at_terminal(sys.stdout),
    )
    return bar, bar.add_task("graded", counts="")


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return (
        f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
        if seconds >= 3600
        else (f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s")
    )
