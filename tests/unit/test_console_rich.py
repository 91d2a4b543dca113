"""The terminal through rich (issue 41): at a terminal a grade's verdict is a coloured table with the output map and
the hint under it, a live line says the step while the grade runs, a batch has a progress bar; anywhere else (a pipe,
CI, the tests, TERM=dumb) the output is the plain text, byte for byte."""

from __future__ import annotations

import io
import re

import click
import pytest
import torch
from rich.console import Console

from grader.checks import output_map
from grader.commands.batch_progress import Progress
from grader.core.records import ERROR, FAILED, PASSED, SKIPPED, Check, GradeResult
from grader.reports import console
from grader.run import waiting

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def a_wide_colour_terminal(monkeypatch):
    """The same terminal for every test, whatever the machine running them sets."""
    for name in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("COLUMNS", "120")
    yield
    waiting.attach(None)


def tail_never_written() -> list[str]:
    """output_map's picture of a 40×100 output whose last 4 columns were never written and one row went NaN."""
    kind = torch.zeros(40, 100, dtype=torch.uint8)
    kind[:, 96:] = output_map.UNWRITTEN
    kind[7, :10] = output_map.NON_FINITE
    return output_map.draw("y", (40, 100), kind.flatten())


def failed_grade() -> GradeResult:
    result = GradeResult(exercise="softmax", lang="triton", source="learner", seed=5)
    result.add(Check("load", PASSED, "softmax.py: `softmax` loaded"))
    result.add(
        Check(
            "numerics",
            FAILED,
            "M=40 N=100, trial 1: 160 of 4000 elements of y never written",
            {"map": tail_never_written(), "hint": "does your last block handle the tail?\nmask loads and stores"},
        )
    )
    result.add(Check("speed", SKIPPED, "no GPU found: timing skipped"))
    result.output = "debug: [bold]block 3[/bold]\n\x1b[2J\x1b[31mred\x1b[0m"  # markup and escapes of the learner's
    return result.finish()


def passed_grade() -> GradeResult:
    result = GradeResult(exercise="vector_add", lang="triton", source="solutions", seed=7)
    result.add(Check("numerics", PASSED, "3 case(s), 6 trials matched the float64 reference"))
    result.add(Check("sanitizer", SKIPPED, "no GPU found: compute-sanitizer needs one"))
    return result.finish()


def at_terminal(renderable, width: int = 120) -> str:
    buffer = io.StringIO()
    Console(file=buffer, force_terminal=True, width=width, color_system="standard").print(renderable)
    return buffer.getvalue()


def test_a_failing_grade_at_a_terminal_shows_the_checks_table_the_map_and_the_hint():
    shown = at_terminal(console.render_grade(failed_grade()))
    text = ANSI.sub("", shown)
    assert re.search(r"^status +check +message", text, re.M), text
    assert re.search(r"^PASS +load +softmax\.py: `softmax` loaded", text, re.M)
    assert re.search(r"^FAIL +numerics +M=40 N=100, trial 1: 160 of 4000 elements of y never written", text, re.M)
    assert re.search(r"^SKIP +speed +no GPU found: timing skipped", text, re.M)
    rows = [line.strip() for line in tail_never_written()[1:]]
    assert all(row in text for row in rows) and "NNNN" in rows[1]  # the picture, row for row, unwrapped
    assert "hint" in text and "does your last block handle the tail?" in text and "mask loads and stores" in text
    assert "=> FAILED: M=40 N=100, trial 1" in text and "reproduce with: kcourse grade softmax" in text
    assert "\x1b[1;31mFAIL" in shown and "\x1b[1;32mPASS" in shown and "\x1b[1;33mSKIP" in shown  # red, green, yellow
    assert "\x1b[1;31m=> FAILED:" in shown and "\x1b[33m░░" in shown  # never-written cells in yellow


def test_a_passing_grade_is_green_and_shows_no_map_or_hint():
    shown = at_terminal(console.render_grade(passed_grade()))
    assert "\x1b[1;32m=> PASSED:" in shown
    assert "hint" not in shown and "where" not in shown


def test_the_learners_markup_and_escapes_are_shown_as_text_never_replayed():
    shown = at_terminal(console.render_grade(failed_grade()))
    assert "debug: [bold]block 3[/bold]" in ANSI.sub("", shown)  # rich's markup is not read in learner text
    assert "\x1b[2J" not in shown and "red" in ANSI.sub("", shown)  # a screen clear is dropped, the word stays


def echoed(text: str) -> str:
    """What the CLI printed before rich: click.echo of the plain text (which drops escapes where no terminal is)."""
    buffer = io.StringIO()
    click.echo(text, file=buffer)
    return buffer.getvalue()


def test_without_a_terminal_the_output_is_the_plain_text_byte_for_byte():
    for result in (failed_grade(), passed_grade()):
        piped = io.StringIO()
        console.print_grade(result, piped)
        assert piped.getvalue() == echoed(console.format_grade(result))
    assert echoed(console.format_grade(passed_grade())) == console.format_grade(passed_grade()) + "\n"
    piped = io.StringIO()
    console.print_check(failed_grade().checks[1], piped)
    console.print_verdict(failed_grade(), piped)
    assert piped.getvalue() == (
        console.format_check(failed_grade().checks[1])
        + "\n"
        + "=> FAILED: M=40 N=100, trial 1: 160 of 4000 elements of y never written\n"
    )


def test_the_plain_text_keeps_its_words_and_layout():
    plain = console.format_grade(failed_grade())
    assert "  [FAIL] numerics: M=40 N=100, trial 1: 160 of 4000 elements of y never written" in plain
    assert "         hint: does your last block handle the tail?\n               mask loads and stores" in plain
    assert "\n  your program's output:\n    | debug: [bold]block 3[/bold]\n" in plain


def test_a_terminal_gets_rich_and_term_dumb_gets_the_plain_text(monkeypatch):
    terminal = Terminal()
    console.print_grade(passed_grade(), terminal)
    assert "\x1b[" in terminal.getvalue() and "status" in terminal.getvalue()
    monkeypatch.setenv("TERM", "dumb")
    dumb = Terminal()
    console.print_grade(passed_grade(), dumb)
    assert dumb.getvalue() == echoed(console.format_grade(passed_grade()))


def test_no_color_keeps_the_table_and_drops_the_colours(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    terminal = Terminal()
    console.print_grade(failed_grade(), terminal)
    shown = terminal.getvalue()
    assert re.search(r"^FAIL +numerics", ANSI.sub("", shown), re.M)
    assert not re.search(r"\x1b\[[0-9;]*3[0-7]m", shown), "a colour code under NO_COLOR"


def test_an_error_check_is_red_with_its_hint_and_no_map():
    result = GradeResult(exercise="reduction", lang="cuda", source="learner", seed=3)
    result.add(Check("build", ERROR, "reduction.cu did not compile", {"hint": "declare it before use"}))
    shown = at_terminal(console.render_grade(result.finish()))
    assert "\x1b[1;31mERROR" in shown and "declare it before use" in shown and "where" not in shown


class FakeChild:
    last_step = "checking M=33 N=600, trial 2"


def test_the_live_line_says_the_childs_step_then_the_judges_with_its_limit():
    now = [100.0]
    status = console.GradingStatus(FakeChild(), clock=lambda: now[0])
    now[0] = 112.4
    assert status.text() == "checking M=33 N=600, trial 2 · 12 s"
    status.show(5.0, 120.0, "timing M=4096 N=4096")
    now[0] = 114.4
    assert status.text() == "timing M=4096 N=4096 · 7 s (stopped at 120 s)"
    assert console.GradingStatus(None, clock=lambda: 0.0).text() == "grading · 0 s"


def test_a_live_line_stands_in_for_the_still_running_lines():
    status = console.GradingStatus(FakeChild())
    assert waiting.waiting_lines_wanted(Terminal()) and not waiting.report(1.0, 60.0, "loading your code")
    waiting.attach(status)
    assert not waiting.waiting_lines_wanted(Terminal()) and waiting.live_shown()
    assert waiting.report(1.0, 60.0, "loading your code") and status.reported[1:] == (1.0, 60.0, "loading your code")
    waiting.attach(None)
    assert waiting.waiting_lines_wanted(Terminal()) and not waiting.live_shown()


def test_the_live_line_is_drawn_on_a_terminal_and_gone_after_the_grade(monkeypatch):
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    with console.grading_status(FakeChild()) as status:
        assert status is not None and waiting.live_shown()
    assert not waiting.live_shown()
    assert "checking M=33 N=600, trial 2 · 0 s" in terminal.getvalue()
    assert terminal.getvalue().endswith("\x1b[2K")  # transient: the line is erased before the verdict prints


def test_no_live_line_where_stderr_is_not_a_terminal_or_for_json(monkeypatch):
    piped = io.StringIO()
    monkeypatch.setattr("sys.stderr", piped)
    with console.grading_status(FakeChild()) as status:
        assert status is None and not waiting.live_shown()
    monkeypatch.setattr("sys.stderr", Terminal())
    with console.grading_status(FakeChild(), enabled=False) as status:
        assert status is None and not waiting.live_shown()
    assert piped.getvalue() == ""


def test_a_batch_at_a_terminal_gets_a_progress_bar_with_the_failures_so_far():
    now = [0.0]
    terminal = Terminal()
    progress = Progress(stream=terminal, interval_s=0, clock=lambda: now[0])
    progress.begin(4, already=0)
    progress.started("ada reduction:cuda")
    now[0] = 30.0
    progress.finished("ada reduction:cuda", {"status": "failed"})
    progress.close()
    shown = ANSI.sub("", terminal.getvalue())
    assert "━" in shown and "1/4" in shown  # the bar, done/total
    assert "(1 failed), 0 running, 3 waiting; 2.0/min, about 1m30s left" in shown
    assert progress.line() == "graded 1/4 (1 failed), 0 running, 3 waiting; 2.0/min, about 1m30s left"


def test_a_batch_logged_to_a_file_keeps_its_plain_lines():
    log = io.StringIO()
    progress = Progress(stream=log, interval_s=0, clock=lambda: 0.0)
    progress.begin(2, already=0)
    progress.started("ada reduction:cuda")
    progress.close()
    assert log.getvalue() == "graded 0/2 (0 failed), 1 running, 1 waiting; 0.0/min\n"


class _Line:
    """A waiting.LiveLine that keeps what it was told."""

    def __init__(self):
        self.shown, self.held = [], []

    def show(self, elapsed_s, limit_s, step):
        self.shown.append(step)

    def hold(self, on):
        self.held.append(on)


def test_the_judge_reports_the_childs_step_to_the_live_line(toy, toy_child):
    from .fake_child import grade

    line = _Line()
    waiting.attach(line)
    try:
        grade(toy, toy_child())
        assert "checking n=5, trial 1" in line.shown and "checking n=37, trial 2" in line.shown
        assert line.held == []  # no timing here: no probe
    finally:
        waiting.attach(None)


def test_a_build_shows_no_limit_on_the_live_line():
    status = console.GradingStatus(clock=lambda: 5.0)
    status.show(0.0, 0.0, "building")
    assert status.text() == "building · 0 s"


def test_a_quoted_source_line_is_highlighted_and_keeps_its_text_and_caret():
    message = (
        "n=1, trial 1: your code raised AttributeError\n"
        "    typo.py:13 in kernel: y = tl.expp(x - tl.max(x, axis=0))\n"
        "                          ^^^^^^^\n"
        "    add.cu:7: out[i] = a[i] + b[i];\x1b[2J"
    )
    buffer = io.StringIO()
    Console(file=buffer, force_terminal=True, width=200, color_system="truecolor").print(console.message_text(message))
    shown = buffer.getvalue()
    assert re.sub(r"\x1b\[[0-9;]*m", "", shown) == message.replace("\x1b[2J", "[2J") + "\n"  # the words, unchanged
    assert "\x1b[2J" not in shown  # the learner's escape is not replayed (the screen is not cleared)
    code_line = shown.splitlines()[1]
    assert code_line.count("\x1b[") > 2  # highlighted
