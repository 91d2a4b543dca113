"""`kcourse list`: the plans, their weeks/days, exercises and the learner's status from the store."""

from __future__ import annotations

from grader import store
from grader.discovery import discover_exercises, pick_plan
from grader.plans import Plan, load_plans


def status_of(grades: dict, exercise_id: str, lang: str | None) -> str:
    keys = [k for k in grades if k.split(":")[0] == exercise_id and (lang is None or k.endswith(":" + lang))]
    if not keys:
        return "not graded"
    return grades[keys[-1]]["status"]


def format_plan(plan: Plan, grades: dict, exercises: dict) -> str:
    lines = [f"{plan.id}: {plan.title}" + (" (default)" if plan.default else "")]
    for unit in plan.units:
        lines.append(f"  {unit.key:<7} {unit.title}")
        for item in unit.exercises:
            known = "" if item.id in exercises else "  (missing exercise folder!)"
            lines.append(f"          - {item.id} [{item.lang or 'any'}]: {status_of(grades, item.id, item.lang)}{known}")
        for topic in unit.planned:
            lines.append(f"          · {topic} (planned)")
    return "\n".join(lines)


def format_plans(plan_id: str | None = None) -> str:
    plans, grades, exercises = load_plans(), store.latest_grades(), discover_exercises()
    chosen = [pick_plan(plans, plan_id)] if plan_id else list(plans.values())
    return "\n\n".join(format_plan(p, grades, exercises) for p in chosen)
