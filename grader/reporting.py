"""`kcourse report dayN|weekN|final`: jinja2 templates in templates/ rendered from the results store.

A week or day uses `templates/<key>_<name>.md.j2` when there is one (day1_env_check, day2_comparison,
day4_replace_op, day5_tuning, week11_summary) and `unit_report.md.j2` otherwise. Sections between
`<!-- notes:ID -->` and `<!-- /notes:ID -->` belong to the learner and survive re-rendering."""

from __future__ import annotations

import datetime as dt
import os
import re
from pathlib import Path
from typing import Any

import jinja2

from grader import store
from grader.discovery import ResolveError, pick_plan, suggest
from grader.paths import course_root, state_dir, templates_dir
from grader.plans import Plan, Unit, default_plan, load_plans
from grader.records import grade_from_dict

NOTES = re.compile(r"<!-- notes:(?P<id>[\w-]+) -->\n(?P<body>.*?)<!-- /notes:(?P=id) -->", re.S)
PLAN_SEARCH_ORDER = ("cuda-11-week", "triton-5-day", "transformer-ops", "challenge-100-day")


class ReportError(ValueError):
    pass


def reports_dir() -> Path:
    return state_dir() / "reports" if os.environ.get("KCOURSE_HOME") else course_root() / "reports"


def find_unit(key: str, plan_id: str | None) -> tuple[Plan, Unit]:
    plans = load_plans()
    if plan_id:
        candidates = [pick_plan(plans, plan_id)]
    else:
        candidates = [plans[p] for p in PLAN_SEARCH_ORDER if p in plans] + [p for p in plans.values() if p.id not in PLAN_SEARCH_ORDER]
    for plan in candidates:
        if plan.unit(key):
            return plan, plan.unit(key)
    keys = sorted({u.key for p in candidates for u in p.units} | {"final"})
    raise ReportError(f"no week or day {key!r} in {'plan ' + plan_id if plan_id else 'any plan'}." + suggest(key, keys))


def template_for(key: str) -> tuple[str, str]:
    """(template name, output file name) for a report key."""
    if key == "final":
        return "final_report.md.j2", "final_report.md"
    special = sorted(templates_dir().glob(f"{key}_*.md.j2"))
    if special:
        return special[0].name, special[0].name.removesuffix(".j2")
    return "unit_report.md.j2", f"{key}_report.md"


def context(unit: Unit | None = None, plan: Plan | None = None) -> dict[str, Any]:
    latest = {key: grade_from_dict(record) for key, record in store.latest_grades().items()}
    grades = sorted(latest.values(), key=lambda g: (g.exercise, g.lang))
    data: dict[str, Any] = {
        "env": store.latest("env"), "grades": grades, "generated": dt.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "unit": unit, "plan": plan, "default_plan": default_plan(load_plans()).id, "plots": [],
        "tunes": _sorted_values(store.latest_per_exercise("tune")),
        "profiles": _sorted_values(store.latest_per_exercise("profile")),
        "notebook_grades": [g for g in grades if g.source.endswith(".ipynb")],
    }
    if unit is not None:
        wanted = {(e.id, e.lang) for e in unit.exercises}
        data["unit_grades"] = [g for g in grades if (g.exercise, g.lang) in wanted or (g.exercise, None) in wanted]
        graded = {(g.exercise, g.lang) for g in data["unit_grades"]}
        data["ungraded"] = [e for e in unit.exercises if (e.id, e.lang) not in graded]
    return data


def _sorted_values(by_key: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [by_key[k] for k in sorted(by_key)]


def keep_notes(new_text: str, old_text: str) -> str:
    """Put the learner's notes from the previous rendering into the new one."""
    old = {m["id"]: m["body"] for m in NOTES.finditer(old_text)}
    return NOTES.sub(lambda m: f"<!-- notes:{m['id']} -->\n{old.get(m['id'], m['body'])}<!-- /notes:{m['id']} -->", new_text)


def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(templates_dir()), undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters["num"] = lambda v, fmt="{:.3g}": "—" if v is None else fmt.format(v)
    return env


def render(which: str, out_dir: Path | None = None, plan_id: str | None = None) -> Path:
    plan = unit = None
    if which != "final":
        try:
            plan, unit = find_unit(which, plan_id)
        except ResolveError as exc:
            raise ReportError(str(exc)) from None
    template_name, file_name = template_for(which)
    data = context(unit, plan)
    if template_name.startswith("day1") and data["env"] is None:
        raise ReportError("no environment check recorded yet: run `kcourse env-check` first")
    out_dir = out_dir or reports_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    if which in ("final", "week11") and data["grades"]:
        from grader import plots

        data["plots"] = plots.render_all(data["grades"], data["env"], out_dir)
    text = environment().get_template(template_name).render(**data)
    path = out_dir / file_name
    if path.exists():
        text = keep_notes(text, path.read_text())
    path.write_text(text)
    return path
