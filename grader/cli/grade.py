"""`kcourse grade`: grade one exercise (its record, console output, exports and phases)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click

from grader.cli import _FAST_EXIT, STARTED
from grader.cli.options import _command_phases, _export, _resolve, exit_code, learner_code_options
from grader.reports import console


@click.command()
@learner_code_options
@click.option("--seed", type=int, help="Seed for the random inputs (a failure prints the one to reuse).")
@click.option("--timeout", type=float, help="Seconds the learner's code may run (default: the exercise's).")
@click.option("--json", "as_json", is_flag=True, help="Print the full result as one JSON document.")
@click.option("--strict", is_flag=True, help="Count skipped checks as failures.")
@click.option("--junit", type=click.Path(dir_okay=False, path_type=Path), help="Also write JUnit XML here.")
@click.option(
    "--gradescope", type=click.Path(dir_okay=False, path_type=Path), help="Also write Gradescope results.json here."
)
@click.option(
    "--quick", is_flag=True, help="Numerics and integrity only: no timing (for when speed is not the question)."
)
@click.option("--verbose", "-v", is_flag=True, help="Also print the seconds spent in each phase.")
@click.option(
    "--no-sanitize", is_flag=True, help="Skip compute-sanitizer's race and memory checks (cached per file anyway)."
)
@click.option(
    "--full",
    is_flag=True,
    help="Time every size of the exercise (the curve in your report), not only the size the speed verdict is taken at.",
)
def grade(
    words,
    lang,
    plan_id,
    source,
    submission,
    seed,
    timeout,
    as_json,
    strict,
    junit,
    gradescope,
    quick,
    verbose,
    no_sanitize,
    full,
) -> None:
    """Grade one exercise: `kcourse grade week2 reduction` or `kcourse grade reduction`."""
    from grader.run import early

    target = _resolve(words, lang, plan_id, submission)
    child = early.start(target, source, submission)  # before the import below: their start-ups overlap it

    with console.grading_status(child, enabled=not as_json):  # a live line at a terminal, until the verdict
        from grader.run.grade import grade as run_grade

        imports = time.monotonic() - STARTED
        result = run_grade(
            target,
            source=source,
            submission=submission,
            seed=seed,
            timeout_s=timeout,
            quick=quick,
            sanitize_code=not no_sanitize,
            child=child,
            timed_sizes="all" if full else "verdict",
            job_extra={"torch_anchor": True},
        )
    result.lang_choice = target.lang_choice
    total = _command_phases(result, imports)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
    else:
        console.print_grade(result)
    if verbose and not as_json:
        click.echo(console.format_phases(result, total_s=total))
    _export([result], junit, gradescope, annotate=not as_json)
    _FAST_EXIT["ok"] = True  # the record and every export are written and closed
    sys.exit(exit_code([c.status for c in result.checks], strict))
