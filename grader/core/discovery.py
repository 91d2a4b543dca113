"""Finding exercises and resolving what the learner typed ("week2 reduction", "softmax") to one variant.

Where an exercise has several versions (CUDA and Triton; add2's builds), one rule picks the version, the
first that applies: --lang; a --file's suffix (.cu: the CUDA version, .py: the Triton one; cli/options.py _resolve);
the version the plan's week/day lists (`grade week5 softmax`); the spec's `default_lang`; else the grade
asks for --lang. Whatever picked it without --lang is named in the grade's header (Target.lang_choice)."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

from grader.core.errors import KcourseError
from grader.core.paths import exercises_dir, solutions_dir
from grader.core.plans import Plan, PlanExercise, Unit, default_plan, load_plans
from grader.core.spec import ExerciseSpec, SpecError, Variant, load_spec


class ResolveError(KcourseError, ValueError):
    """Unknown plan, week/day or exercise; the message lists what exists and the nearest match."""


@dataclass
class Target:
    spec: ExerciseSpec
    variant: Variant
    unit: str | None = None  # "week2" when resolved through a plan
    plan: str | None = None
    lang_choice: str = ""  # what picked the version where the id has several and no --lang was given

    @property
    def key(self) -> str:
        return f"{self.spec.id}:{self.variant.lang}"


def discover_exercises(folder: Path | None = None) -> dict[str, ExerciseSpec]:
    folder = folder or exercises_dir()
    return {p.parent.name: load_spec(p.parent) for p in sorted(folder.glob("*/spec.toml"))}


def learner_file(target: Target, source: str, submission: Path | None) -> Path:
    """The file a grade runs: --file, the hidden solution (--source solutions), or the exercise's stub."""
    if submission is not None:
        return submission.resolve()
    if source == "solutions":
        return solution_file(target.spec, target.variant)
    return stub_file(target.spec, target.variant)


def solution_file(spec: ExerciseSpec, variant: Variant) -> Path:
    return solutions_dir() / spec.id / variant.stub


def stub_file(spec: ExerciseSpec, variant: Variant) -> Path:
    return spec.folder / variant.stub


def suggest(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.5)
    listing = ", ".join(sorted(choices)) or "(none)"
    return (f" Did you mean {close[0]!r}?" if close else "") + f" Known: {listing}."


def pick_plan(plans: dict[str, Plan], plan_id: str | None) -> Plan:
    if not plans:
        raise ResolveError("no plans found in plans/")
    if plan_id is None:
        return default_plan(plans)
    if plan_id not in plans:
        raise ResolveError(f"unknown plan {plan_id!r}." + suggest(plan_id, list(plans)))
    return plans[plan_id]


def resolve(words: tuple[str, ...], lang: str | None = None, plan_id: str | None = None) -> Target:
    """`("week2", "reduction")` through the plan, or `("reduction",)` by id."""
    exercises = discover_exercises()
    if len(words) == 1:
        return _by_id(exercises, words[0], lang)
    if len(words) != 2:
        raise ResolveError(
            "give an exercise id (kcourse grade reduction) or a week/day and an id (kcourse grade week2 reduction)"
        )
    unit_key, exercise_id = words
    plan = _plan_of(unit_key, exercise_id, lang, plan_id)
    unit = plan.unit(unit_key)
    if unit is None:
        raise ResolveError(f"plan {plan.id!r} has no {unit_key!r}." + suggest(unit_key, [u.key for u in plan.units]))
    listed = _listed(unit, exercise_id, lang)
    if not listed and not unit.exercises and not unit.planned:
        raise ResolveError(
            f"{unit_key} of {plan.id!r} ({unit.title}) has no exercise to grade: "
            f"`kcourse progress --plan {plan.id}` says what counts for it"
        )
    if not listed:
        names = [e.id for e in unit.exercises]
        planned = f" ({unit_key} also plans: {', '.join(unit.planned)}, not written yet)" if unit.planned else ""
        raise ResolveError(
            f"{unit_key} of {plan.id!r} has no exercise {exercise_id!r}{planned}." + suggest(exercise_id, names)
        )
    langs = {e.lang for e in listed}
    if len(langs) > 1 and lang is None:
        raise ResolveError(
            f"{unit_key} has {exercise_id} in {' and '.join(sorted(map(str, langs)))}: add --lang "
            + "|".join(sorted(map(str, langs)))
        )
    target = _by_id(exercises, exercise_id, lang or listed[0].lang)
    target.unit, target.plan = unit_key, plan.id
    if lang is None and listed[0].lang and len(target.spec.variants) > 1:
        target.lang_choice = f"the version {unit_key} lists; --lang {others(target)} for the other"
    return target


def others(target: Target) -> str:
    """The exercise's other versions, for "--lang cuda for the other"."""
    return "|".join(sorted(lang for lang in target.spec.variants if lang != target.variant.lang))


def _plan_of(unit_key: str, exercise_id: str, lang: str | None, plan_id: str | None) -> Plan:
    """--plan's plan; else the default plan where it has the unit; else the one plan whose unit lists the exercise
    (`kcourse grade day12 softmax` is the 100-day plan's); several such plans are a question, never a guess."""
    plans = load_plans()
    picked = pick_plan(plans, plan_id)  # --plan's, or the default
    if plan_id is not None or picked.unit(unit_key) is not None:
        return picked
    having = [p for p in plans.values() if p.unit(unit_key) is not None]
    listing = [p for p in having if _listed(p.unit(unit_key), exercise_id, lang)]
    if len(listing) > 1:
        commands = " or ".join(f"--plan {p.id}" for p in listing)
        raise ResolveError(
            f"{unit_key} {exercise_id} is in several plans ({', '.join(p.id for p in listing)}): add {commands}"
        )
    if not listing and len(having) > 1:
        offers = "; ".join(f"{p.id}'s: {', '.join(e.id for e in p.unit(unit_key).exercises) or 'none'}" for p in having)
        raise ResolveError(
            f"no plan's {unit_key} has the exercise {exercise_id!r} ({offers}). "
            f"`kcourse list --plan PLAN` shows a plan's exercises"
        )
    return (listing or having or [picked])[0]


def _listed(unit: Unit, exercise_id: str, lang: str | None) -> list[PlanExercise]:
    """The unit's entries for this exercise in this language (any language without --lang)."""
    return [e for e in unit.exercises if e.id == exercise_id and (lang is None or e.lang in (None, lang))]


def _by_id(exercises: dict[str, ExerciseSpec], exercise_id: str, lang: str | None) -> Target:
    if exercise_id not in exercises:
        raise ResolveError(f"unknown exercise {exercise_id!r}." + suggest(exercise_id, list(exercises)))
    spec = exercises[exercise_id]
    try:
        target = Target(spec=spec, variant=spec.variant(lang))
    except SpecError as exc:
        unnamed = lang is None and len(spec.variants) > 1 and spec.default_lang is None
        raise ResolveError(
            str(exc) + (" (its spec.toml names no default_lang, the version picked without --lang)" if unnamed else "")
        ) from exc
    if lang is None and len(spec.variants) > 1:
        target.lang_choice = f"picked by its spec's default_lang; --lang {others(target)} for the other"
    return target


def all_targets() -> list[Target]:
    return [Target(spec=s, variant=v) for s in discover_exercises().values() for v in s.variants.values()]
