"""`kcourse validate`: grade every exercise with the solutions (must pass) or the stubs (must not)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from grader.cli.options import LANGS, SOURCES, _allow_unisolated_option, _export, _require_box, exit_code
from grader.core.discovery import ResolveError


@click.command()
@click.option(
    "--source",
    type=SOURCES,
    default="solutions",
    show_default=True,
    envvar="KCOURSE_SOURCE",
    help="solutions: every solution must pass; stubs: every stub must fail (env KCOURSE_SOURCE).",
)
@click.option("--only", "only", multiple=True, help="Only this exercise id (repeatable).")
@click.option("--lang", type=str, metavar=LANGS, help="Only this language (or version name).")
@click.option("--plan", "plan_id", help="Only the exercises of this plan.")
@click.option("--unit", help="Only the exercises of this week/day of the plan (e.g. week2).")
@click.option("--seed", type=int, help="The same inputs in every run (default: fresh random inputs per run).")
@click.option(
    "--repeat",
    type=int,
    default=1,
    show_default=True,
    help="Grade each exercise this many times; it is ok only if every run is (--repeat 10: 10/10).",
)
@click.option("--workers", type=int, help="Grades at once (default: one per GPU, each grade seeing only its GPU).")
@click.option("--json", "as_json", is_flag=True)
@click.option("--strict", is_flag=True, help="Count exercises that could not run here as failures.")
@click.option(
    "--calibrate",
    "write_calibration",
    is_flag=True,
    help="With the solutions on a GPU: also record each exercise's figures in calibration/calibration.json "
    "(its first run, which times every size), as `kcourse calibrate` does; only exercises ok every run.",
)
@click.option("--junit", type=click.Path(dir_okay=False, path_type=Path), help="Also write JUnit XML here.")
@click.option(
    "--gradescope", type=click.Path(dir_okay=False, path_type=Path), help="Also write Gradescope results.json here."
)
@_allow_unisolated_option
def validate(
    source,
    only,
    lang,
    plan_id,
    unit,
    seed,
    repeat,
    workers,
    as_json,
    strict,
    write_calibration,
    junit,
    gradescope,
    allow_unisolated,
) -> None:
    """Grade every exercise with the solutions (must pass) or the stubs (must not pass), --repeat times each,
    one grade per GPU at once."""
    from grader.run import forkserver

    forkserver.enable()  # many grades: children forked after one torch import, where no GPU is
    from grader.commands import validation

    _require_box(allow_unisolated)

    try:
        targets = validation.select(only=set(only), lang=lang, plan_id=plan_id, unit=unit)
    except ResolveError as exc:
        raise click.UsageError(str(exc)) from None
    from grader.core.paths import solutions_dir

    if source == "solutions" and not solutions_dir().is_dir():
        raise click.UsageError(
            f"{solutions_dir()} is missing: validating the solutions needs the instructor's "
            "solutions/ folder (a learner's kit has none)"
        )
    if repeat < 1:
        raise click.UsageError("--repeat takes a count of 1 or more")
    if write_calibration and source != "solutions":
        raise click.UsageError("--calibrate records the solutions' figures: use it with --source solutions")
    summary, results = validation.validate(
        targets, source=source, seed=seed, repeat=repeat, workers=workers, progress=not as_json
    )
    click.echo(json.dumps(summary, indent=2) if as_json else validation.format_summary(summary))
    if write_calibration:
        _merge_calibration(validation.calibration_entries(summary, results))
    _export(results, junit, gradescope, annotate=not as_json)
    statuses = [row["outcome"] for row in summary["rows"]]
    sys.exit(exit_code(["failed" if s == "unexpected" else s for s in statuses], strict))


def _merge_calibration(entries: dict) -> None:
    """validate --calibrate's figures into the calibration file (on stderr: stdout may be --json)."""
    from grader.core import calibration

    if not entries:
        click.echo(
            "calibration: nothing recorded (no exercise passed every run with a timed size; calibrating needs a GPU)",
            err=True,
        )
        return
    try:
        path = calibration.merge(entries)
    except calibration.CalibrationError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"calibration: figures for {', '.join(sorted(entries))} written to {path}", err=True)
