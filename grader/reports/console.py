"""Renderings of results for the terminal (the CLI prints these; it computes nothing): plain text for a pipe,
a file, CI and the tests; at a terminal the same words through rich, in colour, with a live status line while a
grade runs. rich is imported only at a terminal (`kcourse --help`, a pipe and --json never load it)."""

from __future__ import annotations

import itertools
import os
import re
import sys
import textwrap
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import click

from grader.core.records import GradeResult

MARKS = {"passed": "PASS", "failed": "FAIL", "error": "ERROR", "skipped": "SKIP"}


def format_grade(result: GradeResult) -> str:
    """The verdict as plain text: what a pipe, a file, CI and the tests get (a terminal gets render_grade)."""
    lines = header_lines(result)
    lines.extend(format_check(check) for check in result.checks)
    for t in result.timings:
        lines.append("  " + format_timing(t))
    lines.extend(output_lines(result))
    lines.extend(closing_lines(result))
    return "\n".join(lines)


def header_lines(result: GradeResult) -> list[str]:
    """What was graded, where and how: the exercise, the source and seed, the device, the box, the kit."""
    where = f"{result.unit} " if result.unit else ""
    if result.unit and result.plan and result.plan != _default_plan_id():  # `grade day12 softmax` found its plan
        where = f"{result.unit} ({result.plan}) "
    picked = f"; {result.lang_choice}" if getattr(result, "lang_choice", "") else ""  # why this version, without --lang
    lines = [f"{where}{result.exercise} ({result.lang}{picked}) — source: {result.source}, seed {result.seed}"]
    if result.device.get("name"):
        lines.append(f"device: {result.device['name']}")
    if result.emulation:
        lines.append(f"CUDA without a GPU: {result.emulation}")
    if result.isolation.startswith("none"):
        lines.append(f"isolation: {result.isolation}")
    if result.kit_changes:
        shown = ", ".join(result.kit_changes[:3]) + (", ..." if len(result.kit_changes) > 3 else "")
        lines.append(
            f"kit: {len(result.kit_changes)} file(s) differ from git ({shown}): this grade judged with them; "
            "`git diff` shows them, `git checkout -- FILE` restores one"
        )
    return lines


def output_lines(result: GradeResult) -> list[str]:
    """The end of the learner's own output, under a grade that did not pass (none under one that did)."""
    if not result.output.strip() or result.status == "passed":
        return []
    return ["  your program's output:", *(f"    | {line}" for line in result.output.strip().splitlines()[-30:])]


def closing_lines(result: GradeResult) -> list[str]:
    """The verdict line, and after a numerics failure the command that reproduces it."""
    lines = [verdict_line(result)]
    if result.status == "failed" and any(c.name == "numerics" for c in result.checks):
        lines.append(f"   reproduce with: {reproduce_command(result)}")
    return lines


def verdict_line(result: GradeResult) -> str:
    return f"=> {result.status.upper()}: {result.verdict}"


def _default_plan_id() -> str | None:
    from grader.core.plans import default_plan, load_plans

    plans = load_plans()
    return default_plan(plans).id if plans else None


def format_check(check) -> str:
    first, *rest = check.message.splitlines() or [""]
    lines = [f"  [{MARKS.get(check.status, check.status)}] {check.name}: {first}"]
    lines.extend(f"         {line}" for line in rest)
    lines.extend(f"         {line}" for line in failure_map(check))
    hint = failure_hint(check)
    if hint:
        first_hint, *more = hint.splitlines()
        lines.append(f"         hint: {first_hint}")
        lines.extend(f"               {line}" for line in more)
    return "\n".join(lines)


def failure_map(check) -> list[str]:
    """The picture of where a failing check's output went wrong (output_map.py); none under another check."""
    return list(check.details.get("map") or []) if check.status in ("failed", "error") else []


def failure_hint(check) -> str:
    """What to try next, under a failing check only ("" where there is none)."""
    hint = check.details.get("hint") if check.status in ("failed", "error") else None
    return str(hint) if hint else ""


def format_timing(t) -> str:
    def rate(value):
        return f" ({value:.4g} {t.unit})" if value else ""

    if t.learner_ms is None:  # a size run for the memory check alone (judge.memory_only)
        return ", ".join([f"{t.case} (memory only, not timed: `--full` times it)", *_memory_parts(t)])
    parts = [f"timed {t.case}: you {t.learner_ms:.4g} ms{rate(t.learner_rate)}"]
    if t.roofline_pct:
        parts.append(f"{t.roofline_pct:.0f}% of roofline")
    if t.solution_ms:
        parts.append(f"solution {t.solution_ms:.4g} ms{rate(t.solution_rate)}")
    if t.torch_ms:
        parts.append(f"torch {t.torch_ms:.4g} ms{rate(t.torch_rate)}")
    parts.append(f"{t.runs} runs, spread {100 * (t.learner_spread or 0):.1f}%")
    return ", ".join(parts + _memory_parts(t))


def _memory_parts(t) -> list[str]:
    """Peak GPU memory beyond inputs and outputs, where it was measured."""
    if getattr(t, "learner_extra_bytes", None) is None:
        return []
    from grader.checks.memory import size_text

    limit = f" (limit {size_text(t.extra_bytes_limit)})" if t.extra_bytes_limit is not None else ""
    torch_extra = f", torch {size_text(t.torch_extra_bytes)}" if t.torch_extra_bytes is not None else ""
    return [f"extra memory: you {size_text(t.learner_extra_bytes)}{limit}{torch_extra}"]


def num(value, fmt: str = "{:.4g}") -> str:
    return "—" if value is None else fmt.format(value)


def table(rows: list[list[str]], header: list[str], width: int | None = None, wrap: tuple[int, ...] = ()) -> str:
    """Columns padded to their longest cell. `width`: the columns numbered in `wrap` are wrapped onto more lines
    so that a row fits in that many characters (a terminal's), where the table would be wider."""
    cells = [[str(c) for c in r] for r in rows]
    widths = _fit([max(len(r[i]) for r in cells + [header]) for i in range(len(header))], width, wrap)
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*header).rstrip(), fmt.format(*("-" * w for w in widths))]
    for row in cells:
        parts = [
            textwrap.wrap(c, w, break_long_words=False, break_on_hyphens=False) or [""] if i in wrap else [c]
            for i, (c, w) in enumerate(zip(row, widths))
        ]
        lines += [fmt.format(*line).rstrip() for line in itertools.zip_longest(*parts, fillvalue="")]
    return "\n".join(lines)


def _fit(widths: list[int], width: int | None, wrap: tuple[int, ...]) -> list[int]:
    """Column widths that fit `width`: the wrapped columns share what the others leave, in proportion to their
    natural widths, never narrower than MIN_WRAPPED (a narrow terminal gets a wider table, not one word a line)."""
    gaps = 2 * (len(widths) - 1)
    if width is None or not wrap or sum(widths) + gaps <= width:
        return widths
    left = width - gaps - sum(w for i, w in enumerate(widths) if i not in wrap)
    natural = sum(widths[i] for i in wrap)
    return [max(MIN_WRAPPED, min(w, left * w // natural)) if i in wrap else w for i, w in enumerate(widths)]


MIN_WRAPPED = 24


# Phases that run beside the others, not after them, and what each is: `start` overlaps the grader's own imports and
# build; the GPU process's (run/heavy.py) work overlaps the numerics, and what of it was left is timed_inputs.
ALONGSIDE = {
    "start": "the grading child's start-up, from its launch until the grade used it",
    "gpu_inputs": "the GPU process drawing inputs",
    "gpu_references": "the GPU process computing float64 references",
    "input_files": "writing the GPU process's inputs for the child",
    "compiling": "your code's and the solution's Triton compiles and autotuning, as the child's steps showed them",
    "compiling_alone": "of those, with the GPU held alone for timing (the kit's parallel tests)",
}
OTHER_MIN_S = 0.005


def format_phases(result: GradeResult, total_s: float | None = None, warm: bool = False) -> str:
    """Seconds per phase of a grade, so that they add up: the phases that ran one after another, then "other"
    (the time between them: waiting for the child, the kit's checks, hints), sum to the total, the wall time
    of the command (`total_s`; the grade's own wall time, result.duration_s, where not given). The phases
    that ran beside them (ALONGSIDE) are shown apart, as overlapping. `warm`: the child was started before
    this grade (kcourse watch starts the next one while the learner edits), so its start-up is not this grade's."""
    total = result.duration_s if total_s is None else total_s
    serial = {name: seconds for name, seconds in result.phases.items() if name not in ALONGSIDE}
    parts = [f"{name} {seconds:.2f} s" for name, seconds in serial.items()]
    other = total - sum(serial.values())
    if other >= OTHER_MIN_S:
        parts.append(f"other {other:.2f} s (between phases)")
    line = f"phases: {' + '.join(parts) or 'none recorded'} = total {total:.2f} s"
    line += " (this grade's wall time)" if total_s is None else " (the command's wall time)"
    if other <= -OTHER_MIN_S:  # a phase measured on another clock, or that overlaps another: said, not hidden
        line += f"; the phases overlap by {-other:.2f} s"
    if warm and "start" in result.phases:
        line += (
            f"; start: the grading child was launched {result.phases['start']:.2f} s before this grade used it "
            "(watch starts it ahead, while you edit): not part of the total, where any wait for it is in other"
        )
    beside = [
        f"{name} {result.phases[name]:.2f} s ({what})"
        for name, what in ALONGSIDE.items()
        if name in result.phases and not (warm and name == "start")
    ]
    if beside:
        line += f"; alongside them: {', '.join(beside)} (overlapping the phases above, not added to the total)"
    return line


def reproduce_command(result: GradeResult) -> str:
    """The exact command that grades the same file on the same inputs (the one seed a failure names)."""
    from grader.core.discovery import discover_exercises

    words = ["kcourse", "grade", result.exercise]
    spec = discover_exercises().get(result.exercise)
    if spec is None or len(spec.variants) > 1:  # an id in both languages needs --lang
        words += ["--lang", result.lang]
    if result.source not in ("learner", "stubs", "solutions"):
        words += ["--file", result.source]
    elif result.source == "solutions":
        words += ["--source", "solutions"]
    return " ".join(words + ["--seed", str(result.seed)])


# --- at a terminal: the same words through rich -------------------------------------------------------------

STATUS_STYLES = {"passed": "green", "failed": "red", "error": "red", "skipped": "yellow"}
GLYPH_STYLES = {"█": "red", "░": "yellow", "N": "magenta", "·": "dim"}  # output_map.GLYPHS, tastefully
# patterns as strings, compiled (and cached by re) at a terminal only: compiling them costs every import
LEGEND_GLYPH = r"[█░N·](?= (?:wrong|never|NaN|right))"  # a glyph the legend explains, not the N of NaN
CONTROL = r"[\x00-\x08\x0b-\x1a\x1c-\x1f\x7f]"  # C0 controls but tab, newline and ESC (from_ansi reads it)


def at_terminal(stream) -> bool:
    """Whether `stream` is a terminal that takes rich's output: a TTY, and not TERM=dumb (rich's own test). NO_COLOR
    keeps the layout and drops the colour (rich reads it)."""
    tty = getattr(stream, "isatty", lambda: False)()
    return bool(tty) and os.environ.get("TERM", "") not in ("dumb", "unknown")


def terminal(stream=None):
    """A rich Console on `stream` (default stdout) where it is a terminal; None elsewhere (plain text goes there)."""
    stream = stream or sys.stdout
    if not at_terminal(stream):
        return None
    from rich.console import Console

    return Console(file=stream, highlight=False, markup=False, emoji=False)


def print_grade(result: GradeResult, stream=None) -> None:
    """A grade's verdict: render_grade at a terminal, format_grade's text elsewhere (byte for byte)."""
    _print(stream, lambda: format_grade(result), lambda: render_grade(result))


def print_check(check, stream=None) -> None:
    """One check (kcourse watch's late sanitizer verdict): render_check at a terminal, format_check's text elsewhere."""
    _print(stream, lambda: format_check(check), lambda: render_check(check))


def print_verdict(result: GradeResult, stream=None) -> None:
    """The verdict line alone, coloured by status at a terminal."""
    _print(stream, lambda: verdict_line(result), lambda: render_verdict(result))


def _print(stream, plain: Callable[[], str], rich: Callable[[], Any]) -> None:
    out = terminal(stream)
    if out is None:
        click.echo(plain(), file=stream)
    else:
        out.print(rich(), crop=False)  # a line longer than the terminal (a command to copy) is wrapped by it, not cut


def render_grade(result: GradeResult):
    """A grade for a terminal: format_grade's words, the checks in a table, each failing check's output map and
    hint under it, the verdict in its status's colour."""
    from rich.console import Group
    from rich.text import Text

    head, *rest = header_lines(result)
    parts = [Text(head, style="bold"), *(Text(line) for line in rest), checks_table(result.checks)]
    parts += [part for check in result.checks for part in failure_details(check)]
    parts += [Text("  " + format_timing(t)) for t in result.timings]
    if output_lines(result):  # their lines as they wrote them: the terminal wraps a long one, as it does theirs
        parts.append(learner_text("\n".join(output_lines(result)), style="dim", no_wrap=True, overflow="ignore"))
    parts.append(render_verdict(result))
    parts += [
        Text(line, style="dim", no_wrap=True, overflow="ignore")  # a command to copy: one line, unbroken
        for line in closing_lines(result)[1:]
    ]
    return Group(*parts)


def render_check(check):
    """One check for a terminal: its table row, then its output map and hint."""
    from rich.console import Group

    return Group(checks_table([check]), *failure_details(check))


def checks_table(checks):
    """The checks as a table: status (PASS green, FAIL/ERROR red, SKIP yellow), name, message."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    table = Table(
        "status", "check", "message", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold"
    )
    for check in checks:
        mark = Text(MARKS.get(check.status, check.status), style=f"bold {STATUS_STYLES.get(check.status, '')}")
        table.add_row(mark, Text(check.name), message_text(check.message))
    return table


SOURCE_LINE = r"^(?P<head>\s*(?P<file>[\w.-]+\.(?P<suffix>py|cu|cuh|ipynb)):\d+(?: in \w+)?: )(?P<code>.+)$"
LEXERS = {"py": "python", "ipynb": "python", "cu": "cuda", "cuh": "cuda"}


def message_text(message: str):
    """A check's message for a terminal: the learner's words as learner_text has them, and each line that quotes
    their source (`softmax.py:13 in softmax_kernel: numerator = tl.expp(...)`) with the code syntax-highlighted."""
    from rich.syntax import Syntax
    from rich.text import Text

    lines = []
    for line in message.split("\n"):
        quoted = re.match(SOURCE_LINE, line)
        if quoted is None:
            lines.append(learner_text(line))
            continue
        clean = re.sub(r"[\x00-\x08\x0b-\x1f\x7f]", "", quoted["code"])  # a source line: no escape is replayed
        code = Syntax(clean, LEXERS[quoted["suffix"]], theme="ansi_dark", background_color="default").highlight(clean)
        code.rstrip()
        lines.append(Text.assemble(learner_text(quoted["head"]), code))
    return Text("\n").join(lines)


def failure_details(check) -> list:
    """Under the table, for a failing check with them: its output map and its hint (a highlighted panel), indented."""
    from rich.padding import Padding
    from rich.panel import Panel
    from rich.text import Text

    picture, hint = failure_map(check), failure_hint(check)
    if not picture and not hint:
        return []
    parts: list = [Text(f"{check.name}:", style=f"bold {STATUS_STYLES.get(check.status, '')}")]
    if picture:
        parts += render_map(picture)
    if hint:
        parts.append(Panel(learner_text(hint), title="hint", title_align="left", border_style="cyan", expand=False))
    return [Padding(part, (0, 0, 0, 2), expand=False) for part in parts]


def render_map(lines: list[str]) -> list:
    """The output map as output_map.py drew it: its legend (wrapped like prose), then the rows of cells, one line
    each, never wrapped (a picture, monospaced as the terminal is), each glyph in its colour."""
    from rich.text import Text

    legend, *rows = lines
    title = Text(legend)
    for found in re.finditer(LEGEND_GLYPH, legend):
        title.stylize(GLYPH_STYLES[found.group()], found.start(), found.end())
    picture = Text(no_wrap=True, overflow="ignore")
    for row in rows:
        for glyph, run in itertools.groupby(row):
            picture.append("".join(run), GLYPH_STYLES.get(glyph))
        picture.append("\n")
    picture.rstrip()
    return [title, picture]


def render_verdict(result: GradeResult):
    """`=> FAILED: ...`, the status in its colour."""
    line = learner_text(verdict_line(result))
    line.stylize(f"bold {STATUS_STYLES.get(result.status, '')}", 0, len(f"=> {result.status.upper()}:"))
    return line


def learner_text(text: str, style: str = "", **options):
    """Text that may hold the learner's words (their output, their exception's message): rich's markup is not read
    in it, and of terminal escapes only colours are kept (cursor moves, clearing, titles are dropped). `options`:
    rich Text's (no_wrap, overflow)."""
    from rich.text import Text

    return Text.from_ansi(re.sub(CONTROL, "", text), style=style, **options)


# --- at a terminal: the live status line while a grade runs -----------------------------------------------------


class GradingStatus:
    """What the live line says: the step the grade is at and the seconds it has run, of its limit once the judge
    reports them (waiting.report); until then the step the grading child last announced (`child.last_step`) and the
    seconds since the command started. A waiting.LiveLine."""

    def __init__(self, child=None, clock: Callable[[], float] = time.monotonic):
        self.child, self.clock = child, clock
        self.started = clock()
        self.reported: tuple[float, float, float, str] | None = None  # (when, elapsed_s, limit_s, step)

    def show(self, elapsed_s: float, limit_s: float, step: str) -> None:
        self.reported = (self.clock(), elapsed_s, limit_s, step)

    def hold(self, on: bool) -> None:
        """No redraws while on (the probe's bursts are timed by this process's clock): the line's Live stops."""
        live = getattr(self, "live", None)
        if live is not None:
            live.stop() if on else live.start()

    def text(self) -> str:
        """`checking M=33 N=600, trial 2 · 12 s (stopped at 120 s)`."""
        now = self.clock()
        if self.reported is None:
            return f"{getattr(self.child, 'last_step', '') or 'grading'} · {now - self.started:.0f} s"
        when, elapsed_s, limit_s, step = self.reported
        limit = f" (stopped at {limit_s:.0f} s)" if limit_s > 0 else ""  # a build has no limit of the learner's
        return f"{step or 'grading'} · {elapsed_s + now - when:.0f} s{limit}"


@contextmanager
def grading_status(child=None, enabled: bool = True) -> Iterator[GradingStatus | None]:
    """A live status line on stderr while the block runs (a grade), where stderr is a terminal and this is the main
    thread; it stands in for the "still running" lines and is gone when the block ends (transient). Elsewhere, or
    not `enabled` (--json), nothing: the grade prints what it printed before. `child`: the grading child, whose
    announced step the line shows until the judge reports its own."""
    if not enabled or not at_terminal(sys.stderr) or threading.current_thread() is not threading.main_thread():
        yield None
        return
    from rich.console import Console
    from rich.live import Live
    from rich.spinner import Spinner

    from grader.run import waiting

    status, spinner = GradingStatus(child), Spinner("dots", style="cyan")

    def current():  # called by rich at every refresh, from its own thread
        spinner.update(text=learner_text(status.text()))  # the step is the child's words
        return spinner

    # Prints during the block go above the line; stdout's only where it is this terminal too (not a pipe). Four
    # refreshes a second (rich's default): each render holds the GIL, in the process whose clock the probe reads.
    with Live(
        console=Console(stderr=True, highlight=False),
        get_renderable=current,
        transient=True,
        refresh_per_second=4,
        redirect_stdout=at_terminal(sys.stdout),
    ) as live:
        status.live = live
        waiting.attach(status)
        try:
            yield status
        finally:
            waiting.attach(None)
