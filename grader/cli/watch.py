"""`kcourse watch`: re-grade the learner's file every time it is saved."""

from __future__ import annotations

import click

from grader.cli.options import _resolve, learner_code_options
from grader.reports import console


@click.command()
@learner_code_options
@click.option("--quick", is_flag=True, help="Numerics and integrity only: no timing.")
@click.option("--no-sanitize", is_flag=True, help="Skip compute-sanitizer's race and memory checks.")
def watch(words, lang, plan_id, source, submission, quick, no_sanitize) -> None:
    """Re-grade your file every time you save it (Ctrl-C to stop): `kcourse watch softmax`. For speed it
    times only the size the speed verdict is taken at; `kcourse grade` times every size."""
    from grader.commands.watch import watch as run_watch

    target = _resolve(words, lang, plan_id, submission)

    def show(result):
        result.lang_choice = target.lang_choice
        console.print_grade(result)
        click.echo(console.format_phases(result, warm=True))
        if result.timings:
            click.echo(
                "(watch times the verdict's size only, without PyTorch beside it; `kcourse grade --full` times every size)"
            )
        click.echo("watching for changes (Ctrl-C to stop) ...")

    def show_later(result):  # compute-sanitizer's verdict, after the rest (it runs once timing is done)
        check = next(c for c in result.checks if c.name == "sanitizer")
        console.print_check(check)
        console.print_verdict(result)

    try:
        run_watch(target, source, submission, show, quick=quick, sanitize_code=not no_sanitize, show_later=show_later)
    except KeyboardInterrupt:
        click.echo("stopped watching")
