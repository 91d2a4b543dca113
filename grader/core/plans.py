"""Learning plans (plans/*.toml): weeks or days mapped to exercise ids, with topics still planned.

A unit may also carry what its source document lists besides exercises: the learning content (`topics`),
questions to answer in the unit's report (`prompts`: each becomes a notes section of that report) and
reading. An exercise marked `extra = true` is listed and gradable in the unit but not needed to finish it.

`requires` names what else finishes a unit, for units whose topic is not a kernel (an install, profiling
practice, a review): a record kind (`env`, `profile`, `tune`, `compare`, `compare_attention`: any such record),
the middle three narrowed to one exercise and language with `KIND:EXERCISE[:LANG]` ("profile:transpose",
"compare:softmax:cuda"),
`report`: the unit's own report written with every notes section answered, or `portfolio`: `kcourse report
portfolio`'s notes sections answered, all of them or one (`portfolio:projects`) (grader/reports/progress.py checks)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from grader.core.errors import KcourseError
from grader.core.paths import plans_dir
from grader.core.spec import tomllib

# What env-check, profile, tune, compare and `compare attention` record (store kinds).
RECORD_KINDS = ("env", "profile", "tune", "compare", "compare_attention", "capstone", "block")
REQUIREMENT_KINDS = RECORD_KINDS + ("report", "portfolio")
UNQUALIFIED_KINDS = (
    "env",
    "compare_attention",
    "report",
    "capstone",
    "block",
)  # records of no one exercise: nothing to narrow
# The notes sections of `kcourse report portfolio` (grader/reports/portfolio.py asks each one's question): a plan
# requires them all ("portfolio") or one ("portfolio:projects").
PORTFOLIO_SECTIONS = ("learned", "hard", "projects", "sharing")


class PlanError(KcourseError, ValueError):
    pass


@dataclass(frozen=True)
class Requirement:
    """One `requires` entry: a kind of record, of any exercise or of one (and one language), the report, or
    the portfolio's notes (all, or one `section`)."""

    kind: str
    exercise: str | None = None
    lang: str | None = None
    section: str | None = None

    @classmethod
    def parse(cls, text: str) -> Requirement:
        parts = str(text).split(":")
        if parts[0] == "portfolio":
            return cls._portfolio(text, parts[1:])
        kind, exercise, lang = (parts + [None, None])[:3]
        if (
            kind not in REQUIREMENT_KINDS
            or len(parts) > 3
            or "" in parts
            or (kind in UNQUALIFIED_KINDS and len(parts) > 1)
        ):
            raise PlanError(
                f"requirement {text!r}: write one of {', '.join(REQUIREMENT_KINDS)}, or KIND:EXERCISE[:LANG] "
                'for profile, tune or compare (e.g. "profile:transpose", "compare:softmax:cuda")'
            )
        if lang is not None and not lang.isidentifier():
            raise PlanError(
                f"requirement {text!r}: the last part names a version of the exercise (cuda, triton, "
                "or the exercise's own version name, e.g. add2's setup)"
            )
        return cls(kind, exercise, lang)

    @classmethod
    def _portfolio(cls, text: str, sections: list[str]) -> Requirement:
        if len(sections) > 1 or (sections and sections[0] not in PORTFOLIO_SECTIONS):
            raise PlanError(
                f"requirement {text!r}: write portfolio (every notes section of `kcourse report portfolio`) "
                f"or portfolio:SECTION, SECTION one of {', '.join(PORTFOLIO_SECTIONS)}"
            )
        return cls("portfolio", section=sections[0] if sections else None)


@dataclass
class PlanExercise:
    id: str
    lang: str | None = None
    extra: bool = False  # offered in the unit, not needed for "done" (kcourse progress)


@dataclass
class Unit:
    key: str  # "week2", "day1"
    title: str
    exercises: list[PlanExercise] = field(default_factory=list)
    planned: list[str] = field(default_factory=list)  # topics whose exercises do not exist yet
    deliverable: str = ""
    requires: list[str] = field(default_factory=list)  # what else completes it: Requirement.parse reads each
    topics: list[str] = field(default_factory=list)  # what the unit covers, in its document's words
    prompts: list[str] = field(default_factory=list)  # questions for the learner's notes in the unit's report
    reading: list[str] = field(default_factory=list)

    @property
    def required_exercises(self) -> list[PlanExercise]:
        return [e for e in self.exercises if not e.extra]

    @property
    def requirements(self) -> list[Requirement]:
        return [Requirement.parse(text) for text in self.requires]


@dataclass
class Plan:
    id: str
    title: str
    unit_name: str  # "week" or "day"
    units: list[Unit]
    default: bool = False
    description: str = ""

    def unit(self, key: str) -> Unit | None:
        return next((u for u in self.units if u.key == key), None)


_PARSED: dict[tuple[str, int, int], dict] = {}


def _parsed(path: Path) -> dict:
    """The file's TOML, parsed once per version of the file: progress and reports look plans up per unit,
    and the 100-day plan alone takes a noticeable time to parse. Plans are built afresh from it each call."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    if key not in _PARSED:
        _PARSED[key] = tomllib.loads(path.read_text())
    return _PARSED[key]


def load_plans(folder: Path | None = None) -> dict[str, Plan]:
    folder = folder or plans_dir()
    plans = {}
    for path in sorted(folder.glob("*.toml")):
        data = _parsed(path)
        units = [
            Unit(
                key=u["key"],
                title=u.get("title", ""),
                exercises=[
                    PlanExercise(e["id"], e.get("lang"), bool(e.get("extra", False))) for e in u.get("exercises", [])
                ],
                planned=list(u.get("planned", [])),
                deliverable=u.get("deliverable", ""),
                requires=list(u.get("requires", [])),
                topics=list(u.get("topics", [])),
                prompts=list(u.get("prompts", [])),
                reading=list(u.get("reading", [])),
            )
            for u in data.get("units", [])
        ]
        for unit in units:
            _check_requirements(path, unit)
        plans[data["id"]] = Plan(
            id=data["id"],
            title=data.get("title", data["id"]),
            unit_name=data.get("unit", "week"),
            units=units,
            default=bool(data.get("default", False)),
            description=data.get("description", ""),
        )
    return plans


def _check_requirements(path: Path, unit: Unit) -> None:
    try:
        unit.requirements
    except PlanError as exc:
        raise PlanError(f"{path}: {unit.key}: {exc}") from None


def default_plan(plans: dict[str, Plan]) -> Plan:
    return next((p for p in plans.values() if p.default), next(iter(plans.values())))
