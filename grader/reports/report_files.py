"""Where reports live and what of them progress reads: each report's file, the plans a bare report key means,
the learner's notes sections (written or still the template's placeholder), the portfolio's file. Below
reporting, progress and portfolio, which all use it; it renders nothing."""

from __future__ import annotations

import os
import re
from pathlib import Path

from grader.core.paths import course_root, state_dir, templates_dir
from grader.core.plans import PORTFOLIO_SECTIONS, Plan, default_plan, load_plans

NOTES = re.compile(r"<!-- notes:(?P<id>[\w-]+) -->\n(?P<body>.*?)<!-- /notes:(?P=id) -->", re.S)
# README: "`kcourse report dayN` for each day of the 5-day plan, `weekN` for each week of the 11-week plan".
FIVE_DAY_PLAN = "triton-5-day"
PLACEHOLDER = "(this part is yours"  # in the italic line templates/_macros.j2 `notes` puts in an empty section
FILE_NAME = "portfolio.md"  # the portfolio (portfolio.py renders it)


def reports_dir() -> Path:
    return state_dir() / "reports" if os.environ.get("KCOURSE_HOME") else course_root() / "reports"


def documented_plans(plans: dict[str, Plan]) -> list[str]:
    """The plans a bare key resolves to first, in order: the default plan, then the 5-day plan."""
    return [default_plan(plans).id, FIVE_DAY_PLAN] if plans else []


def template_for(key: str, plan: Plan | None = None) -> tuple[str, str]:
    """(template name, output file name) for a report key of `plan`."""
    if key == "final":
        return "final_report.md.j2", "final_report.md"
    if plan is not None and plan.id not in documented_plans(load_plans()):
        return "unit_report.md.j2", f"{plan.id}_{key}_report.md"
    special = sorted(templates_dir().glob(f"{key}_*.md.j2"))
    if special:
        return special[0].name, special[0].name.removesuffix(".j2")
    return "unit_report.md.j2", f"{key}_report.md"


def answer(body: str) -> str:
    """A notes section's text without the template's italic placeholder: "" until the learner writes."""
    return "\n".join(line for line in body.splitlines() if PLACEHOLDER not in line).strip()


def notes_written(path: Path, keep=lambda section_id: True) -> tuple[int, int]:
    """(notes sections written, sections) in a report file, among the sections whose id `keep` accepts;
    (0, 0) where the file was never written."""
    if not path.exists():
        return 0, 0
    bodies = [m["body"] for m in NOTES.finditer(path.read_text()) if keep(m["id"])]
    return sum(bool(answer(b)) for b in bodies), len(bodies)


def section_id(section: str) -> str:
    return f"portfolio-{section}"


def portfolio_path() -> Path:
    return reports_dir() / FILE_NAME


def portfolio_notes(section: str | None = None) -> tuple[int, int]:
    """(written, sections) of the portfolio's notes: every section, or the one named (progress.py's check)."""
    wanted = {section_id(s) for s in ([section] if section else PORTFOLIO_SECTIONS)}
    return notes_written(portfolio_path(), lambda found: found in wanted)
