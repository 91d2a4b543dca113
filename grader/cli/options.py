"""What several verbs share: the options that name the learner's code (learner_code_options, SOURCES, LANGS),
resolving what was typed, the exit status, the phases of a command, the exports, the box and the tools' errors."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import click

from grader.cli import STARTED
from grader.core.discovery import ResolveError, resolve
from grader.core.spec import SpecError
from grader.core.vocabulary import Event

SOURCES = click.Choice(["learner", "stubs", "solutions"])
LANGS = "cuda|triton|VERSION"  # a version's name; the spec checks it and lists the ones an exercise has
SOURCE_HELP = (
    "learner/stubs: the files in exercises/; solutions: the hidden solutions in the learner's place "
    "(env KCOURSE_SOURCE does the same, for CI systems that set variables)."
)


def _process_age() -> float | None:
    """Seconds since this process started (Linux: /proc), so that a command's total is its whole wall time,
    Python's own start-up included; None where that cannot be read."""
    try:
        start_ticks = float(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        age = uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    since_started = time.monotonic() - STARTED
    return age if since_started <= age < since_started + 60 else None  # a figure that makes no sense is not shown


def _command_phases(result, imports: float) -> float:
    """Put this process's own phases first (python: the interpreter's start-up, before STARTED, which the CLI
    sets first thing; imports: the grader's, the CLI's own included, and resolving the exercise); returns the
    command's wall time so far."""
    now = time.monotonic() - STARTED
    age = _process_age()
    own = {"python": round(age - now, 3)} if age is not None else {}
    result.phases = {**own, "imports": round(imports, 3), **result.phases}  # the child's start-up is `start`
    return age if age is not None else now


def learner_code_options(command):
    """What names the code to run: `week2 reduction` or `reduction`, --lang, --plan, --source, --file."""
    for option in reversed(
        [
            click.argument("words", nargs=-1, required=True),
            click.option(
                "--lang",
                type=str,
                metavar=LANGS,
                help="Pick the version where an exercise has several: its "
                "language, or the name its spec gives it (add2 --lang setup).",
            ),
            click.option("--plan", "plan_id", help="Resolve the week/day in this plan (default: the 11-week plan)."),
            click.option(
                "--source",
                type=SOURCES,
                default="learner",
                show_default=True,
                envvar="KCOURSE_SOURCE",
                help=SOURCE_HELP,
            ),
            click.option(
                "--file",
                "submission",
                type=click.Path(exists=True, dir_okay=False, path_type=Path),
                help="Use this file (a .py, .cu or tagged .ipynb) instead of the one in exercises/.",
            ),
        ]
    ):
        command = option(command)
    return command


def exit_code(statuses: list[str], strict: bool) -> int:
    if any(s in ("failed", "error") for s in statuses):
        return 1
    if strict and any(s == "skipped" for s in statuses):
        return 1
    return 0


def _export(results, junit, gradescope, annotate: bool = True) -> None:
    """Write JUnit / Gradescope files; under GitHub Actions also print annotations (not into --json output)."""
    from grader.reports.exports import write_outputs

    for line in write_outputs(results, junit, gradescope):
        if annotate:
            click.echo(line)


def _resolve(words, lang, plan_id, submission: Path | None = None):
    """What was typed -> a target. Without --lang, a --file's suffix picks the version where the exercise
    has several (`kcourse grade softmax --file mine.cu` is the CUDA one)."""
    guessed = {".cu": "cuda", ".py": "triton"}.get(submission.suffix) if submission and not lang else None
    try:
        if guessed:
            try:
                target = resolve(tuple(words), lang=guessed, plan_id=plan_id)
                if len(target.spec.variants) > 1:
                    target.lang_choice = f"picked by the file's {submission.suffix} suffix"
                return target
            except (ResolveError, SpecError):
                pass  # no such version: resolved as typed, and the load check says what the file should be
        return resolve(tuple(words), lang=lang, plan_id=plan_id)
    except (ResolveError, SpecError) as exc:
        raise click.UsageError(str(exc)) from None


def _allow_unisolated_option(command):
    return click.option(
        "--allow-unisolated",
        is_flag=True,
        help="Run learner code even where this machine cannot box it (no Landlock): only for code "
        "you trust, such as your own solutions and stubs.",
    )(command)


def _require_box(allowed: bool) -> None:
    """Many learners' code, or the kit's own validation, runs boxed or not at all unless the caller says so."""
    from grader.child import box

    boxed, why = box.available()
    if not boxed and not allowed:
        raise click.UsageError(
            f"learner code cannot be boxed here: {why}. Grade on Linux 5.13 or later with "
            "Landlock enabled, or pass --allow-unisolated to run it with your user's rights"
        )
    if not boxed:
        click.echo(f"isolation: none ({why}); --allow-unisolated was given", err=True)


def _tool_record(verb: str, run):
    """run()'s record; a ToolError (the learner's code could not be run for the tool) printed as `could not <verb>`
    and exit status 1, or 2 for a CaseError (--case names no case the tool can run)."""
    from grader.commands import tools

    try:
        return run()
    except tools.ToolError as exc:
        click.echo(f"could not {verb}: {exc}")
        sys.exit(2 if isinstance(exc, tools.CaseError) else 1)


def _capstone_options(command):
    """What both `kcourse capstone` and `kcourse block` take."""
    for option in reversed(
        [
            click.option(
                "--source",
                type=SOURCES,
                default="learner",
                show_default=True,
                envvar="KCOURSE_SOURCE",
                help="learner/stubs: your files in exercises/ whose latest grade passed numerics; solutions: the "
                "kit's own kernels in every slot they fit.",
            ),
            click.option(
                "--use",
                multiple=True,
                metavar="EXERCISE[:VERSION]=FILE",
                help="Plug this file in for that exercise, graded or not (repeatable), e.g. --use activations=try.py.",
            ),
            click.option("--tiny", is_flag=True, help="The small CPU configuration (automatic without a GPU)."),
            click.option(
                "--seed", type=int, help="Seed of the weights, the batches and the inputs (printed for reuse)."
            ),
            click.option(
                "--timeout",
                type=float,
                help="Seconds the child process may run (default: 1200 on a GPU, 300 on the CPU).",
            ),
            click.option("--json", "as_json", is_flag=True, help="Print the record as one JSON document."),
        ]
    ):
        command = option(command)
    return command


def _progress_line(event: dict) -> None:
    if event.get("event") == Event.PROGRESS:
        rate = event.get("tokens_per_s")
        click.echo(
            f"  {event['run']:>8}  step {event['step']:>4}/{event['steps']}  loss {event['loss']:.4f}"
            + (f"  {rate:,.0f} tokens/s" if rate else ""),
            err=True,
        )
    elif event.get("event") == Event.STEP:
        click.echo(f"  {event.get('text', '')}", err=True)
