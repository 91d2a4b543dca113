"""`kcourse progress`: the learner's plan as a checklist."""

from __future__ import annotations

import shutil
import sys

import click

from grader.core.discovery import ResolveError


@click.command()
@click.option("--plan", "plan_id", help="The plan (default: the 11-week plan).")
def progress(plan_id) -> None:
    """Your plan as a checklist: each week/day, its topic and your best result (and the latest where it differs)."""
    from grader.reports.progress import format_progress

    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else None  # a file or a pipe gets whole lines
    try:
        click.echo(format_progress(plan_id, width))
    except ResolveError as exc:
        raise click.UsageError(str(exc)) from None
