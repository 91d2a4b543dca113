"""What an instructor sees while a class is graded: one line (done / running / failed / waiting, grades
per minute, time left), printed every few seconds into a log, and at a terminal a progress bar (rich's) with
the same counts beside it; then a summary. Runners call `started` (from any thread) and the batch calls
`finished`. A grade is counted once: done, or running, or waiting to start (a running grade is not also
"remaining").

StepBar is the same bar for a command that works through a short list one item at a time (compare's versions,
tune's configurations): done/total, the item at work and its step, the time elapsed; drawn at a terminal only,
and gone when the list is done."""

from __future__ import annotations

import atexit
import re
import sys
import threading
import time
from collections import Counter
from typing import Callable, TextIO

from grader.reports.console import at_terminal
from grader.run import waiting

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
        bar.update(task, total=self.total, completed=self.done, detail=self.counts(failed))
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


def _new_bar(
    stream: TextIO,
    label: str = "graded",
    markup: bool = True,
    transient: bool = False,
    before_render: Callable[[], None] | None = None,
    refresh_per_second: float = 10,
):
    """A rich progress bar on `stream` (a terminal), not started yet: (bar, its one task), whose field `detail` is
    the text beside done/total (rich's markup read in it where `markup`). Prints while it runs go above it (stdout's
    only where stdout is this terminal too). `transient`: erased when stopped. `before_render`: called before each
    redraw (from rich's refresh thread), for a caller that reads its progress rather than being told."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    class Bar(Progress):
        def get_renderables(self):
            if before_render is not None:
                before_render()
            yield from super().get_renderables()

    bar = Bar(
        SpinnerColumn(),
        TextColumn(label, markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[detail]}", markup=markup),
        TimeElapsedColumn(),
        console=Console(file=stream, highlight=False),
        redirect_stdout=at_terminal(sys.stdout),
        transient=transient,
        refresh_per_second=refresh_per_second,
    )
    return bar, bar.add_task(label, detail="")


def json_asked() -> bool:
    """Whether the command running now was given --json (its click parameter `as_json`)."""
    import click

    context = click.get_current_context(silent=True)
    return bool(context is not None and context.params.get("as_json"))


# Characters of a name or a step that a terminal would act on (the step is the grading child's words; a file name may
# hold anything): shown as spaces.
UNPRINTABLE = r"[\x00-\x1f\x7f]"


class StepBar:
    """A command's progress through a short list, one item at a time (compare's versions, tune's configurations), as
    a bar on `stream` (stderr by default) where it is a terminal (console.at_terminal) and this is the main thread:
    `label`, done/total, the item at work and its step, the time elapsed, for the `with` block, then erased (the
    command's table follows). Elsewhere (a pipe, a file, CI, TERM=dumb) or not `enabled`, it draws nothing and the
    command prints what it printed before; `enabled` None: unless the command runs with --json (as a grade's live
    line is not drawn for --json).

    While drawn it is also the grade's live line (waiting.attach): the judge's step (`checking n=37, trial 2`) shows
    beside the item, in place of the "still running" lines, and the probe's hold stops its redraws. `on_step`: called
    with each step the grade reports, in place of showing it, for a caller whose steps say which item is at work
    (tune: the configuration the child tries)."""

    def __init__(
        self,
        label: str,
        total: int,
        stream: TextIO | None = None,
        enabled: bool | None = None,
        on_step: Callable[[str], None] | None = None,
    ):
        self.label, self.total, self.on_step = label, total, on_step
        if enabled is None:
            enabled = not json_asked()
        self.stream = stream or sys.stderr
        self.done, self.item, self.step = 0, "", ""
        self.drawn = enabled and at_terminal(self.stream) and threading.current_thread() is threading.main_thread()
        self._bar = None

    def __enter__(self) -> StepBar:
        if self.drawn:
            self._bar = _new_bar(  # four redraws a second, as the grade's live line (console.grading_status)
                self.stream, self.label, markup=False, transient=True, before_render=self._update, refresh_per_second=4
            )
            self._update()
            self._bar[0].start()
            waiting.attach(self)
        return self

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            waiting.attach(None)
            self._bar[0].stop()
            self._bar = None

    def working_on(self, item: str) -> None:
        """The next item has begun (its step unknown yet): drawn at once."""
        self.item, self.step = item, ""
        self.refresh()

    def advance(self) -> None:
        """The item at work is done: drawn at once."""
        self.done += 1
        self.refresh()

    def show(self, elapsed_s: float, limit_s: float, step: str) -> None:
        """waiting.LiveLine's: the step the grade is at, drawn at the next refresh (the judge reports each event; a
        redraw per event would hold the interpreter that often). The time shown is the bar's own, from its start."""
        if self.on_step is not None:
            self.on_step(step)
        else:
            self.step = step

    def hold(self, on: bool) -> None:
        """No redraws while on (the probe's bursts are timed by this process's clock)."""
        if self._bar is not None:
            self._bar[0].stop() if on else self._bar[0].start()

    def detail(self) -> str:
        """`naive.cu · checking n=37, trial 2`: the item at work and its step, on one line."""
        text = " · ".join(part for part in (self.item, self.step) if part)
        return re.sub(UNPRINTABLE, " ", text)

    def refresh(self) -> None:
        """Draw now (rich also redraws four times a second by itself, from its own thread)."""
        if self._bar is not None:
            self._bar[0].refresh()

    def _update(self) -> None:
        if self._bar is not None:
            bar, task = self._bar
            bar.update(task, total=self.total, completed=min(self.done, self.total), detail=self.detail())


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return (
        f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
        if seconds >= 3600
        else (f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s")
    )
