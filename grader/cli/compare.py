"""`kcourse compare`: several versions of one exercise side by side, or the attention sweep."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from grader.cli.options import LANGS, SOURCE_HELP, SOURCES, exit_code
from grader.core.discovery import ResolveError
from grader.core.spec import SpecError


def _lengths(ctx, param, value):
    """--lengths 512,1024,2048: positive sequence lengths, in the order given."""
    if value is None:
        return None
    try:
        lengths = tuple(int(part) for part in value.split(",") if part.strip())
    except ValueError:
        lengths = ()
    if not lengths or min(lengths) < 1:
        raise click.BadParameter("give positive sequence lengths separated by commas, e.g. 512,1024,2048")
    return lengths


@click.command("compare")
@click.argument("exercise")
@click.argument("files", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--lang", type=str, metavar=LANGS, help="Pick the language where an exercise has both (default: the files' suffix)."
)
@click.option("--seed", type=int, help="Seed for the inputs, the same for every file.")
@click.option("--timeout", type=float, help="Seconds each file's code may run (default: the exercise's).")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison record as one JSON document.")
@click.option("--no-sanitize", is_flag=True, help="Skip compute-sanitizer's race and memory checks.")
@click.option("--lengths", callback=_lengths, help="attention: sequence lengths (default 512,1024,...,16384).")
@click.option("--batch", "batch", type=click.IntRange(1), help="attention: batch size B (default 1).")
@click.option("--heads", type=click.IntRange(1), help="attention: heads H (default 16).")
@click.option("--head-dim", type=click.IntRange(1), help="attention: head dimension d (default 64).")
@click.option("--dtype", type=click.Choice(["float16", "bfloat16"]), help="attention: input dtype (default float16).")
@click.option("--source", type=SOURCES, envvar="KCOURSE_SOURCE", help="attention: " + SOURCE_HELP)
def compare_command(
    exercise, files, lang, seed, timeout, as_json, no_sanitize, lengths, batch, heads, head_dim, dtype, source
) -> None:
    """Grade several versions of one exercise side by side: `kcourse compare reduction v1.cu v2.cu v3.cu`;
    or every attention implementation you graded over sequence lengths: `kcourse compare attention`.

    Each file is graded as with `kcourse grade EXERCISE --file FILE` (same inputs for all) and recorded;
    the table (numerics, ms, GB/s or TFLOP/s, % of roofline, speed vs the solution) goes to the week's report.

    `kcourse compare attention` (on a GPU) runs each attention exercise's own file whose latest grade passed
    numerics, beside torch's scaled_dot_product_attention: ms, TFLOP/s and peak extra GPU memory per length,
    recorded for `kcourse report week10`."""
    from grader.run import forkserver

    forkserver.enable()  # many grades: children forked after one torch import, where no GPU is
    attention_options = {
        "--lengths": lengths,
        "--batch": batch,
        "--heads": heads,
        "--head-dim": head_dim,
        "--dtype": dtype,
    }
    if exercise == "attention":
        if files or lang:
            raise click.UsageError(
                "`kcourse compare attention` takes no files or --lang: it runs each attention "
                "exercise's own file (graded first). To compare versions of one exercise: "
                "kcourse compare flash_attention_v1 a.py b.py"
            )
        config = {k: v for k, v in {"B": batch, "H": heads, "d": head_dim, "dtype": dtype}.items() if v is not None}
        _compare_attention(source or "learner", config, lengths, seed, timeout, as_json)
        return
    given = [name for name, value in attention_options.items() if value is not None]  # --source: maybe from the env
    if given:
        raise click.UsageError(
            f"{', '.join(given)}: for `kcourse compare attention` only; "
            f"`kcourse compare {exercise}` compares the files you name"
        )
    _compare_files(exercise, files, lang, seed, timeout, as_json, no_sanitize)


def _compare_files(exercise, files, lang, seed, timeout, as_json, no_sanitize) -> None:
    """Each file graded as `kcourse grade EXERCISE --file FILE` (one line each as it is graded), then the table."""
    from grader.commands import compare

    try:
        entries = compare.entries_for_files(exercise, list(files), lang)
    except (ResolveError, SpecError) as exc:
        raise click.UsageError(str(exc)) from None

    def echo(entry, result) -> None:
        if not as_json:
            click.echo(f"graded {entry.label}: {result.status.upper()}: {result.verdict.splitlines()[0]}")

    record, results = compare.compare(exercise, entries, seed, timeout, on_graded=echo, sanitize_code=not no_sanitize)
    click.echo(json.dumps(record, indent=2) if as_json else compare.format_comparison(record))
    sys.exit(exit_code([c.status for r in results for c in r.checks], strict=False))


def _compare_attention(source, config, lengths, seed, timeout, as_json) -> None:
    from grader.commands import compare_attention

    def echo(row):
        if not as_json:
            click.echo(f"{row['status']} {row['label']}" + (f": {row['reason']}" if row["reason"] else ""))

    try:
        record = compare_attention.sweep(source, config, lengths or compare_attention.LENGTHS, seed, timeout, echo)
    except compare_attention.AttentionCompareError as exc:
        click.echo(str(exc), err=True)
        sys.exit(2)
    click.echo(json.dumps(record, indent=2) if as_json else compare_attention.format_attention(record))
    sys.exit(compare_attention.exit_status(record))
