"""`kcourse grade-batch`: instructors grade a class's submissions into a gradebook and a leaderboard."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from grader.cli.options import LANGS, _allow_unisolated_option, _require_box
from grader.core.discovery import ResolveError
from grader.reports import console


def _cluster_options(command):
    from grader.commands.cluster_start import cluster_options

    return cluster_options(command)


def _submitted(submissions: Path, targets: list) -> list:
    """grade-batch's exercises without --all: those some learner has a file for (said on stderr)."""
    from grader.commands import batch

    found = batch.submitted_targets(submissions, targets)
    if not found:
        names = ", ".join(sorted({t.variant.stub for t in targets})[:6]) + (", ..." if len(targets) > 6 else "")
        raise click.UsageError(
            f"no learner folder in {submissions} holds a file of the {len(targets)} selected "
            f"exercise(s) (found by the stub's name: {names}); --all gives each a `missing` row"
        )
    if len(found) < len(targets):
        click.echo(
            f"grading the {len(found)} exercise(s) the submissions hold ({', '.join(t.key for t in found[:8])}"
            f"{', ...' if len(found) > 8 else ''}); {len(targets) - len(found)} other(s) no learner submitted "
            "are left out (--all lists them as missing)",
            err=True,
        )
    return found


def _require_committed_kit(allowed: bool) -> None:
    """A class is graded by the kit as committed: every learner judged by the same grader and references."""
    from grader.run import kit

    changed = kit.differs_from_git() or []
    if changed and not allowed:
        raise click.UsageError(
            f"the kit differs from git in {len(changed)} file(s): {', '.join(changed[:5])}. Commit "
            "or restore them (`git checkout -- FILE`), or pass --allow-modified-kit"
        )


@click.command("grade-batch")
@click.argument("submissions", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--only", "only", multiple=True, help="Only this exercise id (repeatable).")
@click.option("--lang", type=str, metavar=LANGS)
@click.option("--plan", "plan_id", help="Only the exercises of this plan.")
@click.option("--unit", help="Only the exercises of this week/day.")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("gradebook"),
    show_default=True,
    help="Folder for the gradebook (gradebook.jsonl, .csv, .json) and the leaderboard.",
)
@click.option(
    "--workers",
    type=int,
    help="Parallel graders (default: one per GPU, or 1 without a GPU; --cluster local without a GPU: CPU workers).",
)
@click.option("--seed", type=int)
@click.option("--timeout", type=float, help="Seconds each learner's code may run.")
@click.option("--regrade", is_flag=True, help="Grade every submission again, even those the gradebook holds.")
@click.option(
    "--all",
    "every_exercise",
    is_flag=True,
    help="Give every selected exercise a row for every learner, "
    "`missing` where none submitted it (default: only the exercises some learner has a file for).",
)
@click.option(
    "--allow-modified-kit",
    is_flag=True,
    envvar="KCOURSE_ALLOW_MODIFIED_KIT",
    help="Grade even though the kit's grader, specs, references or "
    "calibration differ from git (your uncommitted edits judge every learner).",
)
@_cluster_options
@_allow_unisolated_option
def grade_batch(
    submissions,
    only,
    lang,
    plan_id,
    unit,
    out_dir,
    workers,
    seed,
    timeout,
    regrade,
    every_exercise,
    allow_modified_kit,
    allow_unisolated,
    **cluster,
) -> None:
    """Instructors: grade every learner folder in SUBMISSIONS into a gradebook and a leaderboard; on this
    machine, or on a Dask cluster (--scheduler, --cluster; docs/grading-a-class.md)."""
    from grader.run import forkserver

    forkserver.enable()  # many grades: children forked after one torch import, where no GPU is
    _require_box(allow_unisolated)
    _require_committed_kit(allow_modified_kit)
    from grader.commands import batch
    from grader.commands.batch_progress import Progress
    from grader.commands.cluster_start import close

    started = _runner_and_targets(submissions, workers, cluster, every_exercise, only, lang, plan_id, unit)
    if started is None:  # --dry-run
        return
    runner, opened, targets = started
    click.echo(f"grading on {runner.describe()}", err=True)
    progress = Progress(stream=sys.stderr)
    try:
        rows = batch.grade_batch(
            submissions,
            targets,
            seed=seed,
            timeout_s=timeout,
            out_dir=out_dir,
            runner=runner,
            regrade=regrade,
            progress=progress,
        )
    finally:
        close(opened)
    _write_and_show(rows, submissions, out_dir, progress)


def _runner_and_targets(submissions, workers, cluster, every_exercise, only, lang, plan_id, unit):
    """(runner, what it opened, the exercises to grade), or None for --dry-run; a usage error for options or a
    selection that cannot be met, with what it opened closed."""
    from grader.commands import batch, validation
    from grader.commands.cluster import ClusterError
    from grader.commands.cluster_start import ClusterOptions, close, start

    options = ClusterOptions(workers=workers, **cluster)
    options.check()
    try:
        targets = validation.select(only=set(only), lang=lang, plan_id=plan_id, unit=unit)
        runner, opened = start(options) if options.wanted else (batch.LocalRunner(workers), [])
    except (ResolveError, ClusterError) as exc:
        raise click.UsageError(str(exc)) from None
    if runner is None:
        return None
    if not every_exercise:
        try:
            targets = _submitted(submissions, targets)
        except click.UsageError:
            close(opened)
            raise
    return runner, opened, targets


def _write_and_show(rows: list[dict], submissions: Path, out_dir: Path, progress) -> None:
    """The gradebook's files and the leaderboard written, then the table and the summary on the terminal."""
    from grader.commands import batch
    from grader.reports import leaderboard

    csv_path, json_path = batch.write_gradebook(rows, out_dir)
    md_path, _ = leaderboard.write(rows, submissions, out_dir)
    table_rows = [
        [r["learner"], r["exercise"], r["lang"], r["status"], f"{r['score']:g}/{r['max_score']:g}", r["verdict"][:70]]
        for r in rows
    ]
    click.echo(console.table(table_rows, ["learner", "exercise", "lang", "status", "score", "verdict"]))
    click.echo(progress.summary(rows))
    click.echo(
        f"wrote {csv_path}, {json_path} and {md_path} (.html beside it); all grades: {out_dir / 'gradebook.jsonl'}"
    )
