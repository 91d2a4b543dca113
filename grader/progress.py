"""`kcourse progress`: a plan as a checklist (day/week, topic, status) from the recorded results.

A status is the learner's best grade of the exercise (store.best_grades), so a failed scratch file does
not undo a pass; the latest attempt is named beside it when it differs: "passed (latest: failed, try.py)"."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grader import store
from grader.console import table
from grader.discovery import pick_plan
from grader.plans import Unit, load_plans

MARK = {"done": "[x]", "in progress": "[~]", "to do": "[ ]", "planned": "[-]"}


def attempt_name(record: dict[str, Any]) -> str:
    """The graded file's name ("try.py", "reduction.cu"); old records may name only their source."""
    name = Path(str(record.get("file") or record.get("source") or "")).name
    return name if name and name not in store.INSTRUCTOR_SOURCES + ("learner",) else "your exercise file"


def status_text(best: dict[str, Any], latest: dict[str, Any] | None) -> str:
    """The best grade's status, and the latest attempt's when that is a different, worse grade."""
    status = str(best.get("status") or "unknown")
    if latest is None or latest == best:
        return status
    return f"{status} (latest: {latest.get('status') or 'unknown'}, {attempt_name(latest)})"


def grade_statuses() -> dict[str, str]:
    """exercise:lang -> status_text of the learner's own grades."""
    best, latest = store.best_grades(), store.latest_grades()
    return {key: status_text(record, latest.get(key)) for key, record in best.items()}


def unit_status(unit: Unit, grades: dict, recorded: set[str]) -> str:
    """done: every exercise passed (extras aside) and every required record (env check, profile, tuning,
    comparison) exists."""
    statuses = [grades.get(f"{e.id}:{e.lang}", {}).get("status") for e in unit.required_exercises]
    statuses += ["passed" if kind in recorded else None for kind in unit.requires]
    if not statuses:
        return "planned"
    if all(s == "passed" for s in statuses):
        return "done"
    return "in progress" if any(statuses) else "to do"


def progress_rows(plan_id: str | None = None) -> tuple[str, list[list[str]]]:
    plan = pick_plan(load_plans(), plan_id)
    best, labels = store.best_grades(), grade_statuses()
    recorded = {r.get("kind") for r in store.read_all()}
    rows = []
    for unit in plan.units:
        status = unit_status(unit, best, recorded)
        exercises = ", ".join(f"{e.id} ({e.lang}{', extra' if e.extra else ''}): {labels.get(f'{e.id}:{e.lang}', 'not graded')}"
                              for e in unit.exercises)
        rows.append([MARK[status], unit.key, unit.title, status, exercises or "; ".join(unit.planned)])
    return plan.title, rows


def format_progress(plan_id: str | None = None) -> str:
    title, rows = progress_rows(plan_id)
    done = sum(r[3] == "done" for r in rows)
    return f"{title}: {done} of {len(rows)} done\n" + table(rows, ["", "unit", "topic", "status", "exercises"])
