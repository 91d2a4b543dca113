"""`kcourse validate`: prove every solution passes and every stub does not (the instructor's CI check),
as many times as asked (`--repeat 10`: a solution must pass 10 times out of 10, speed verdict included).
The grades run as `kcourse grade-batch` runs a class's (batch.LocalRunner): one worker per GPU, each grading
child seeing only its GPU, the next grade's child started ahead."""

from __future__ import annotations

import sys

from grader.core.discovery import ResolveError, Target, all_targets, pick_plan, suggest
from grader.core.plans import load_plans
from grader.core.records import GradeResult, grade_from_dict
from grader.reports.console import table


def expected(source: str, status: str) -> str:
    """ok / unexpected / skipped for one exercise's status under `source`."""
    if status == "skipped":
        return "skipped"
    if source == "solutions":
        return "ok" if status == "passed" else "unexpected"
    return "ok" if status in ("failed", "error") else "unexpected"


def select(
    only: set[str] | None = None, lang: str | None = None, plan_id: str | None = None, unit: str | None = None
) -> list[Target]:
    """The exercises to validate: all, or filtered by id, language, plan and week/day."""
    targets = all_targets()
    if plan_id or unit:
        plan = pick_plan(load_plans(), plan_id)
        units = [u for u in plan.units if unit is None or u.key == unit]
        if not units:
            raise ResolveError(f"plan {plan.id!r} has no {unit!r}." + suggest(unit, [u.key for u in plan.units]))
        wanted = {(e.id, e.lang) for u in units for e in u.exercises}
        targets = [t for t in targets if (t.spec.id, t.variant.lang) in wanted or (t.spec.id, None) in wanted]
    known = {t.spec.id for t in all_targets()}
    for exercise_id in only or ():
        if exercise_id not in known:
            raise ResolveError(f"unknown exercise {exercise_id!r}." + suggest(exercise_id, sorted(known)))
    return [
        t
        for t in targets
        if (not only or t.spec.id in only) and (not lang or lang in (t.variant.lang, t.variant.language))
    ]  # add2 --lang cuda: jit, setup, cmake


def validate(
    targets: list[Target],
    source: str = "solutions",
    seed: int | None = None,
    repeat: int = 1,
    workers: int | None = None,
    progress: bool = False,
) -> tuple[dict, list[GradeResult]]:
    """Grade each target `repeat` times (fresh random inputs each time unless `seed`); a row per target,
    "ok" only if every run met the expectation. `workers`: grades at once (default: one per GPU)."""
    from grader.commands.batch import Job, LocalRunner
    from grader.commands.batch_progress import Progress
    from grader.run.grade import learner_file

    # The first run of each target times every size (and PyTorch beside it); the repeats time the size the
    # speed verdict is taken at, as `kcourse watch` does: the verdict is the same, and the other sizes'
    # inputs, references and runs (~2 s a grade) are what a 10-run validate of 69 variants can least afford.
    work = [
        (
            Job(
                f"run {i + 1}",
                t.spec.id,
                t.variant.lang,
                learner_file(t, source, None),
                "",
                "all" if i == 0 else "verdict",
            ),
            t,
        )
        for t in targets
        for i in range(repeat)
    ]
    shown = Progress(stream=sys.stderr if progress else None)
    shown.begin(len(work), already=0)
    by_target: dict[str, list[GradeResult]] = {t.key: [] for t in targets}
    for job, row in LocalRunner(workers).run(work, seed, None, shown):
        by_target[f"{job.exercise}:{job.lang}"].append(grade_from_dict(row["result"]))
        shown.finished(job.name, row)
    shown.close()
    rows = [_row(t, by_target[t.key], source) for t in targets]
    summary = {
        "source": source,
        "repeat": repeat,
        "rows": rows,
        "figures": [f for t, row in zip(targets, rows) if (f := _figures(row, by_target[t.key], source))],
    }
    return summary, [r for t in targets for r in by_target[t.key]]


def _row(target: Target, results: list[GradeResult], source: str) -> dict:
    """One target's runs: ok if all were; the first run that was not gives the status and verdict shown."""
    outcomes = [expected(source, r.status) for r in results]
    ok, skipped = outcomes.count("ok"), outcomes.count("skipped")
    worst = next((i for i, o in enumerate(outcomes) if o == "unexpected"), None)
    shown = results[worst if worst is not None else 0]
    if worst is not None:
        outcome = "unexpected"
    else:
        outcome = "skipped" if "skipped" in outcomes else "ok"
    runs = f"{ok}/{len(results)}" + (f", {skipped} skipped" if skipped else "")
    verdict = shown.verdict.splitlines()[0][:110] if shown.verdict else ""
    return {
        "exercise": target.spec.id,
        "lang": target.variant.lang,
        "status": shown.status,
        "outcome": outcome,
        "runs": runs,
        "verdict": verdict,
    }


def _figures(row: dict, results: list[GradeResult], source: str) -> dict | None:
    """A solution that passed every run, at the size its speed verdict is taken (the first run's last timed
    size), beside PyTorch timed in the same process: the figures an instructor puts in the course's table."""
    if source != "solutions" or row["outcome"] != "ok" or not results or not results[0].timings:
        return None
    timed = results[0].timings[-1]
    if timed.solution_rate is None or timed.solution_source != "live solution":
        return None
    # a host-side exercise's anchor is its own serial run (spec performance.baseline_args), not PyTorch
    serial = timed.baseline_ms / timed.learner_ms if timed.baseline_ms and timed.learner_ms else None
    return {
        "exercise": row["exercise"],
        "lang": row["lang"],
        "case": timed.case,
        "unit": timed.unit,
        "solution": timed.solution_rate,
        "roofline_pct": timed.solution_roofline_pct,
        "torch": timed.torch_rate,
        "vs_serial": serial,
        "serial_args": timed.baseline_args,
    }


def format_figures(figures: list[dict]) -> str:
    rows = [
        [
            f["exercise"],
            f["lang"],
            f["case"],
            f"{f['solution']:,.0f} {f['unit']}",
            f"{f['roofline_pct']:.0f}%" if f["roofline_pct"] is not None else "",
            f"{f['torch']:,.0f}" if f["torch"] else "",
            f"{f['solution'] / f['torch']:.2f}x" if f["torch"] else "",
        ]
        for f in figures
    ]
    serial = [
        f"{f['exercise']} ({f['lang']}): {f['vs_serial']:.2f}x its own run with {f['serial_args']}"
        for f in figures
        if f.get("vs_serial")
    ]
    return (
        "the solutions at the verdict size (first run), PyTorch timed beside them:\n"
        + table(rows, ["exercise", "lang", "size", "solution", "of roofline", "torch", "vs torch"])
        + "".join("\n" + line for line in serial)
    )


def calibration_entries(summary: dict, results: list[GradeResult]) -> dict:
    """`validate --calibrate`: each exercise that was as expected every run gives its first run's figures
    (the run that timed every size), as `kcourse calibrate` would measure them, without grading it again."""
    from grader.core.calibration import entries_from_result

    ok = {f"{row['exercise']}:{row['lang']}" for row in summary["rows"] if row["outcome"] == "ok"}
    entries: dict = {}
    for result in results:
        key = f"{result.exercise}:{result.lang}"
        if key in ok and key not in entries:
            entries.update(entries_from_result(key, result))
            ok.discard(key)  # the first run only: the repeats time the verdict size alone
    return entries


def format_summary(summary: dict) -> str:
    want = "pass" if summary["source"] == "solutions" else "fail"
    repeat = summary.get("repeat", 1)
    counts = {k: sum(r["outcome"] == k for r in summary["rows"]) for k in ("ok", "unexpected", "skipped")}
    columns = ["exercise", "lang", "status", "outcome", *(["runs"] if repeat > 1 else []), "verdict"]
    rows = [[r[c] for c in columns] for r in summary["rows"]]
    times = f" --repeat {repeat}" if repeat > 1 else ""
    title = f"validate --source {summary['source']}{times} (each must {want}{' every time' if times else ''}):\n"
    head = ["as expected" if c == "runs" else c for c in columns]
    figures = f"\n\n{format_figures(summary['figures'])}" if summary.get("figures") else ""
    return (
        title
        + table(rows, head)
        + f"\n{counts['ok']} ok, {counts['unexpected']} unexpected, {counts['skipped']} skipped"
        + figures
    )
