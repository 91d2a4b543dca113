"""`kcourse profile`: run the learner's kernel under torch.profiler."""

from __future__ import annotations

from pathlib import Path

import click

from grader.cli.options import _resolve, _tool_record, learner_code_options


@click.command()
@learner_code_options
@click.option("--ncu", is_flag=True, help="Also collect Nsight Compute's Speed-of-Light metrics (needs ncu).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), help="Folder for the trace.")
def profile(words, lang, plan_id, source, submission, ncu, out_dir) -> None:
    """Run your kernel under torch.profiler: the top kernels, and a trace to open in Perfetto."""
    from grader.commands import tools
    from grader.reports.reporting import reports_dir

    target = _resolve(words, lang, plan_id, submission)  # a --file's suffix picks the version, as grade's does
    record = _tool_record(
        "profile", lambda: tools.run_profile(target, out_dir or reports_dir(), submission, source, ncu)
    )
    click.echo(tools.format_profile(record))
