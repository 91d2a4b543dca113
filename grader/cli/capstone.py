"""`kcourse capstone`: train a small GPT with the learner's kernels."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from grader.cli.options import _capstone_options, _progress_line


@click.command()
@_capstone_options
@click.option(
    "--data",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Train on this text file (e.g. tinyshakespeare's input.txt) instead of the embedded text.",
)
@click.option("--steps", type=int, help="Train this many steps instead of the configuration's.")
@click.option(
    "--compile/--no-compile",
    "compile_baseline",
    default=None,
    help="Run the torch.compile baseline (default: on a GPU yes, on the CPU no).",
)
def capstone(source, use, tiny, seed, timeout, as_json, data, steps, compile_baseline) -> None:
    """Train a small GPT with your kernels, against PyTorch eager and torch.compile (days 85-92)."""
    from grader.capstone import report, run

    try:
        record = run.capstone(
            source, tiny, data, seed, timeout, run.parse_use(use), compile_baseline, steps, on_event=_progress_line
        )
    except run.CapstoneError as exc:
        raise click.UsageError(str(exc)) from None
    path = report.render(record)
    click.echo(json.dumps(record, indent=2, default=str) if as_json else report.format_capstone(record, path))
    sys.exit(0 if record["status"] == "passed" else 1)
