"""`kcourse progress`: a plan as a checklist (day/week, topic, status) from the recorded results."""

from __future__ import annotations

from grader import store
from grader.console import table
from grader.discovery import pick_plan
from grader.plans import Unit, load_plans

MARK = {"done": "[x]", "in progress": "[~]", "to do": "[ ]", "planned": "[-]"}


def unit_status(unit: Unit, grades: dict, recorded: set[str]) -> str:
    """done: every exercise passed and every required record (env check, profile, tuning) exists."""
    statuses = [grades.get(f"{e.id}:{e.lang}", {}).get("status") for e in unit.exercises]
    statuses += ["passed" if kind in recorded else None for kind in unit.requires]
    if not statuses:
        return "planned"
    if all(s == "passed" for s in statuses):
        return "done"
    return "in progress" if any(statuses) else "to do"


def progress_rows(plan_id: str | None = None) -> tuple[str, list[list[str]]]:
    plan = pick_plan(load_plans(), plan_id)
    grades = store.latest_grades()
    recorded = {r.get("kind") for r in store.read_all()}
    rows = []
    for unit in plan.units:
        status = unit_status(unit, grades, recorded)
        exercises = ", ".join(f"{e.id} ({e.lang}): {grades.get(f'{e.id}:{e.lang}', {}).get('status', 'not graded')}"
                              for e in unit.exercises)
        rows.append([MARK[status], unit.key, unit.title, status, exercises or "; ".join(unit.planned)])
    return plan.title, rows


def format_progress(plan_id: str | None = None) -> str:
    title, rows = progress_rows(plan_id)
    done = sum(r[3] == "done" for r in rows)
    return f"{title}: {done} of {len(rows)} done\n" + table(rows, ["", "unit", "topic", "status", "exercises"])
