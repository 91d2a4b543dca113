"""Learning plans (plans/*.toml): weeks or days mapped to exercise ids, with topics still planned.

A unit may also carry what its source document lists besides exercises: the learning content (`topics`),
questions to answer in the unit's report (`prompts`: each becomes a notes section of that report) and
reading. An exercise marked `extra = true` is listed and gradable in the unit but not needed to finish it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from grader.paths import plans_dir
from grader.spec import tomllib


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
    requires: list[str] = field(default_factory=list)  # record kinds that complete it: env, profile, tune, compare
    topics: list[str] = field(default_factory=list)  # what the unit covers, in its document's words
    prompts: list[str] = field(default_factory=list)  # questions for the learner's notes in the unit's report
    reading: list[str] = field(default_factory=list)

    @property
    def required_exercises(self) -> list[PlanExercise]:
        return [e for e in self.exercises if not e.extra]


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


def load_plans(folder: Path | None = None) -> dict[str, Plan]:
    folder = folder or plans_dir()
    plans = {}
    for path in sorted(folder.glob("*.toml")):
        data = tomllib.loads(path.read_text())
        units = [
            Unit(
                key=u["key"],
                title=u.get("title", ""),
                exercises=[PlanExercise(e["id"], e.get("lang"), bool(e.get("extra", False))) for e in u.get("exercises", [])],
                planned=list(u.get("planned", [])),
                deliverable=u.get("deliverable", ""),
                requires=list(u.get("requires", [])),
                topics=list(u.get("topics", [])),
                prompts=list(u.get("prompts", [])),
                reading=list(u.get("reading", [])),
            )
            for u in data.get("units", [])
        ]
        plans[data["id"]] = Plan(
            id=data["id"],
            title=data.get("title", data["id"]),
            unit_name=data.get("unit", "week"),
            units=units,
            default=bool(data.get("default", False)),
            description=data.get("description", ""),
        )
    return plans


def default_plan(plans: dict[str, Plan]) -> Plan:
    return next((p for p in plans.values() if p.default), next(iter(plans.values())))
