"""`kcourse validate`: prove every solution passes and every stub does not (the instructor's CI check)."""

from __future__ import annotations

from grader.console import table
from grader.discovery import ResolveError, Target, all_targets, pick_plan, suggest
from grader.grade import grade
from grader.plans import load_plans
from grader.records import GradeResult


def expected(source: str, status: str) -> str:
    """ok / unexpected / skipped for one exercise's status under `source`."""
    if status == "skipped":
        return "skipped"
    if source == "solutions":
        return "ok" if status == "passed" else "unexpected"
    return "ok" if status in ("failed", "error") else "unexpected"


def select(only: set[str] | None = None, lang: str | None = None, plan_id: str | None = None,
           unit: str | None = None) -> list[Target]:
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
    return [t for t in targets if (not only or t.spec.id in only)
            and (not lang or lang in (t.variant.lang, t.variant.language))]  # add2 --lang cuda: jit, setup, cmake


def validate(targets: list[Target], source: str = "solutions", seed: int | None = None) -> tuple[dict, list[GradeResult]]:
    rows, results = [], []
    for target in targets:
        result = grade(target, source=source, seed=seed, record=False)
        results.append(result)
        rows.append({"exercise": target.spec.id, "lang": target.variant.lang, "status": result.status,
                     "outcome": expected(source, result.status), "verdict": result.verdict.splitlines()[0][:110]})
    return {"source": source, "rows": rows}, results


def format_summary(summary: dict) -> str:
    want = "pass" if summary["source"] == "solutions" else "fail"
    rows = [[r["exercise"], r["lang"], r["status"], r["outcome"], r["verdict"]] for r in summary["rows"]]
    counts = {k: sum(r["outcome"] == k for r in summary["rows"]) for k in ("ok", "unexpected", "skipped")}
    return (f"validate --source {summary['source']} (each must {want}):\n"
            + table(rows, ["exercise", "lang", "status", "outcome", "verdict"])
            + f"\n{counts['ok']} ok, {counts['unexpected']} unexpected, {counts['skipped']} skipped")
