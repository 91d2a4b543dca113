"""`kcourse calibrate`: instructors time every solution on a GPU and record its figures."""

from __future__ import annotations

import sys

import click

from grader.reports import console


@click.command()
@click.option("--only", "only", multiple=True, help="Only this exercise id, or id:lang for one variant (repeatable).")
@click.option("--missing", is_flag=True, help="Only the exercises with a timed size this GPU has no figure for yet.")
def calibrate(only, missing) -> None:
    """Instructors, on a GPU: time every solution and record it in calibration/calibration.json."""
    from grader.core import calibration
    from grader.core.discovery import all_targets, solution_file
    from grader.run.grade import cuda_available
    from grader.run.grade import grade as run_grade
    from grader.toolchain.build import gpu_name

    if not cuda_available():
        raise click.UsageError("calibrate times the solutions on a GPU, and none was found here")
    try:
        known = calibration.load()  # refuse before measuring if the file is corrupt: nothing is changed
    except calibration.CalibrationError as exc:
        raise click.UsageError(str(exc)) from None
    targets = [
        t
        for t in all_targets()
        if (not only or t.spec.id in only or t.key in only) and solution_file(t.spec, t.variant).exists()
    ]
    if missing:
        targets = calibration.lacking(targets, known, gpu_name())
        if not targets:
            click.echo(f"every solution already has figures for {gpu_name()}: nothing to calibrate")
            return
    if not targets:
        raise click.UsageError("no solutions found to calibrate (is solutions/ present?)")
    rows, path = [], None
    for target in targets:  # merged one by one: an interrupted run keeps what it measured
        entries, target_rows = calibration.calibrate(
            [target], lambda t: run_grade(t, source="solutions", record=False, sanitize_code=False)
        )
        path = calibration.merge(entries)
        rows += target_rows
        click.echo(f"  {target.key}: {target_rows[0]['status']}", err=True)
    table_rows = [
        [
            r["exercise"],
            r["lang"],
            r["status"],
            r["case"],
            console.num(r["ms"]),
            console.num(r["roofline_pct"], "{:.0f}%"),
        ]
        for r in rows
    ]
    click.echo(console.table(table_rows, ["exercise", "lang", "status", "timed size", "solution ms", "% roofline"]))
    click.echo(f"wrote {path}")
    sys.exit(0 if all(r["status"] == "passed" for r in rows) else 1)
