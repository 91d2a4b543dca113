"""`kcourse progress`: a plan as a checklist (day/week, topic, status) from the recorded results.

A status is the learner's best grade of the exercise (best_grades), so a failed scratch file does
not undo a pass; the latest attempt is named beside it when it differs: "passed (latest: failed, try.py)".
A pass whose speed was not checked (a CPU's grade, --quick) is "numerics passed, speed not checked": it is
never "passed" here, in the reports or the portfolio, and a unit holding one is in progress, not done. A
profile that does not show the learner's kernel, or a tuning that timed nothing (a CPU's), is recorded
but does not meet the unit's requirement either.
A unit's other requirements (plans.Requirement: an env check; a profile, tuning or comparison record; an
attention comparison; the unit's report or the portfolio with its notes written) are listed on its line too,
each with the command that meets it, so the line always says what counts for the unit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grader.core import store
from grader.core.discovery import pick_plan
from grader.core.plans import Plan, Requirement, Unit, load_plans
from grader.core.vocabulary import Code
from grader.reports.console import table
from grader.reports.report_files import (  # noqa: F401 (re-exported)
    PLACEHOLDER,
    answer,
    documented_plans,
    notes_written,
    portfolio_notes,
    reports_dir,
    template_for,
)

MARK = {"done": "[x]", "in progress": "[~]", "to do": "[ ]", "planned": "[-]"}
# Record kinds with a verdict of their own (grader/capstone): only a passed run of the learner's counts.
JUDGED_KINDS = {"capstone": "capstone run with your kernels", "block": "transformer block from your kernels"}
# A file of each language for `kcourse compare`'s example command.
SUFFIX = {"cuda": ".cu", "triton": ".py"}
# Requirements met by the learner's writing in a report's notes sections, not by a record.
NOTES_KINDS = ("report", "portfolio")


# A pass whose speed was not checked (no GPU, --quick, no solution to time against) is not a pass of the
# exercise: it is shown as this, ranks below a full pass, and never makes a unit "done".
SPEED_NOT_CHECKED = "numerics passed, speed not checked"
HONEST_ORDER = ("passed", SPEED_NOT_CHECKED, "skipped", "failed", "error")
# Why the speed was not checked, by the speed check's code (others: the check's message, shortened).
UNCHECKED_WHY = {"no_gpu": "no GPU", "quick": "--quick", "no_solution": "no solution or calibration to time against"}
NOTHING_TO_TIME = Code.NO_TIMED_SIZES  # an exercise without timed sizes: its pass is a whole pass


def _field(item: Any, name: str) -> Any:
    """A field of a stored record (a dict) or of a GradeResult / Check."""
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)


def speed_not_checked(grade: Any) -> str | None:
    """Why a passed grade's speed was not checked ("no GPU", "--quick", ...); None for a grade that did not
    pass, whose speed was checked, or whose exercise has no timed size. `grade`: a record or a GradeResult."""
    if _field(grade, "status") != "passed":
        return None
    for check in _field(grade, "checks") or []:
        details = _field(check, "details") or {}
        if (
            _field(check, "name") == "speed"
            and _field(check, "status") == "skipped"
            and details.get("code") != NOTHING_TO_TIME
        ):
            message = str(_field(check, "message") or "")
            return UNCHECKED_WHY.get(details.get("code")) or message.split(":")[0].split(";")[0][:60] or "skipped"
    return None


def honest_status(grade: Any) -> str:
    """The grade's status, but SPEED_NOT_CHECKED for a pass whose speed was skipped."""
    return SPEED_NOT_CHECKED if speed_not_checked(grade) else str(_field(grade, "status") or "unknown")


def honest_status_text(grade: Any) -> str:
    """honest_status with the reason: "numerics passed, speed not checked (no GPU)"."""
    why = speed_not_checked(grade)
    return f"{SPEED_NOT_CHECKED} ({why})" if why else honest_status(grade)


def honest_rank(record: dict[str, Any]) -> int:
    """Lower is better: a full pass, then a pass without a speed check, then store.STATUS_ORDER's others."""
    status = honest_status(record)
    return HONEST_ORDER.index(status) if status in HONEST_ORDER else len(HONEST_ORDER)


def best_grades(keep=lambda record: True, learner_only: bool = True) -> dict[str, dict[str, Any]]:
    """store.best_grades, ranked by honest_rank: a pass whose speed was checked beats a later pass on a
    machine that could not time it (the newest among equals, as there)."""
    found: dict[str, dict[str, Any]] = {}
    for record in store.read_all():
        key = store.exercise_key(record)
        if (
            key is None
            or record.get("kind") != "grade"
            or not keep(record)
            or (learner_only and record.get("source") in store.INSTRUCTOR_SOURCES)
        ):
            continue
        if key not in found or honest_rank(record) <= honest_rank(found[key]):
            found[key] = record
    return found


def attempt_name(record: dict[str, Any]) -> str:
    """The graded file's name ("try.py", "reduction.cu"); old records may name only their source."""
    name = Path(str(record.get("file") or record.get("source") or "")).name
    return name if name and name not in store.INSTRUCTOR_SOURCES + ("learner",) else "your exercise file"


def status_text(best: dict[str, Any], latest: dict[str, Any] | None) -> str:
    """The best grade's status, and the latest attempt's when that is a different, worse grade; a pass whose
    speed was not checked says so ("numerics passed, speed not checked (no GPU)"), never "passed"."""
    status = honest_status_text(best)
    if latest is None or latest == best:
        return status
    return f"{status} (latest: {honest_status_text(latest)}, {attempt_name(latest)})"


def grade_statuses() -> dict[str, str]:
    """exercise:lang -> status_text of the learner's own grades."""
    best, latest = best_grades(), store.latest_grades()
    return {key: status_text(record, latest.get(key)) for key, record in best.items()}


# --- A unit's requirements besides exercises ----------------------------------------------------------


def record_matches(requirement: Requirement, record: dict[str, Any]) -> bool:
    """A record of the required kind, of the named exercise and language where the plan names them (a
    comparison's lang is "cuda" or "cuda+triton": one of its languages is enough)."""
    if record.get("kind") != requirement.kind:
        return False
    if requirement.kind in JUDGED_KINDS:  # a run that passed, with the learner's own kernels
        return record.get("status") == "passed" and record.get("source") not in store.INSTRUCTOR_SOURCES
    if requirement.exercise and record.get("exercise") != requirement.exercise:
        return False
    return not requirement.lang or requirement.lang in str(record.get("lang") or "").split("+")


# Rows of torch.profiler's table that are not the learner's kernel: torch's operators and kernels, the CUDA
# runtime's calls, copies and fills (a CPU profile has only such rows: the interpreter runs no kernel of its own).
LIBRARY_ROWS = (
    "aten::",
    "at::",
    "void at::",
    "cuda",
    "Memcpy",
    "Memset",
    "cub::",
    "void cub::",
    "ProfilerStep",
    "Activity Buffer",
    "Lazy Function Loading",
    "Command Buffer",
    "std::",
    "<built-in",
)


def profile_kernels(record: dict[str, Any]) -> list[str]:
    """The learner's kernels a profile shows: rows with GPU time that are not torch's or the runtime's, and the
    kernels Nsight Compute measured."""
    names = [
        str(row.get("name") or "")
        for row in record.get("top") or []
        if isinstance(row, dict)
        and (row.get("device_us") or 0) > 0
        and not str(row.get("name") or "").startswith(LIBRARY_ROWS)
        and "at::native" not in str(row.get("name") or "")
    ]
    names += [
        str(row.get("kernel") or "") for row in record.get("ncu") or [] if isinstance(row, dict) and row.get("kernel")
    ]
    return list(dict.fromkeys(n for n in names if n))


def profile_shows_kernel(record: dict[str, Any]) -> bool:
    """Whether a `kcourse profile` record shows the learner's own kernel (not only torch's operators, as a CPU
    profile does). A record of an older kit without its table counts: there is nothing to judge it by."""
    if "learner_kernels" in record:
        return bool(record["learner_kernels"])
    if str(record.get("device") or "").startswith("CPU"):
        return False
    return bool(profile_kernels(record)) if "top" in record else True


def tune_timed(record: dict[str, Any]) -> bool:
    """Whether a `kcourse tune` record timed any configuration (on a CPU it only checks them, or compiles them)."""
    rows = record.get("rows")
    return any(isinstance(r, dict) and r.get("ms") for r in rows) if isinstance(rows, list) else True


# What a record of each kind must show to meet a requirement, and what the learner is told where it does not.
RECORD_SHOWS = {
    "profile": (
        profile_shows_kernel,
        "recorded, but it does not show your kernel (only torch's operators: "
        "on a CPU the interpreter runs it) — profile on a GPU",
    ),
    "tune": (tune_timed, "recorded, but nothing was timed (no GPU: configurations checked only) — tune on a GPU"),
}


def report_command(plan: Plan, unit: Unit) -> str:
    where = "" if plan.id in documented_plans(load_plans()) else f" --plan {plan.id}"
    return f"kcourse report {unit.key}{where}"


def report_notes(plan: Plan, unit: Unit) -> tuple[int, int]:
    """(notes sections written, sections) in the unit's report file; (0, 0) where it was never written.
    A section counts as written once it holds text besides the template's italic placeholder."""
    return notes_written(reports_dir() / template_for(unit.key, plan)[1])


def requirement_notes(requirement: Requirement, plan: Plan, unit: Unit) -> tuple[int, int]:
    """(written, sections) of what a notes requirement counts: the unit's report, or the portfolio's sections."""
    if requirement.kind == "portfolio":
        return portfolio_notes(requirement.section)
    return report_notes(plan, unit)


def requirement_state(requirement: Requirement, records: list[dict[str, Any]], plan: Plan, unit: Unit) -> str | None:
    """ "met"; "started" for a report (or portfolio) with some of its notes written; None."""
    if requirement.kind in NOTES_KINDS:
        written, sections = requirement_notes(requirement, plan, unit)
        return "met" if sections and written == sections else "started" if written else None
    matching = [r for r in records if record_matches(requirement, r)]
    shows = RECORD_SHOWS.get(requirement.kind, (lambda record: True, ""))[0]
    return "met" if any(shows(r) for r in matching) else "started" if matching else None


def requirement_name(requirement: Requirement) -> str:
    """ "env check", "profile of transpose (cuda)", "comparison (any exercise)", "your notes in the report"."""
    if requirement.kind == "env":
        return "env check"
    if requirement.kind == "report":
        return "your notes in the report"
    if requirement.kind == "portfolio":
        return (
            f"your portfolio's {requirement.section!r} notes" if requirement.section else "your notes in the portfolio"
        )
    if requirement.kind == "compare_attention":
        return "attention comparison"
    if requirement.kind in JUDGED_KINDS:
        return JUDGED_KINDS[requirement.kind]
    name = {"profile": "profile", "tune": "tuning", "compare": "comparison"}[requirement.kind]
    if not requirement.exercise:
        return f"{name} (any exercise)"
    return f"{name} of {requirement.exercise}" + (f" ({requirement.lang})" if requirement.lang else "")


def requirement_command(requirement: Requirement, plan: Plan, unit: Unit) -> str:
    """The command that records what the requirement asks for."""
    exercise = requirement.exercise or "EXERCISE"
    lang = f" --lang {requirement.lang}" if requirement.lang else ""
    if requirement.kind == "env":
        return "kcourse env-check"
    if requirement.kind == "report":
        return report_command(plan, unit)
    if requirement.kind == "portfolio":
        return "kcourse report portfolio"
    if requirement.kind == "compare_attention":
        return "kcourse compare attention"
    if requirement.kind in JUDGED_KINDS:
        return f"kcourse {requirement.kind}"
    if requirement.kind == "compare":
        suffix = SUFFIX.get(requirement.lang or "", ".cu")  # the files' suffix picks the language
        return f"kcourse compare {exercise} v1{suffix} v2{suffix}"
    return f"kcourse {requirement.kind} {exercise}{lang}"


def requirement_text(requirement: Requirement, state: str | None, plan: Plan, unit: Unit) -> str:
    """ "profile of transpose (cuda): recorded", or what is missing and the command that records it."""
    name = requirement_name(requirement)
    if requirement.kind in NOTES_KINDS:
        written, sections = requirement_notes(requirement, plan, unit)
        done = f"{written} of {sections} notes written" if sections else "not written"
        command = requirement_command(requirement, plan, unit)
        return f"{name}: {done}" + ("" if state == "met" else f" (`{command}`, then answer in the file)")
    if state == "met":
        return f"{name}: recorded"
    if state == "started" and requirement.kind in RECORD_SHOWS:  # a CPU's profile or tuning: not what counts
        return f"{name}: {RECORD_SHOWS[requirement.kind][1]} (`{requirement_command(requirement, plan, unit)}`)"
    return f"{name}: not yet (`{requirement_command(requirement, plan, unit)}`)"


# --- The checklist ------------------------------------------------------------------------------------


def unit_status(unit: Unit, grades: dict, states: list[str | None]) -> str:
    """done: every exercise passed (extras aside) with its speed checked, and every requirement is met
    (`states`, one per unit.requirements: requirement_state); planned: nothing in the kit counts for the unit yet."""
    statuses = [
        honest_status(grades[key]) if (key := f"{e.id}:{e.lang}") in grades else None for e in unit.required_exercises
    ]
    statuses += ["passed" if state == "met" else state for state in states]
    if not statuses:
        return "planned"
    if all(s == "passed" for s in statuses):
        return "done"
    return "in progress" if any(statuses) else "to do"


def what_counts(unit: Unit, labels: dict[str, str], texts: list[str]) -> str:
    """The exercises with their status, then the other requirements; the planned topics first where nothing
    counts yet (a planned unit may still offer an extra exercise)."""
    exercises = [
        f"{e.id} ({e.lang}{', extra' if e.extra else ''}): {labels.get(f'{e.id}:{e.lang}', 'not graded')}"
        for e in unit.exercises
    ]
    listed = ", ".join(exercises + texts)
    if unit.planned and not unit.required_exercises and not texts:
        return "; ".join(unit.planned) + (f" (gradable meanwhile: {listed})" if listed else "")
    return listed


def progress_rows(plan_id: str | None = None) -> tuple[str, list[list[str]]]:
    plan = pick_plan(load_plans(), plan_id)
    best, labels = best_grades(), grade_statuses()
    records = list(store.read_all())
    rows = []
    for unit in plan.units:
        states = [requirement_state(r, records, plan, unit) for r in unit.requirements]
        status = unit_status(unit, best, states)
        texts = [requirement_text(r, state, plan, unit) for r, state in zip(unit.requirements, states)]
        rows.append([MARK[status], unit.key, unit.title, status, what_counts(unit, labels, texts)])
    return plan.title, rows


def format_progress(plan_id: str | None = None, width: int | None = None) -> str:
    """`width`: a terminal's, to wrap the topic and what counts in (a unit's line was up to 250 characters)."""
    title, rows = progress_rows(plan_id)
    done = sum(r[3] == "done" for r in rows)
    unchecked = sorted(
        key.replace(":", " (") + ")" for key, record in best_grades().items() if speed_not_checked(record)
    )
    note = (
        (
            f"{len(unchecked)} exercise(s) passed numerics, speed not checked ({', '.join(unchecked[:4])}"
            f"{', ...' if len(unchecked) > 4 else ''}): grade them on a GPU to finish them\n"
        )
        if unchecked
        else ""
    )
    return (
        f"{title}: {done} of {len(rows)} done\n"
        + note
        + table(rows, ["", "unit", "topic", "status", "what counts"], width=width, wrap=(2, 4))
    )
