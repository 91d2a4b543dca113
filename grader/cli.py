"""The `kcourse` command line (also `python -m grader`). It parses arguments and calls the pipeline's
modules; it holds no grading logic. Exit codes: 0 every check that ran passed, 1 a check failed,
2 usage or setup error (`--strict`: skipped checks count as failures)."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import sys
import time
from pathlib import Path

import click

from grader.core.discovery import ResolveError, resolve
from grader.core.errors import KcourseError
from grader.core.spec import SpecError
from grader.core.vocabulary import Event
from grader.reports import console

STARTED = time.monotonic()  # for the `imports` phase: the grader's own start-up (Python's is before this)


def _process_age() -> float | None:
    """Seconds since this process started (Linux: /proc), so that a command's total is its whole wall time,
    Python's own start-up included; None where that cannot be read."""
    try:
        start_ticks = float(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        age = uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    since_started = time.monotonic() - STARTED
    return age if since_started <= age < since_started + 60 else None  # a figure that makes no sense is not shown


def _command_phases(result, imports: float) -> float:
    """Put this process's own phases first (python: the interpreter and the CLI's imports, before STARTED;
    imports: the grader's, and resolving the exercise); returns the command's wall time so far."""
    now = time.monotonic() - STARTED
    age = _process_age()
    own = {"python": round(age - now, 3)} if age is not None else {}
    result.phases = {**own, "imports": round(imports, 3), **result.phases}  # the child's start-up is `start`
    return age if age is not None else now


SOURCES = click.Choice(["learner", "stubs", "solutions"])
LANGS = "cuda|triton|VERSION"  # a version's name; the spec checks it and lists the ones an exercise has
SOURCE_HELP = (
    "learner/stubs: the files in exercises/; solutions: the hidden solutions in the learner's place "
    "(env KCOURSE_SOURCE does the same, for CI systems that set variables)."
)


def learner_code_options(command):
    """What names the code to run: `week2 reduction` or `reduction`, --lang, --plan, --source, --file."""
    for option in reversed(
        [
            click.argument("words", nargs=-1, required=True),
            click.option(
                "--lang",
                type=str,
                metavar=LANGS,
                help="Pick the version where an exercise has several: its "
                "language, or the name its spec gives it (add2 --lang setup).",
            ),
            click.option("--plan", "plan_id", help="Resolve the week/day in this plan (default: the 11-week plan)."),
            click.option(
                "--source",
                type=SOURCES,
                default="learner",
                show_default=True,
                envvar="KCOURSE_SOURCE",
                help=SOURCE_HELP,
            ),
            click.option(
                "--file",
                "submission",
                type=click.Path(exists=True, dir_okay=False, path_type=Path),
                help="Use this file (a .py, .cu or tagged .ipynb) instead of the one in exercises/.",
            ),
        ]
    ):
        command = option(command)
    return command


def exit_code(statuses: list[str], strict: bool) -> int:
    if any(s in ("failed", "error") for s in statuses):
        return 1
    if strict and any(s == "skipped" for s in statuses):
        return 1
    return 0


# Set by a command whose work is all written when it returns (grade): run() then ends the process without
# the interpreter's teardown, which with torch loaded costs a learner 0.3-0.9 s on every grade.
_FAST_EXIT = {"ok": False}


def run() -> None:
    """The console entry point (`kcourse`, `python -m grader`); tests call `main` through click's runner."""
    try:
        main()
    except SystemExit as exc:
        if not _FAST_EXIT["ok"]:
            raise
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        sys.stdout.flush()
        sys.stderr.flush()
        atexit._run_exitfuncs()  # what must still happen at exit does: thread pools end, semaphores are unlinked
        os._exit(code)


class Commands(click.Group):
    """The verbs. A KcourseError a verb does not turn into its own message ends here: its message (which says what
    to do next) and exit status 2, never a traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except KcourseError as exc:
            error = click.ClickException(str(exc))
            error.exit_code = 2  # a usage or setup error (the exit codes: README, docs/learners.md)
            raise error from None


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """kernel-course: exercises and an autograder for CUDA and Triton."""


@main.command()
@learner_code_options
@click.option("--seed", type=int, help="Seed for the random inputs (a failure prints the one to reuse).")
@click.option("--timeout", type=float, help="Seconds the learner's code may run (default: the exercise's).")
@click.option("--json", "as_json", is_flag=True, help="Print the full result as one JSON document.")
@click.option("--strict", is_flag=True, help="Count skipped checks as failures.")
@click.option("--junit", type=click.Path(dir_okay=False, path_type=Path), help="Also write JUnit XML here.")
@click.option(
    "--gradescope", type=click.Path(dir_okay=False, path_type=Path), help="Also write Gradescope results.json here."
)
@click.option(
    "--quick", is_flag=True, help="Numerics and integrity only: no timing (for when speed is not the question)."
)
@click.option("--verbose", "-v", is_flag=True, help="Also print the seconds spent in each phase.")
@click.option(
    "--no-sanitize", is_flag=True, help="Skip compute-sanitizer's race and memory checks (cached per file anyway)."
)
@click.option(
    "--full",
    is_flag=True,
    help="Time every size of the exercise (the curve in your report), not only the size the speed verdict is taken at.",
)
def grade(
    words,
    lang,
    plan_id,
    source,
    submission,
    seed,
    timeout,
    as_json,
    strict,
    junit,
    gradescope,
    quick,
    verbose,
    no_sanitize,
    full,
) -> None:
    """Grade one exercise: `kcourse grade week2 reduction` or `kcourse grade reduction`."""
    from grader.run import early

    target = _resolve(words, lang, plan_id, submission)
    child = early.start(target, source, submission)  # before the import below: their start-ups overlap it

    with console.grading_status(child, enabled=not as_json):  # a live line at a terminal, until the verdict
        from grader.run.grade import grade as run_grade

        imports = time.monotonic() - STARTED
        result = run_grade(
            target,
            source=source,
            submission=submission,
            seed=seed,
            timeout_s=timeout,
            quick=quick,
            sanitize_code=not no_sanitize,
            child=child,
            timed_sizes="all" if full else "verdict",
            job_extra={"torch_anchor": True},
        )
    result.lang_choice = target.lang_choice
    total = _command_phases(result, imports)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
    else:
        console.print_grade(result)
    if verbose and not as_json:
        click.echo(console.format_phases(result, total_s=total))
    _export([result], junit, gradescope, annotate=not as_json)
    _FAST_EXIT["ok"] = True  # the record and every export are written and closed
    sys.exit(exit_code([c.status for c in result.checks], strict))


@main.command()
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


def _export(results, junit, gradescope, annotate: bool = True) -> None:
    """Write JUnit / Gradescope files; under GitHub Actions also print annotations (not into --json output)."""
    from grader.reports.exports import write_outputs

    for line in write_outputs(results, junit, gradescope):
        if annotate:
            click.echo(line)


def _resolve(words, lang, plan_id, submission: Path | None = None):
    """What was typed -> a target. Without --lang, a --file's suffix picks the version where the exercise
    has several (`kcourse grade softmax --file mine.cu` is the CUDA one)."""
    guessed = {".cu": "cuda", ".py": "triton"}.get(submission.suffix) if submission and not lang else None
    try:
        if guessed:
            try:
                target = resolve(tuple(words), lang=guessed, plan_id=plan_id)
                if len(target.spec.variants) > 1:
                    target.lang_choice = f"picked by the file's {submission.suffix} suffix"
                return target
            except (ResolveError, SpecError):
                pass  # no such version: resolved as typed, and the load check says what the file should be
        return resolve(tuple(words), lang=lang, plan_id=plan_id)
    except (ResolveError, SpecError) as exc:
        raise click.UsageError(str(exc)) from None


@main.command("env-check")
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


@main.command("list")
@click.option("--plan", "plan_id", help="Show this plan (default: the default plan, the 11-week one).")
@click.option("--all", "show_all", is_flag=True, help="Show every plan.")
def list_command(plan_id, show_all) -> None:
    """A plan, its weeks/days, exercises and your status (your best grade; the latest too where it differs)."""
    from grader.commands import listing

    try:
        click.echo(listing.format_plans(plan_id, show_all))
    except ResolveError as exc:
        raise click.UsageError(str(exc)) from None


def _allow_unisolated_option(command):
    return click.option(
        "--allow-unisolated",
        is_flag=True,
        help="Run learner code even where this machine cannot box it (no Landlock): only for code "
        "you trust, such as your own solutions and stubs.",
    )(command)


def _require_box(allowed: bool) -> None:
    """Many learners' code, or the kit's own validation, runs boxed or not at all unless the caller says so."""
    from grader.child import box

    boxed, why = box.available()
    if not boxed and not allowed:
        raise click.UsageError(
            f"learner code cannot be boxed here: {why}. Grade on Linux 5.13 or later with "
            "Landlock enabled, or pass --allow-unisolated to run it with your user's rights"
        )
    if not boxed:
        click.echo(f"isolation: none ({why}); --allow-unisolated was given", err=True)


@main.command()
@click.option(
    "--source",
    type=SOURCES,
    default="solutions",
    show_default=True,
    envvar="KCOURSE_SOURCE",
    help="solutions: every solution must pass; stubs: every stub must fail (env KCOURSE_SOURCE).",
)
@click.option("--only", "only", multiple=True, help="Only this exercise id (repeatable).")
@click.option("--lang", type=str, metavar=LANGS, help="Only this language (or version name).")
@click.option("--plan", "plan_id", help="Only the exercises of this plan.")
@click.option("--unit", help="Only the exercises of this week/day of the plan (e.g. week2).")
@click.option("--seed", type=int, help="The same inputs in every run (default: fresh random inputs per run).")
@click.option(
    "--repeat",
    type=int,
    default=1,
    show_default=True,
    help="Grade each exercise this many times; it is ok only if every run is (--repeat 10: 10/10).",
)
@click.option("--workers", type=int, help="Grades at once (default: one per GPU, each grade seeing only its GPU).")
@click.option("--json", "as_json", is_flag=True)
@click.option("--strict", is_flag=True, help="Count exercises that could not run here as failures.")
@click.option(
    "--calibrate",
    "write_calibration",
    is_flag=True,
    help="With the solutions on a GPU: also record each exercise's figures in calibration/calibration.json "
    "(its first run, which times every size), as `kcourse calibrate` does; only exercises ok every run.",
)
@click.option("--junit", type=click.Path(dir_okay=False, path_type=Path), help="Also write JUnit XML here.")
@click.option(
    "--gradescope", type=click.Path(dir_okay=False, path_type=Path), help="Also write Gradescope results.json here."
)
@_allow_unisolated_option
def validate(
    source,
    only,
    lang,
    plan_id,
    unit,
    seed,
    repeat,
    workers,
    as_json,
    strict,
    write_calibration,
    junit,
    gradescope,
    allow_unisolated,
) -> None:
    """Grade every exercise with the solutions (must pass) or the stubs (must not pass), --repeat times each,
    one grade per GPU at once."""
    from grader.run import forkserver

    forkserver.enable()  # many grades: children forked after one torch import, where no GPU is
    from grader.commands import validation

    _require_box(allow_unisolated)

    try:
        targets = validation.select(only=set(only), lang=lang, plan_id=plan_id, unit=unit)
    except ResolveError as exc:
        raise click.UsageError(str(exc)) from None
    from grader.core.paths import solutions_dir

    if source == "solutions" and not solutions_dir().is_dir():
        raise click.UsageError(
            f"{solutions_dir()} is missing: validating the solutions needs the instructor's "
            "solutions/ folder (a learner's kit has none)"
        )
    if repeat < 1:
        raise click.UsageError("--repeat takes a count of 1 or more")
    if write_calibration and source != "solutions":
        raise click.UsageError("--calibrate records the solutions' figures: use it with --source solutions")
    summary, results = validation.validate(
        targets, source=source, seed=seed, repeat=repeat, workers=workers, progress=not as_json
    )
    click.echo(json.dumps(summary, indent=2) if as_json else validation.format_summary(summary))
    if write_calibration:
        _merge_calibration(validation.calibration_entries(summary, results))
    _export(results, junit, gradescope, annotate=not as_json)
    statuses = [row["outcome"] for row in summary["rows"]]
    sys.exit(exit_code(["failed" if s == "unexpected" else s for s in statuses], strict))


def _merge_calibration(entries: dict) -> None:
    """validate --calibrate's figures into the calibration file (on stderr: stdout may be --json)."""
    from grader.core import calibration

    if not entries:
        click.echo(
            "calibration: nothing recorded (no exercise passed every run with a timed size; calibrating needs a GPU)",
            err=True,
        )
        return
    try:
        path = calibration.merge(entries)
    except calibration.CalibrationError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"calibration: figures for {', '.join(sorted(entries))} written to {path}", err=True)


@main.command()
@click.option("--only", "only", multiple=True, help="Only this exercise id, or id:lang for one variant (repeatable).")
@click.option("--missing", is_flag=True, help="Only the exercises with a timed size this GPU has no figure for yet.")
def calibrate(only, missing) -> None:
    """Instructors, on a GPU: time every solution and record it in calibration/calibration.json."""
    from grader.core import calibration
    from grader.core.discovery import all_targets, solution_file
    from grader.run.grade import cuda_available
    from grader.run.grade import grade as run_grade
    from grader.toolchain.build import gpu_name

    if not cuda_available():
        raise click.UsageError("calibrate times the solutions on a GPU, and none was found here")
    try:
        known = calibration.load()  # refuse before measuring if the file is corrupt: nothing is changed
    except calibration.CalibrationError as exc:
        raise click.UsageError(str(exc)) from None
    targets = [
        t
        for t in all_targets()
        if (not only or t.spec.id in only or t.key in only) and solution_file(t.spec, t.variant).exists()
    ]
    if missing:
        targets = calibration.lacking(targets, known, gpu_name())
        if not targets:
            click.echo(f"every solution already has figures for {gpu_name()}: nothing to calibrate")
            return
    if not targets:
        raise click.UsageError("no solutions found to calibrate (is solutions/ present?)")
    rows, path = [], None
    for target in targets:  # merged one by one: an interrupted run keeps what it measured
        entries, target_rows = calibration.calibrate(
            [target], lambda t: run_grade(t, source="solutions", record=False, sanitize_code=False)
        )
        path = calibration.merge(entries)
        rows += target_rows
        click.echo(f"  {target.key}: {target_rows[0]['status']}", err=True)
    table_rows = [
        [
            r["exercise"],
            r["lang"],
            r["status"],
            r["case"],
            console.num(r["ms"]),
            console.num(r["roofline_pct"], "{:.0f}%"),
        ]
        for r in rows
    ]
    click.echo(console.table(table_rows, ["exercise", "lang", "status", "timed size", "solution ms", "% roofline"]))
    click.echo(f"wrote {path}")
    sys.exit(0 if all(r["status"] == "passed" for r in rows) else 1)


@main.command()
@click.argument("which")
@click.option(
    "--plan",
    "plan_id",
    help="The plan whose week/day this is (default: weekN of the 11-week plan, "
    "dayN of the 5-day plan, else the one plan that has it).",
)
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), help="Folder for the report.")
def report(which, plan_id, out_dir) -> None:
    """Write a report from your results: `kcourse report day1`, `week3`, `final`, `portfolio`. Your notes are kept.

    Without --plan, weekN is the 11-week plan's and dayN the 5-day plan's; a key only another plan has
    (day9: the 100-day plan) is that plan's; a key several other plans share asks for --plan. The
    command prints which plan it used."""
    from grader.reports import reporting

    try:
        note = reporting.resolution_note(which, plan_id)
        path = _render_report(which, out_dir, plan_id)
    except reporting.ReportError as exc:
        raise click.UsageError(str(exc)) from None
    if note:
        click.echo(note)
    click.echo(f"wrote {path}")


@main.command()
@click.argument("target_dir", type=click.Path(path_type=Path))
def release(target_dir) -> None:
    """Instructors: write the learner's kit to TARGET_DIR: the files git tracks, less solutions/, test fixtures
    and CI, with learner/README.md as its README (checked for leaked solution text)."""
    from grader.commands.release import ReleaseError
    from grader.commands.release import release as write_release

    try:
        kit = write_release(target_dir)
    except ReleaseError as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(
        f"wrote the learner's kit to {target_dir} ({len(kit.files)} files, no solutions or test fixtures; "
        "checked for leaks)"
    )
    if kit.untracked:
        shown = ", ".join(p.as_posix() for p in kit.untracked[:5]) + (", ..." if len(kit.untracked) > 5 else "")
        click.echo(
            f"left out {len(kit.untracked)} file(s) git does not track: {shown} — `git add` any a learner "
            "needs and release again"
        )


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


def _render_report(which: str, out_dir, plan_id):
    from grader.reports import portfolio, reporting

    return portfolio.render(out_dir) if which == reporting.PORTFOLIO else reporting.render(which, out_dir, plan_id)


@main.command("grade-batch")
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
    from grader.commands import batch, validation
    from grader.commands.batch_progress import Progress
    from grader.commands.cluster import ClusterError
    from grader.commands.cluster_start import ClusterOptions, close, start
    from grader.reports import leaderboard

    options = ClusterOptions(workers=workers, **cluster)
    options.check()
    try:
        targets = validation.select(only=set(only), lang=lang, plan_id=plan_id, unit=unit)
        runner, opened = start(options) if options.wanted else (batch.LocalRunner(workers), [])
    except (ResolveError, ClusterError) as exc:
        raise click.UsageError(str(exc)) from None
    if runner is None:  # --dry-run
        return
    if not every_exercise:
        try:
            targets = _submitted(submissions, targets)
        except click.UsageError:
            close(opened)
            raise
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


@main.command()
@click.option("--plan", "plan_id", help="The plan (default: the 11-week plan).")
def progress(plan_id) -> None:
    """Your plan as a checklist: each week/day, its topic and your best result (and the latest where it differs)."""
    from grader.reports.progress import format_progress

    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else None  # a file or a pipe gets whole lines
    try:
        click.echo(format_progress(plan_id, width))
    except ResolveError as exc:
        raise click.UsageError(str(exc)) from None


def _tool_record(verb: str, run):
    """run()'s record; a ToolError (the learner's code could not be run for the tool) printed as `could not <verb>`
    and exit status 1, or 2 for a CaseError (--case names no case the tool can run)."""
    from grader.commands import tools

    try:
        return run()
    except tools.ToolError as exc:
        click.echo(f"could not {verb}: {exc}")
        sys.exit(2 if isinstance(exc, tools.CaseError) else 1)


@main.command()
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


@main.command()
@learner_code_options
def tune(words, lang, plan_id, source, submission) -> None:
    """Time your kernel over the exercise's configurations (block sizes, num_warps, ...)."""
    from grader.commands import tools

    target = _resolve(words, lang, plan_id, submission)  # a --file's suffix picks the version, as grade's does
    record = _tool_record("tune", lambda: tools.run_tune(target, submission, source))
    click.echo(tools.format_tune(record))
    sys.exit(0 if any(row["correct"] for row in record["rows"]) else 1)


@main.command()
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


@main.command("compare")
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
    from grader.commands import compare

    try:
        entries = compare.entries_for_files(exercise, list(files), lang)
    except (ResolveError, SpecError) as exc:
        raise click.UsageError(str(exc)) from None
    echo = (
        (lambda entry, result: None)
        if as_json
        else (
            lambda entry, result: click.echo(
                f"graded {entry.label}: {result.status.upper()}: {result.verdict.splitlines()[0]}"
            )
        )
    )
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


@main.command()
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


def _capstone_options(command):
    """What both `kcourse capstone` and `kcourse block` take."""
    for option in reversed(
        [
            click.option(
                "--source",
                type=SOURCES,
                default="learner",
                show_default=True,
                envvar="KCOURSE_SOURCE",
                help="learner/stubs: your files in exercises/ whose latest grade passed numerics; solutions: the "
                "kit's own kernels in every slot they fit.",
            ),
            click.option(
                "--use",
                multiple=True,
                metavar="EXERCISE[:VERSION]=FILE",
                help="Plug this file in for that exercise, graded or not (repeatable), e.g. --use activations=try.py.",
            ),
            click.option("--tiny", is_flag=True, help="The small CPU configuration (automatic without a GPU)."),
            click.option(
                "--seed", type=int, help="Seed of the weights, the batches and the inputs (printed for reuse)."
            ),
            click.option(
                "--timeout",
                type=float,
                help="Seconds the child process may run (default: 1200 on a GPU, 300 on the CPU).",
            ),
            click.option("--json", "as_json", is_flag=True, help="Print the record as one JSON document."),
        ]
    ):
        command = option(command)
    return command


def _progress_line(event: dict) -> None:
    if event.get("event") == Event.PROGRESS:
        rate = event.get("tokens_per_s")
        click.echo(
            f"  {event['run']:>8}  step {event['step']:>4}/{event['steps']}  loss {event['loss']:.4f}"
            + (f"  {rate:,.0f} tokens/s" if rate else ""),
            err=True,
        )
    elif event.get("event") == Event.STEP:
        click.echo(f"  {event.get('text', '')}", err=True)


@main.command()
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


@main.command()
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


if __name__ == "__main__":
    main()
