"""`kcourse report portfolio`: every result of the learner's in one Markdown document (reports/portfolio.md)
with its plots beside it, for days 97-100 of the 100-day plan (a retrospective, then a portfolio to share).

It gathers what the other reports show, through the same pipeline (reporting.context, plots, _macros.j2):
the best passing grade of each exercise and language, every `kcourse compare`, the attention sweep, the
learner's best `kcourse block` and `kcourse capstone` runs (grader/capstone/report.py's tables and loss
plot), the profiles and tunings, and the notes the learner wrote in every other report (quoted, so they
follow the reports they belong to). Its own notes sections (plans.PORTFOLIO_SECTIONS) ask the
retrospective's and the portfolio's questions; a plan may require them (`portfolio`, `portfolio:projects`).
A piece not recorded yet is said plainly, with the command that records it."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from grader.capstone import report as capstone_report
from grader.capstone.run import BLOCK, CAPSTONE
from grader.core import store
from grader.core.plans import PORTFOLIO_SECTIONS
from grader.reports import plots
from grader.reports.progress import honest_status, speed_not_checked
from grader.reports.report_files import (  # noqa: F401 (re-exported)
    FILE_NAME,
    NOTES,
    answer,
    notes_written,
    portfolio_notes,
    portfolio_path,
    reports_dir,
    section_id,
)
from grader.reports.reporting import context, environment, write_report

TEMPLATE = "portfolio_report.md.j2"
LOSS_PLOT = "portfolio_capstone_loss.png"  # not capstone_loss.png: that one is the latest run's, whoever's
# Each notes section (plans.PORTFOLIO_SECTIONS): (heading, question). In the file as <!-- notes:portfolio-ID -->.
SECTIONS = {
    "learned": (
        "What you learned, and your key results",
        "What you learned, and your main achievements with their figures (the tables below have them)",
    ),
    "hard": ("What was hard, and how you solved it", "The hardest problems you met, and how you solved each"),
    "projects": (
        "Your projects",
        "Which projects this portfolio holds, how they are organised, what each shows, and where their code "
        "and documentation are",
    ),
    "sharing": ("Sharing it, and what comes next", "Where and how you will share this work, and what you will do next"),
}
# A record the capstone's report functions cannot read (another version of the kit's): said, never a crash.
UNREADABLE = (KeyError, TypeError, AttributeError, ValueError, IndexError)


# --- The learner's runs of the block and the capstone ----------------------------------------------------


def best_run(kind: str) -> dict[str, Any] | None:
    """The learner's own best run of `kind` (store.STATUS_ORDER; the newest among equals): a pass is not
    hidden by a later failed try, and a run of the kit's solutions is not the learner's."""
    found = None
    for record in store.read_all():
        if record.get("kind") != kind or record.get("source") in store.INSTRUCTOR_SOURCES:
            continue
        if found is None or store.status_rank(record.get("status")) <= store.status_rank(found.get("status")):
            found = record
    return found


def _checks(record: dict[str, Any]) -> list[dict[str, str]]:
    return [
        {key: str(c.get(key, "?")) for key in ("name", "status", "message")}
        for c in record.get("checks") or []
        if isinstance(c, dict)
    ]


def _run_view(
    record: dict[str, Any] | None, build: Callable[[dict[str, Any]], dict[str, Any]]
) -> dict[str, Any] | None:
    """A run's tables for the template; {"unreadable": True} for a record the report functions cannot read."""
    if record is None:
        return None
    base = {
        "status": str(record.get("status") or "unknown"),
        "verdict": str(record.get("verdict") or ""),
        "unreadable": False,
    }
    try:
        return {**base, **build(record), "checks": _checks(record)}
    except UNREADABLE:
        return {**base, "unreadable": True}


def capstone_view(out_dir: Path) -> dict[str, Any] | None:
    def build(record: dict[str, Any]) -> dict[str, Any]:
        plot = capstone_report.loss_plot(record, out_dir / LOSS_PLOT)
        return {
            "summary": capstone_report.format_capstone(record).splitlines()[0],
            "run_header": capstone_report.RUN_HEADER,
            "runs": capstone_report.run_rows(record),
            "operation_header": capstone_report.OPERATION_HEADER,
            "operations": capstone_report.operation_rows(record["choices"]),
            "plot": plot.name if plot else "",
        }

    return _run_view(best_run(CAPSTONE), build)


def block_view() -> dict[str, Any] | None:
    def build(record: dict[str, Any]) -> dict[str, Any]:
        result = record.get("result") or {}
        return {
            "summary": capstone_report.format_block(record).splitlines()[0],
            "header": capstone_report.BLOCK_HEADER,
            "rows": capstone_report.block_rows(record),
            "ms": result.get("ms"),
            "torch_ms": result.get("torch_ms"),
        }

    return _run_view(best_run(BLOCK), build)


# --- The notes of the learner's other reports --------------------------------------------------------------


def _natural(name: str) -> list:
    """day2 before day10 (even and odd places of the split are always text and numbers: comparable)."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _heading_before(text: str, index: int) -> str:
    headings = re.findall(r"^#+ (.+)$", text[:index], re.M)
    return headings[-1].strip() if headings else "Notes"


def quoted(text: str) -> str:
    """As a Markdown block quote: the learner's headings and lists stay inside their report's quote."""
    return "\n".join(f"> {line}" if line.strip() else ">" for line in text.splitlines())


def answered_notes(path: Path) -> list[dict[str, str]]:
    """[{heading, text}] of every notes section the learner answered in one report."""
    text = path.read_text(errors="replace")
    return [
        {"heading": _heading_before(text, m.start()), "text": quoted(answer(m["body"]))}
        for m in NOTES.finditer(text)
        if answer(m["body"])
    ]


def collected_notes(folders: list[Path]) -> list[dict[str, Any]]:
    """[{report, sections}] for each other report in the folders with a notes section answered."""
    paths = {
        p.resolve(): p for folder in folders if folder.is_dir() for p in folder.glob("*.md") if p.name != FILE_NAME
    }
    found = []
    for path in sorted(paths.values(), key=lambda p: _natural(p.name)):
        sections = answered_notes(path)
        if sections:
            found.append({"report": path.name, "sections": sections})
    return found


# --- Assembly ----------------------------------------------------------------------------------------------


def highlights(passed: list) -> dict[str, Any]:
    """At a glance: how many exercises passed per language, the one closest to its roofline and the one
    fastest against the solution (each at its largest timed size, as the table shows them)."""
    timed = [(g, g.timings[-1]) for g in passed if g.timings]
    by_roofline = [(g, t) for g, t in timed if t.roofline_pct is not None]
    by_ratio = [(g, t) for g, t in timed if t.ratio is not None]
    return {
        "languages": sorted(Counter(g.lang for g in passed).items()),
        "top_roofline": max(by_roofline, key=lambda gt: gt[1].roofline_pct, default=None),
        "top_ratio": max(by_ratio, key=lambda gt: gt[1].ratio, default=None),
    }


def add_charts(data: dict[str, Any], out_dir: Path) -> None:
    """The other reports' plots, beside the portfolio (the same files `kcourse report final` writes)."""
    data["plots"] = plots.render_all(data["grades"], data["env"], out_dir) if data["grades"] else []
    for item in data["comparisons"]:
        item["plot"] = plots.comparison_file(item, out_dir)
    if data["attention"]:
        data["attention"]["plots"] = plots.attention_charts(data["attention"], out_dir)


def portfolio_context(out_dir: Path) -> dict[str, Any]:
    """reporting.context (best grades, comparisons, attention, tunes, profiles) and the portfolio's own parts."""
    data = context()
    # a pass whose speed was not checked (a CPU's grade) is not a passed kernel here: it is listed with the others
    data["passed"] = [g for g in data["grades"] if honest_status(g) == "passed"]
    data["unpassed"] = [g for g in data["grades"] if honest_status(g) != "passed"]
    data["unchecked"] = [g for g in data["grades"] if speed_not_checked(g)]
    add_charts(data, out_dir)
    data.update(
        highlights=highlights(data["passed"]),
        capstone=capstone_view(out_dir),
        block=block_view(),
        other_notes=collected_notes([out_dir, reports_dir()]),
        sections={key: (section_id(key), *SECTIONS[key]) for key in PORTFOLIO_SECTIONS},
    )
    return data


def render(out_dir: Path | None = None) -> Path:
    """Write reports/portfolio.md (and its plots), keeping the learner's notes of the previous rendering."""
    out_dir = out_dir or reports_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    text = environment().get_template(TEMPLATE).render(**portfolio_context(out_dir))
    return write_report(out_dir / FILE_NAME, text)
