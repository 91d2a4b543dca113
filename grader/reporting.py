"""`kcourse report day1|final|...`: jinja2 templates in templates/ rendered from the results store."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

import jinja2

from grader import store
from grader.paths import course_root, state_dir, templates_dir
from grader.records import grade_from_dict

# report name -> (template, output file)
REPORTS = {
    "day1": ("day1_env_check.md.j2", "day1_env_check.md"),
    "final": ("final_report.md.j2", "final_report.md"),
}


class ReportError(ValueError):
    pass


def reports_dir() -> Path:
    return state_dir() / "reports" if os.environ.get("KCOURSE_HOME") else course_root() / "reports"


def context() -> dict[str, Any]:
    grades = {key: grade_from_dict(record) for key, record in store.latest_grades().items()}
    return {
        "env": store.latest("env"),
        "grades": sorted(grades.values(), key=lambda g: (g.exercise, g.lang)),
        "generated": dt.datetime.now().strftime("%Y-%m-%d %H:%M"),
    }


def render(which: str, out_dir: Path | None = None) -> Path:
    if which not in REPORTS:
        raise ReportError(f"unknown report {which!r}; known: {', '.join(REPORTS)}")
    template_name, file_name = REPORTS[which]
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(templates_dir()), undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters["num"] = lambda v, fmt="{:.3g}": "—" if v is None else fmt.format(v)
    data = context()
    if which == "day1" and data["env"] is None:
        raise ReportError("no environment check recorded yet: run `kcourse env-check` first")
    text = env.get_template(template_name).render(**data)
    out_dir = out_dir or reports_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / file_name
    path.write_text(text)
    return path
