"""`kcourse list`: a plan, its weeks/days, exercises and the learner's status from the store.

One plan at a time (the default plan unless --plan), since the 100-day plan alone is hundreds of lines;
--all prints every plan. A status is the learner's best grade, with the latest when it differs."""

from __future__ import annotations

from grader.core.discovery import discover_exercises, pick_plan
from grader.core.plans import Plan, load_plans
from grader.reports.progress import grade_statuses, requirement_command, requirement_name


def status_of(statuses: dict[str, str], exercise_id: str, lang: str | None) -> str:
    """The exercise's status; a plan entry with no language takes the last of its languages graded."""
    keys = [k for k in statuses if k.split(":")[0] == exercise_id and (lang is None or k.endswith(":" + lang))]
    return statuses[keys[-1]] if keys else "not graded"


def format_plan(plan: Plan, statuses: dict[str, str], exercises: dict) -> str:
    lines = [f"{plan.id}: {plan.title}" + (" (default)" if plan.default else "")]
    for unit in plan.units:
        lines.append(f"  {unit.key:<7} {unit.title}")
        for item in unit.exercises:
            known = "" if item.id in exercises else "  (missing exercise folder!)"
            extra = " (extra)" if item.extra else ""
            lines.append(
                f"          - {item.id} [{item.lang or 'any'}]{extra}: {status_of(statuses, item.id, item.lang)}{known}"
            )
        for requirement in unit.requirements:  # records, not grades: `kcourse progress` says whether they exist
            lines.append(
                f"          + {requirement_name(requirement)}: `{requirement_command(requirement, plan, unit)}`"
            )
        for topic in unit.planned:
            lines.append(f"          · {topic} (planned)")
    return "\n".join(lines)


def other_plans_line(plans: dict[str, Plan], shown: Plan) -> str:
    """Where the plans not shown are, and the command that shows them."""
    others = [f"{p.id} ({p.title})" for p in plans.values() if p.id != shown.id]
    if not others:
        return ""
    return (
        f"\n\nOther plans: {'; '.join(others)}.\n"
        "Show one with `kcourse list --plan PLAN`, or all with `kcourse list --all`."
    )


def format_plans(plan_id: str | None = None, show_all: bool = False) -> str:
    plans, statuses, exercises = load_plans(), grade_statuses(), discover_exercises()
    if show_all:
        return "\n\n".join(format_plan(p, statuses, exercises) for p in plans.values())
    plan = pick_plan(plans, plan_id)
    return format_plan(plan, statuses, exercises) + other_plans_line(plans, plan)
