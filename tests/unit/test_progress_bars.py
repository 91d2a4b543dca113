"""compare's and tune's progress bars (issue 41): at a terminal, a bar on stderr says how many versions or
configurations are done, which one is at work and its step, and is erased before the command's table; anywhere
else (a pipe, a file, CI, TERM=dumb) nothing more is printed. Fakes stand in for the grades and the child."""

from __future__ import annotations

import io
import re
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import click
import pytest

from grader.child import worker_tools
from grader.commands import compare, tools
from grader.commands.batch_progress import StepBar
from grader.core.discovery import resolve
from grader.core.job import Job
from grader.core.records import Check, GradeResult
from grader.kinds import kind_named
from grader.run import waiting

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
ERASED = "\x1b[2K"  # rich's transient display erases its line when it stops


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def shown(stream: io.StringIO) -> str:
    return ANSI.sub("", stream.getvalue())


def until_drawn(stream: io.StringIO, text: str, limit_s: float = 10.0) -> None:
    """Wait for rich's refresh thread to draw `text` (it redraws four times a second)."""
    deadline = time.monotonic() + limit_s
    while text not in shown(stream):
        assert time.monotonic() < deadline, f"never drawn: {text!r} in {shown(stream)[-400:]!r}"
        time.sleep(0.02)


@pytest.fixture(autouse=True)
def a_terminal_type(monkeypatch):
    """The same terminal for every test, whatever the machine running them sets."""
    for name in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("COLUMNS", "160")
    yield
    waiting.attach(None)


# --- the bar itself ------------------------------------------------------------------------------------------


def test_the_bar_advances_shows_the_item_and_its_step_and_is_erased_at_the_end():
    terminal = Terminal()
    with StepBar("comparing", 2, stream=terminal) as bar:
        assert bar.drawn and waiting.live_shown()  # the grade's live line: no "still running" lines beside it
        bar.working_on("naive.cu")
        assert "0/2 naive.cu" in shown(terminal)
        assert waiting.report(3.0, 60.0, "checking n=37, trial 2")  # what the judge tells the live line
        bar.refresh()
        assert "0/2 naive.cu · checking n=37, trial 2" in shown(terminal)
        bar.advance()
        bar.working_on("shuffle.cu")
        assert "1/2 shuffle.cu" in shown(terminal)
        bar.advance()
        assert "2/2" in shown(terminal)
    assert not waiting.live_shown()
    assert terminal.getvalue().endswith(ERASED)  # gone before the table prints


def test_the_probe_stops_its_redraws_and_starts_them_again():
    terminal = Terminal()
    with StepBar("comparing", 1, stream=terminal) as bar:
        waiting.hold(True)
        assert not bar._bar[0].live.is_started
        waiting.hold(False)
        assert bar._bar[0].live.is_started


def test_a_name_or_step_cannot_drive_the_terminal_or_inject_markup():
    terminal = Terminal()
    with StepBar("comparing", 1, stream=terminal) as bar:
        bar.working_on("v[bold]2[/bold].cu")
        bar.show(0.0, 0.0, "checking\x1b[2J\x07 n=5")
        bar.refresh()
    assert "v[bold]2[/bold].cu · checking [2J  n=5" in terminal.getvalue()  # the ESC itself is gone
    assert "\x1b[2J" not in terminal.getvalue() and "\x07" not in terminal.getvalue()


@pytest.mark.parametrize(
    "stream, term, enabled",
    [(io.StringIO(), "xterm-256color", True), (Terminal(), "dumb", True), (Terminal(), "xterm-256color", False)],
    ids=["a pipe", "TERM=dumb", "not enabled (--json)"],
)
def test_no_bar_on_a_pipe_at_term_dumb_or_when_not_enabled(monkeypatch, stream, term, enabled):
    monkeypatch.setenv("TERM", term)
    with StepBar("tuning", 3, stream=stream, enabled=enabled) as bar:
        bar.working_on("num_warps=4")
        bar.show(1.0, 60.0, "loading your code")
        bar.advance()
        bar.refresh()
        assert not bar.drawn and not waiting.live_shown()  # the "still running" lines, as before
    assert stream.getvalue() == ""


# --- compare -----------------------------------------------------------------------------------------------


def passed(target) -> GradeResult:
    result = GradeResult(exercise=target.spec.id, lang=target.variant.lang, source="x", seed=1)
    result.add(Check("numerics", "passed", "matched"))
    return result.finish()


@pytest.fixture
def fake_grade(monkeypatch):
    """grade.grade replaced by one that says its step to the live line (as the judge does) and waits for the
    bar to draw it, where one is drawn; it keeps whether a live line was shown."""
    seen = []

    def grade(target, submission=None, **kwargs):
        seen.append(waiting.live_shown())
        if waiting.report(2.0, 60.0, f"checking {submission.name}, trial 1"):  # the bar is on sys.stderr
            until_drawn(sys.stderr, f"{submission.name} · checking {submission.name}, trial 1")
        return passed(target)

    import grader.run.grade

    monkeypatch.setattr(grader.run.grade, "grade", grade)
    return seen


def files(tmp_path, *names):
    for name in names:
        (tmp_path / name).write_text("// a version\n")
    return compare.entries_for_files("reduction", [tmp_path / n for n in names])


def test_compare_at_a_terminal_shows_each_version_and_its_step_then_erases_the_bar(tmp_path, fake_grade, monkeypatch):
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    graded = []
    compare.compare(
        "reduction", files(tmp_path, "naive.cu", "shuffle.cu"), seed=7, on_graded=lambda e, r: graded.append(e)
    )
    text = shown(terminal)
    assert fake_grade == [True, True] and len(graded) == 2
    first, second = text.index("0/2 naive.cu · checking naive.cu"), text.index("1/2 shuffle.cu · checking shuffle.cu")
    assert "comparing" in text and first < second and "2/2" in text[second:]
    assert terminal.getvalue().endswith(ERASED) and not waiting.live_shown()


def test_compare_elsewhere_prints_nothing_more(tmp_path, fake_grade, monkeypatch):
    piped = io.StringIO()
    monkeypatch.setattr("sys.stderr", piped)
    record, _ = compare.compare("reduction", files(tmp_path, "naive.cu", "shuffle.cu"), seed=7)
    assert piped.getvalue() == "" and fake_grade == [False, False]  # no live line: "still running" lines as before
    assert [r["label"] for r in record["rows"]] == ["naive.cu", "shuffle.cu"]
    monkeypatch.setattr("sys.stderr", Terminal())
    compare.compare("reduction", files(tmp_path, "naive.cu"), seed=7, show_progress=False)
    assert fake_grade[-1] is False and sys.stderr.getvalue() == ""


def test_compare_with_json_draws_no_bar_even_at_a_terminal(tmp_path, fake_grade, monkeypatch):
    """`kcourse compare ... --json`: its click parameter as_json, read where the caller does not say."""
    monkeypatch.setattr("sys.stderr", Terminal())
    with click.Context(click.Command("compare"), obj=None) as context:
        context.params["as_json"] = True
        compare.compare("reduction", files(tmp_path, "naive.cu"), seed=7)
    assert fake_grade == [False] and sys.stderr.getvalue() == ""


# --- tune ----------------------------------------------------------------------------------------------------

SOFTMAX_CONFIGS = ["num_warps=2", "num_warps=4", "num_warps=8", "num_warps=16"]  # softmax's [tuning.triton]


def tune_rows(labels):
    rows = [dict(config=c, ms=None, rate=None, roofline_pct=None, correct=True, error="") for c in labels]
    return {"case": "", "unit": "", "rows": rows, "best": None, "speedup": None}


@pytest.fixture
def fake_tune(monkeypatch):
    """tools.grade replaced by one that reports softmax's configurations as the real grade reports its child's steps
    (grade._run_tool, through waiting.report); at a terminal it waits for the bar to draw each one."""
    given = []

    def grade(target, **kwargs):
        given.append(kwargs.get("child"))
        steps = ["loading your code"] + [
            f"tuning configuration {i + 1} of 4: {c}" for i, c in enumerate(SOFTMAX_CONFIGS)
        ]
        drawn = ["0/4 loading your code"] + [f"{i}/4 {label} " for i, label in enumerate(SOFTMAX_CONFIGS)]
        for step, text in zip(steps, drawn):
            if waiting.report(1.0, 60.0, step):  # True where a live line (the bar) is drawn
                until_drawn(sys.stderr, text)
        result = passed(target)
        result.extra["tune"] = tune_rows(SOFTMAX_CONFIGS)
        result.device = {"name": "CPU (Triton interpreter)"}
        return result

    monkeypatch.setattr(tools, "grade", grade)
    return given


def test_tune_at_a_terminal_follows_the_childs_configurations_then_erases_the_bar(fake_tune, monkeypatch):
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    record = tools.run_tune(resolve(("softmax",)), source="solutions")
    text = shown(terminal)
    positions = [text.index(f"{i}/4 {label} ") for i, label in enumerate(SOFTMAX_CONFIGS)]
    assert "tuning" in text and positions == sorted(positions)
    assert terminal.getvalue().endswith(ERASED) and not waiting.live_shown()
    assert fake_tune == [None] and [r["config"] for r in record["rows"]] == SOFTMAX_CONFIGS  # grade starts its child


def test_tune_elsewhere_prints_nothing_more(fake_tune, monkeypatch):
    piped = io.StringIO()
    monkeypatch.setattr("sys.stderr", piped)
    tools.run_tune(resolve(("softmax",)), source="solutions")
    assert piped.getvalue() == "" and fake_tune == [None]


def test_the_bar_names_a_configuration_from_the_parents_own_list_never_from_the_childs_words():
    bar = StepBar("tuning", 4, stream=io.StringIO())
    tools.follow_tuning(bar, "loading your code", SOFTMAX_CONFIGS)
    assert (bar.done, bar.item, bar.step) == (0, "", "loading your code")
    tools.follow_tuning(bar, "tuning configuration 3 of 4: \x1b[2J[red]x", SOFTMAX_CONFIGS)
    assert (bar.done, bar.item, bar.step) == (2, "num_warps=8", "")
    for forged in ("tuning configuration 9 of 4: num_warps=99", "tuning configuration 0 of 4: x"):
        tools.follow_tuning(bar, forged, SOFTMAX_CONFIGS)
        assert (bar.done, bar.item) == (2, "num_warps=8")  # a number out of range moves nothing


def test_the_child_says_each_configuration_it_tries_as_the_parent_reads_it(monkeypatch):
    """worker_tools.tune's STEP events, read back by the parent's follow_tuning: the two sides agree."""
    spec = resolve(("softmax",)).spec
    steps = []
    worker = SimpleNamespace(
        spec=SimpleNamespace(tuning=spec.tuning, performance=SimpleNamespace(cases=[])),
        variant=SimpleNamespace(lang="triton", kind_of=kind_named("triton")),
        job=Job(seed=1),
        device="cpu",
        progress=steps.append,
    )
    monkeypatch.setattr(worker_tools, "last_cpu_case", lambda worker: None)
    monkeypatch.setattr(worker_tools, "_check_config", lambda worker, call, case, seed: "")
    found = worker_tools.tune(worker, learner=lambda tensors, params, **config: None)
    assert [r["config"] for r in found["rows"]] == SOFTMAX_CONFIGS
    assert steps == [f"tuning configuration {i + 1} of 4: {c}" for i, c in enumerate(SOFTMAX_CONFIGS)]
    bar = StepBar("tuning", 4, stream=io.StringIO())
    for i, step in enumerate(steps):
        tools.follow_tuning(bar, step, SOFTMAX_CONFIGS)
        assert (bar.done, bar.item) == (i, SOFTMAX_CONFIGS[i])


def test_a_cuda_files_configurations_are_compiled_under_a_bar_too(monkeypatch):
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    built = []

    def build_variant(path, variant, arch, defines):
        built.append(defines)
        until_drawn(terminal, f"{len(built) - 1}/3 {worker_tools.config_label(defines)}")
        return SimpleNamespace(ok=True, library="lib.so", log="", resources=[])

    monkeypatch.setattr(tools, "build_variant", build_variant)
    monkeypatch.setattr(tools, "cuda_available", lambda: False)
    builds = tools._build_configurations(resolve(("matmul",), lang="cuda"), Path("matmul.cu"))
    assert list(builds) == ["TILE=8", "TILE=16", "TILE=32"] and "compiling" in shown(terminal)
    assert terminal.getvalue().endswith(ERASED)
