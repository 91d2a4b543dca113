"""`kcourse report`: write a report (a day's, a week's, the final one, the portfolio) from the results."""

from __future__ import annotations

from pathlib import Path

import click


@click.command()
@click.argument("which")
@click.option(
    "--plan",
    "plan_id",
    help="The plan whose week/day this is (default: weekN of the 11-week plan, "
    "dayN of the 5-day plan, else the one plan that has it).",
)
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), help="Folder for the report.")
def report(which, plan_id, out_dir) -> None:
    """Write a report from your results: `kcourse report day1`, `week3`, `final`, `portfolio`. Your notes are kept.

    Without --plan, weekN is the 11-week plan's and dayN the 5-day plan's; a key only another plan has
    (day9: the 100-day plan) is that plan's; a key several other plans share asks for --plan. The
    command prints which plan it used."""
    from grader.reports import reporting

    try:
        note = reporting.resolution_note(which, plan_id)
        path = _render_report(which, out_dir, plan_id)
    except reporting.ReportError as exc:
        raise click.UsageError(str(exc)) from None
    if note:
        click.echo(note)
    click.echo(f"wrote {path}")


def _render_report(which: str, out_dir, plan_id):
    from grader.reports import portfolio, reporting

    return portfolio.render(out_dir) if which == reporting.PORTFOLIO else reporting.render(which, out_dir, plan_id)
