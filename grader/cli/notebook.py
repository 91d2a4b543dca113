"""`kcourse notebook`: write the day 4 starter notebook."""

from __future__ import annotations

from pathlib import Path

import click

from grader.cli.options import _resolve


@click.command()
@click.argument("which", type=click.Choice(["day4"]))
@click.option("--exercise", default="softmax", show_default=True, help="The Triton exercise the notebook replaces.")
@click.option(
    "--out",
    "out_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("replace_op.ipynb"),
    show_default=True,
)
@click.option("--force", is_flag=True, help="Overwrite an existing notebook.")
def notebook(which, exercise, out_path, force) -> None:
    """Write the day 4 starter notebook: a PyTorch baseline, your Triton cell, profiling cells."""
    from grader.toolchain.notebook import NotebookError, write_notebook

    target = _resolve((exercise,), "triton", None)
    try:
        path = write_notebook(target, out_path, force)
    except NotebookError as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(f"wrote {path}: fill in the cell tagged `kcourse`, then kcourse grade {exercise} --file {path}")
