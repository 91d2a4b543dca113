"""`kcourse env-check`: check and measure this machine's torch, CUDA, GPU, nvcc, ninja and Triton."""

from __future__ import annotations

import json
import sys

import click


@click.command("env-check")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option(
    "--no-training",
    is_flag=True,
    help="Skip the small CPU-vs-GPU training run (about 2 s: the CPU's run "
    "stops at envcheck.BUDGET_S, and the GPU runs as many steps).",
)
def env_check(as_json, no_training) -> None:
    """Check torch, CUDA, the GPU, nvcc, ninja and Triton; measure the GPU; time a small training run."""
    from grader.commands import envcheck
    from grader.core import store

    record = envcheck.check_environment(training=not no_training)
    store.append(record)
    click.echo(json.dumps(record, indent=2) if as_json else envcheck.format_environment(record))
    sys.exit(0 if record["ready"] else 2)
