"""`kcourse viz`: pictures of what each program of a Triton kernel loaded and stored."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from grader.cli.options import _resolve, _tool_record, learner_code_options


@click.command()
@learner_code_options
@click.option("--case", "case_index", type=int, help="Index into the spec's [[cases]] (default: a small case).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), help="Folder for the pictures.")
def viz(words, lang, plan_id, source, submission, case_index, out_dir) -> None:
    """Pictures of what each program of your Triton kernel loaded and stored (run once under the interpreter)."""
    from grader.commands import viz as pictures
    from grader.reports.report_files import reports_dir

    target = _resolve(words, lang, plan_id, submission)  # a --file's suffix picks the version, as grade's does
    record = _tool_record(
        "draw", lambda: pictures.run_viz(target, out_dir or reports_dir(), submission, source, case_index)
    )
    click.echo(pictures.format_viz(record))
    sys.exit(1 if pictures.problems(record) else 0)
