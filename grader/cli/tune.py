"""`kcourse tune`: time the learner's kernel over the exercise's configurations."""

from __future__ import annotations

import sys

import click

from grader.cli.options import _resolve, _tool_record, learner_code_options


@click.command()
@learner_code_options
def tune(words, lang, plan_id, source, submission) -> None:
    """Time your kernel over the exercise's configurations (block sizes, num_warps, ...)."""
    from grader.commands import tools

    target = _resolve(words, lang, plan_id, submission)  # a --file's suffix picks the version, as grade's does
    record = _tool_record("tune", lambda: tools.run_tune(target, submission, source))
    click.echo(tools.format_tune(record))
    sys.exit(0 if any(row["correct"] for row in record["rows"]) else 1)
