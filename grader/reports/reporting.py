"""`kcourse report dayN|weekN|final|portfolio`: jinja2 templates in templates/ rendered from the results store
(the portfolio, every result in one document, is assembled in grader/reports/portfolio.py).

A week or day of the plans the README documents for report keys (the default plan's weeks, the 5-day
plan's days) uses `templates/<key>_<name>.md.j2` when there is one (day1_env_check, day2_comparison,
day4_replace_op, day5_tuning, week11_summary) and `unit_report.md.j2` otherwise; other plans' units use
`unit_report.md.j2` and are written as `<plan>_<key>_report.md`, so day3 of two plans never share a file.
Sections between `<!-- notes:ID -->` and `<!-- /notes:ID -->` belong to the learner and survive
re-rendering; a unit's plan `prompts` each get one. A unit's report and the final report also show the
latest `kcourse compare` of each of its exercises (a table and a bar chart); the summaries (week11_summary,
final) show every exercise's. The latest `kcourse compare attention` (tables of ms, TFLOP/s and extra
memory over sequence lengths, and their plots) is shown by week10_attention, the summaries, and any unit
whose plan requires it (`requires = ["compare_attention"]`).

Records are normalised here, once, before rendering (see "Records as the templates expect them"): the
store holds records written by every version of the kit, and a report must render from any of them."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
from pathlib import Path
from typing import Any, Callable

import jinja2

from grader.commands.compare import speed_cell
from grader.commands.compare_attention import KIND as ATTENTION_KIND
from grader.commands.compare_attention import markdown_table
from grader.commands.compare_attention import notes as attention_notes
from grader.core import store
from grader.core.discovery import ResolveError, pick_plan, suggest
from grader.core.errors import KcourseError
from grader.core.paths import templates_dir
from grader.core.plans import Plan, Unit, default_plan, load_plans
from grader.core.records import Check, GradeResult, Timing
from grader.reports.progress import (
    best_grades,
    honest_status_text,
    profile_kernels,
    profile_shows_kernel,
    status_text,
    tune_timed,
)
from grader.reports.report_files import FIVE_DAY_PLAN, NOTES, documented_plans, reports_dir, template_for  # noqa: F401

PORTFOLIO = "portfolio"  # the report key of grader/reports/portfolio.py
# The templates that show `kcourse compare` tables (with a bar chart each): a unit's report (week 10's extends
# it), the week-11 summary and the final report; the summaries show every exercise's, not one unit's.
COMPARISON_TEMPLATES = ("unit_report.md.j2", "week10_attention.md.j2", "week11_summary.md.j2", "final_report.md.j2")
SUMMARY_TEMPLATES = ("week11_summary.md.j2", "final_report.md.j2")
# The templates that always show `kcourse compare attention` (unit_report shows it where the unit requires it).
ATTENTION_TEMPLATES = ("week10_attention.md.j2", "week11_summary.md.j2", "final_report.md.j2")


class ReportError(KcourseError, ValueError):
    pass


# --- Which plan a report key means -----------------------------------------------------------------


def find_unit(key: str, plan_id: str | None) -> tuple[Plan, Unit]:
    """With --plan, that plan's unit. Without: the documented plans' unit where they have the key, else
    the one plan that has it; a key that several other plans share is a question, never a guess."""
    plans = load_plans()
    if plan_id:
        try:
            plan = pick_plan(plans, plan_id)
        except ResolveError as exc:
            raise ReportError(str(exc)) from None
        if plan.unit(key) is None:
            raise ReportError(f"plan {plan.id!r} has no {key!r}." + suggest(key, [u.key for u in plan.units]))
        return plan, plan.unit(key)
    having = [p for p in plans.values() if p.unit(key)]
    if not having:
        keys = sorted({u.key for p in plans.values() for u in p.units} | {"final", PORTFOLIO})
        raise ReportError(f"no week or day {key!r} in any plan." + suggest(key, keys))
    documented = [plans[p] for p in documented_plans(plans) if p in plans and plans[p].unit(key)]
    if documented or len(having) == 1:
        plan = (documented or having)[0]
        return plan, plan.unit(key)
    commands = " or ".join(f"`kcourse report {key} --plan {p.id}`" for p in having)
    raise ReportError(f"{key!r} is in several plans ({', '.join(p.id for p in having)}): say which, e.g. {commands}")


def resolution_note(which: str, plan_id: str | None) -> str | None:
    """ "day9 → plan challenge-100-day (...)": which plan a unit key went to, and how to get another's."""
    if which in ("final", PORTFOLIO):
        return None
    plan, _ = find_unit(which, plan_id)
    note = f"{which} → plan {plan.id} ({plan.title})"
    others = [p.id for p in load_plans().values() if p.id != plan.id and p.unit(which)]
    if others and not plan_id:
        note += (
            "; for another plan's " + which + ": " + " or ".join(f"`kcourse report {which} --plan {o}`" for o in others)
        )
    return note


# --- Records as the templates expect them ----------------------------------------------------------
# Old records lack fields, hold {} for a device, strings where numbers belong, statuses this version
# does not know and keys it never wrote. Each record is shaped here into every field its template
# reads, with a value of the type it expects; unknown keys ride along unused.


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _text_or(fallback: str) -> Callable[[Any], str]:
    return lambda value: _text(value) or fallback


def _optional_text(value: Any) -> str | None:
    return None if value in (None, "") else str(value)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _integer(value: Any) -> int:
    number = _number(value)
    return int(number) if number is not None and number == number and abs(number) != float("inf") else 0


def _mapping(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, dict) else {}


def _optional_flag(value: Any) -> bool | None:
    return None if value is None else bool(value)


def _shaped(value: Any, schema: dict[str, Callable[[Any], Any]]) -> dict[str, Any]:
    data = _mapping(value)
    return {**data, **{key: coerce(data.get(key)) for key, coerce in schema.items()}}


def _rows(schema: dict[str, Callable[[Any], Any]]) -> Callable[[Any], list[dict[str, Any]]]:
    return lambda value: (
        [_shaped(row, schema) for row in value if isinstance(row, dict)] if isinstance(value, list) else []
    )


def _optional(schema: dict[str, Callable[[Any], Any]]) -> Callable[[Any], dict[str, Any] | None]:
    """An empty or missing sub-record (a GPU, a training run) stays None, so `{% if %}` reads it as absent."""
    return lambda value: _shaped(value, schema) if isinstance(value, dict) and value else None


def _device_name(value: Any) -> str:
    name = value.get("name") if isinstance(value, dict) else value
    return _text(name) or "unknown device"


GPU = {
    "name": _text_or("unknown GPU"),
    "capability": _text_or("?"),
    "memory_gb": _text_or("?"),
    "multiprocessors": _text_or("?"),
    "copy_gbps": _number,
    "matmul_fp32_tflops": _number,
}
TRAINING_RUN = {"device": _text_or("?"), "seconds": _number, "per_epoch_s": _number, "final_loss": _number}
TRAINING = {"description": _text, "epochs": _text_or("?"), "runs": _rows(TRAINING_RUN), "speedup": _number}
ENV = {
    "python": _text_or("unknown"),
    "platform": _text_or("unknown"),
    "torch": _text_or("unknown"),
    "torch_cuda": _optional_text,
    "triton": _optional_text,
    "triton_interpreter": bool,
    "nvcc": _optional_text,
    "ninja": bool,
    "driver": _optional_text,
    "gpu": _optional(GPU),
    "ready": bool,
    "can_do": lambda v: [_text(line) for line in v] if isinstance(v, list) else [],
    "training": _optional(TRAINING),
}
TUNE_ROW = {
    "config": _text_or("?"),
    "ms": _number,
    "rate": _number,
    "roofline_pct": _number,
    "correct": _optional_flag,
    "error": _text,
    "resources": _text,
}
TUNE = {
    "exercise": _text_or("?"),
    "lang": _text_or("?"),
    "device": _device_name,
    "case": _text,
    "unit": _text,
    "rows": _rows(TUNE_ROW),
    "best": _optional({"config": _text_or("?"), "ms": _number}),
    "speedup": _number,
}
PROFILE_ROW = {"name": _text_or("?"), "calls": _text, "device_us": _number, "cpu_us": _number}
NCU_ROW = {"kernel": _text, "metric": _text, "value": _text, "unit": _text}
PROFILE = {
    "exercise": _text_or("?"),
    "lang": _text_or("?"),
    "device": _device_name,
    "case": _text,
    "calls": _text,
    "trace": _text_or("(no trace recorded)"),
    "top": _rows(PROFILE_ROW),
    "ncu": _rows(NCU_ROW),
    "ncu_note": _text,
}
COMPARE_ROW = {
    "label": _text_or("?"),
    "file": _text,
    "exercise": _text,
    "lang": _text,
    "status": _text_or("unknown"),
    "verdict": _text,
    "numerics": _text_or("?"),
    "speed": _text_or("not run"),
    "case": _text,
    "unit": _text,
    "ms": _number,
    "rate": _number,
    "roofline_pct": _number,
    "ratio": _number,
    "solution_ms": _number,
    "solution_rate": _number,
    "torch_ms": _number,
    "torch_rate": _number,
    "extra_bytes": _number,
}
COMPARE = {
    "exercise": _text_or("?"),
    "lang": _text_or("?"),
    "device": _device_name,
    "seed": _text_or("?"),
    "case": _text,
    "unit": _text,
    "rows": _rows(COMPARE_ROW),
    "at": lambda v: _when(_number(v)),
    "plot": _text,
}
ATTENTION_POINT = {
    "N": _integer,
    "ms": _number,
    "tflops": _number,
    "extra_bytes": _number,
    "vs_sdpa": _number,
    "max_abs_diff": _number,
    "agrees": _optional_flag,
    "error": _text,
}
ATTENTION_ROW = {
    "label": _text_or("?"),
    "exercise": _text,
    "lang": _text,
    "file": _text,
    "status": _text_or("unknown"),
    "reason": _text,
    "points": _rows(ATTENTION_POINT),
}
ATTENTION = {
    "device": _device_name,
    "seed": _text_or("?"),
    "source": _text,
    "B": _text_or("?"),
    "H": _text_or("?"),
    "d": _text_or("?"),
    "dtype": _text_or("?"),
    "matmul_tflops": _number,
    "at": lambda v: _when(_number(v)),
    "lengths": lambda v: [_integer(n) for n in v] if isinstance(v, list) else [],
    "implementations": _rows(ATTENTION_ROW),
    "sdpa": _rows(ATTENTION_POINT),
    "plots": lambda v: [_shaped(p, {"title": _text, "file": _text}) for p in v] if isinstance(v, list) else [],
}

# Grade records are dataclasses (records.py): coerce each field by its annotation, so a field added
# there later is shaped without a change here.
BY_ANNOTATION: dict[str, Callable[[Any], Any]] = {
    "str": _text,
    "str | None": _optional_text,
    "int": _integer,
    "float": lambda v: _number(v) or 0.0,
    "float | None": _number,
    "dict[str, Any]": _mapping,
    "dict[str, float]": _mapping,
    "list[Check]": lambda v: [_dataclass(Check, c) for c in v if isinstance(c, dict)] if isinstance(v, list) else [],
    "list[Timing]": lambda v: [_dataclass(Timing, t) for t in v if isinstance(t, dict)] if isinstance(v, list) else [],
    "list[str]": lambda v: [_text(item) for item in v] if isinstance(v, list) else [],  # kit_changes
}


def _dataclass(cls: type, data: dict[str, Any]) -> Any:
    values = {}
    for field in dataclasses.fields(cls):
        required = field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        if field.name in data or required:
            values[field.name] = BY_ANNOTATION.get(str(field.type), lambda v: v)(data.get(field.name))
    return cls(**values)


def grade_record(record: dict[str, Any]) -> GradeResult:
    """A stored grade as the templates and plots expect it, whatever version of the kit wrote it."""
    grade = _dataclass(GradeResult, record)
    grade.lang = grade.lang or "unknown"  # the store's key for a record without one (store.exercise_key)
    grade.status = grade.status or "unknown"
    grade.verdict = grade.verdict or "(no verdict recorded)"
    device = record.get("device")
    grade.device = {**_mapping(device), "name": _text(device.get("name") if isinstance(device, dict) else device)}
    return grade


def _when(timestamp: float | None) -> str:
    try:
        return dt.datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M") if timestamp else ""
    except (OverflowError, OSError, ValueError):
        return ""


def env_record(record: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if record is None else _shaped(record, ENV)


def _placed(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A sweep's points that name a length (one without has no column to go in)."""
    return [p for p in points if p["N"] > 0]


def attention_record(record: dict[str, Any] | None) -> dict[str, Any] | None:
    """The latest `kcourse compare attention`, shaped; its lengths from its points where it names none."""
    if record is None:
        return None
    shaped = _shaped(record, ATTENTION)
    for row in shaped["implementations"]:
        row["points"] = _placed(row["points"])
    shaped["sdpa"] = _placed(shaped["sdpa"])
    shaped["lengths"] = [n for n in shaped["lengths"] if n > 0]
    if not shaped["lengths"]:
        points = [p for r in shaped["implementations"] for p in r["points"]] + shaped["sdpa"]
        shaped["lengths"] = sorted({p["N"] for p in points})
    return shaped


# --- Rendering ---------------------------------------------------------------------------------------


def context(unit: Unit | None = None, plan: Plan | None = None) -> dict[str, Any]:
    """Grades are the learner's best per exercise (progress.best_grades: a pass is not hidden by a later
    failed try, nor a timed pass by a later untimed one); `statuses` adds the latest attempt where it differs,
    and says "numerics passed, speed not checked" for a pass whose speed was skipped."""
    best, latest = best_grades(), store.latest_grades()
    grades = sorted((grade_record(r) for r in best.values()), key=lambda g: (g.exercise, g.lang))
    notebooks = best_grades(keep=lambda r: str(r.get("source", "")).endswith(".ipynb"), learner_only=False)
    data: dict[str, Any] = {
        "env": env_record(store.latest("env")),
        "grades": grades,
        "generated": dt.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "unit": unit,
        "plan": plan,
        "default_plan": default_plan(load_plans()).id,
        "plots": [],
        "statuses": {key: status_text(record, latest.get(key)) for key, record in best.items()},
        "tunes": [tune_view(r) for r in _sorted_values(store.latest_per_exercise("tune"))],
        "profiles": [profile_view(r) for r in _sorted_values(store.latest_per_exercise("profile"))],
        "notebook_grades": [grade_record(r) for r in _sorted_values(notebooks)],
        "notebook_statuses": {key: honest_status_text(record) for key, record in notebooks.items()},
    }
    data["comparisons"] = comparisons(unit)
    data["attention"] = attention_record(store.latest(ATTENTION_KIND))
    data["not_graded"] = _not_graded(best)
    if unit is not None:
        wanted = {(e.id, e.lang) for e in unit.exercises}
        data["unit_grades"] = [g for g in grades if (g.exercise, g.lang) in wanted or (g.exercise, None) in wanted]
        graded = {(g.exercise, g.lang) for g in data["unit_grades"]}
        data["ungraded"] = [e for e in unit.exercises if (e.id, e.lang) not in graded]
    return data


def tune_view(record: dict[str, Any]) -> dict[str, Any]:
    """A tuning, shaped, with `timed`: False where no configuration was timed (a CPU's: checked only)."""
    return {**_shaped(record, TUNE), "timed": tune_timed(record)}


def profile_view(record: dict[str, Any]) -> dict[str, Any]:
    """A profile, shaped, with `shows_kernel` and the learner's kernels it shows (none on a CPU)."""
    return {
        **_shaped(record, PROFILE),
        "shows_kernel": profile_shows_kernel(record),
        "learner_kernels": record.get("learner_kernels") or profile_kernels(record),
    }


def comparisons(unit: Unit | None) -> list[dict[str, Any]]:
    """The latest `kcourse compare` of each exercise the unit holds (every one for the final report)."""
    found = [_shaped(r, COMPARE) for r in _sorted_values(store.latest_per_exercise("compare"))]
    if unit is None:
        return found
    wanted = {(e.id, e.lang) for e in unit.exercises}
    return [c for c in found if any((c["exercise"], lang) in wanted for lang in c["lang"].split("+"))]


def _not_graded(best: dict[str, dict[str, Any]]) -> list[str]:
    """Every exercise version of the kit without a grade of the learner's ("softmax (triton)")."""
    from grader.core.discovery import all_targets
    from grader.core.spec import SpecError

    try:
        targets = all_targets()
    except SpecError:  # a broken spec is `kcourse validate`'s to report, not a reason to lose the report
        return []
    return sorted(f"{t.spec.id} ({t.variant.lang})" for t in targets if t.key not in best)


def shows_attention(template_name: str, unit: Unit | None) -> bool:
    return template_name in ATTENTION_TEMPLATES or (unit is not None and ATTENTION_KIND in unit.requires)


def _sorted_values(by_key: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [by_key[k] for k in sorted(by_key)]


def keep_notes(new_text: str, old_text: str) -> str:
    """Put the learner's notes from the previous rendering into the new one."""
    old = {m["id"]: m["body"] for m in NOTES.finditer(old_text)}
    return NOTES.sub(
        lambda m: f"<!-- notes:{m['id']} -->\n{old.get(m['id'], m['body'])}<!-- /notes:{m['id']} -->", new_text
    )


def number_text(value: Any, fmt: str = "{:.3g}") -> str:
    """The `num` filter: "—" for a figure not measured."""
    if value is None:
        return "—"
    try:
        return fmt.format(value)
    except (TypeError, ValueError):
        return str(value)


def environment() -> jinja2.Environment:
    """The reports' jinja2 environment, one per templates folder: it keeps each template compiled (compiling the
    templates took two thirds of a render) and recompiles one whose file changed."""
    return _environment(templates_dir())


@functools.lru_cache(maxsize=4)
def _environment(folder: Path) -> jinja2.Environment:
    # StrictUndefined stays: a template reading a field the normalisation above does not provide is a
    # bug to catch in the tests, not a blank to ship to the learner.
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(folder),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["num"] = number_text
    env.filters["speed_cell"] = speed_cell  # a comparison's figure, or "skipped" where timing could not run
    env.filters["attention_table"] = markdown_table  # one metric of `kcourse compare attention` over the lengths
    env.filters["attention_notes"] = attention_notes  # what was skipped, stopped early or strayed from SDPA
    return env


def write_report(path: Path, text: str) -> Path:
    """Write a rendered report, keeping the learner's notes of the file it replaces."""
    if path.exists():
        text = keep_notes(text, path.read_text())
    path.write_text(text)
    return path


def render(which: str, out_dir: Path | None = None, plan_id: str | None = None) -> Path:
    """A plan's unit report, or the final report (the portfolio is portfolio.render's: it builds on this module)."""
    if which == PORTFOLIO:
        raise ReportError("the portfolio is rendered by grader.reports.portfolio.render (kcourse report portfolio)")
    plan, unit = (None, None) if which == "final" else find_unit(which, plan_id)
    template_name, file_name = template_for(which, plan)
    data = context(unit, plan)
    if template_name.startswith("day1") and data["env"] is None:
        raise ReportError("no environment check recorded yet: run `kcourse env-check` first")
    out_dir = out_dir or reports_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    if template_name in ("final_report.md.j2", "week11_summary.md.j2") and data["grades"]:
        from grader.reports import plots

        data["plots"] = plots.render_all(data["grades"], data["env"], out_dir)
    if template_name in SUMMARY_TEMPLATES:
        data["comparisons"] = comparisons(None)
    if template_name in COMPARISON_TEMPLATES:
        from grader.reports import plots

        for item in data["comparisons"]:
            item["plot"] = plots.comparison_file(item, out_dir)
    if unit is not None:
        from grader.reports import plots

        data["maps"] = plots.failure_maps(data["unit_grades"], out_dir)
    data["show_attention"] = shows_attention(template_name, unit)
    if data["show_attention"] and data["attention"]:
        from grader.reports import plots

        data["attention"]["plots"] = plots.attention_charts(data["attention"], out_dir)
    return write_report(out_dir / file_name, environment().get_template(template_name).render(**data))
