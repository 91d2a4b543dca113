"""`kcourse block`: one transformer block from the learner's kernels, against float64 PyTorch."""

from __future__ import annotations

import json
import sys

import click

from grader.cli.options import _capstone_options, _progress_line


@click.command()
@_capstone_options
def block(source, use, tiny, seed, timeout, as_json) -> None:
    """One transformer block from your kernels, forward and backward against float64 PyTorch (days 71-77)."""
    from grader.capstone import report, run

    try:
        record = run.block(source, tiny, seed, timeout, run.parse_use(use), on_event=_progress_line)
    except run.CapstoneError as exc:
        raise click.UsageError(str(exc)) from None
    path = report.render(record)
    click.echo(json.dumps(record, indent=2, default=str) if as_json else report.format_block(record, path))
    sys.exit(0 if record["status"] == "passed" else 1)
