"""Judging kernels played on the CPU with the grader's own pieces (for the day 7/8/14 CUDA exercises).

CUDA cannot run here, so a test writes what a kernel would compute — right, or with one classic mistake —
as a torch function `model(inputs, outputs, params)` that stores into the grader's own poisoned outputs,
laid out as the case asks (a row slice: the row stride is not the width). `verdicts` then draws every trial
of every CPU case exactly as a grade does (generate, place, make_outputs), and judges it with the grader's
checks (written_outside, compare against the float64 reference): "ok" or the failure's code. A mistake
must fail some case; a correct model (any honest summation order) must pass them all. The GPU tests grade
the real kernels (fixtures in tests/fixtures/submissions/)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch
from conftest import submission

from grader.checks.checking import compare, load_reference, reference_outputs
from grader.checks.inputs import generate, make_outputs, place, written_outside
from grader.core.discovery import discover_exercises, resolve
from grader.core.spec import Case, ExerciseSpec
from grader.run.grade import grade

Model = Callable[[dict[str, torch.Tensor], dict[str, torch.Tensor], dict[str, Any]], None]


def exercise(exercise_id: str) -> ExerciseSpec:
    return discover_exercises()[exercise_id]


def cpu_cases(spec: ExerciseSpec) -> list[Case]:
    return [c for c in spec.cases if not c.gpu_only]


_TRIALS: dict[tuple, tuple[dict[str, torch.Tensor], list[torch.Tensor]]] = {}


def trial_data(spec: ExerciseSpec, case: Case, seed: int, trial: int):
    """One trial's inputs and float64 reference, drawn as a grade draws them; kept for the next model
    judged on the same trial (every model of a test module sees the same inputs)."""
    key = (spec.id, case.label(), seed, trial)
    if key not in _TRIALS:
        values = generate(spec, case, seed, trial)
        reference = load_reference(spec.folder / "reference.py")
        _TRIALS[key] = values, reference_outputs(reference, spec, values, case.params)
    return _TRIALS[key]


def trial_verdict(spec: ExerciseSpec, case: Case, model: Model, seed: int, trial: int) -> str:
    """The grader's verdict code for one trial of `model`: ok, out_of_bounds, or compare's code."""
    values, refs = trial_data(spec, case, seed, trial)
    inputs = {name: place(v, case.inputs.get(name, {}).get("layout"), "cpu") for name, v in values.items()}
    outputs = make_outputs(spec, case, "cpu")
    model(inputs, outputs, case.params)
    if any(written_outside(t) for t in outputs.values()):
        return "out_of_bounds"
    for spec_out, ref in zip(spec.outputs, refs):
        result = compare(spec_out.name, outputs[spec_out.name], ref, spec.tolerance_of(case), case.label())
        if not result.ok:
            return result.code
    return "ok"


def verdicts(spec: ExerciseSpec, model: Model, seed: int = 17, until_failure: bool = False) -> dict[str, str]:
    """Case label -> the first failing trial's code, or "ok" (every trial of every CPU case, in the spec's
    order; with `until_failure` the cases after the first failing one are not judged)."""
    found = {}
    for index, case in enumerate(cpu_cases(spec)):
        codes = (trial_verdict(spec, case, model, seed + 1000 * index + t, t) for t in range(spec.trials_for(case)))
        found[case.label()] = next((c for c in codes if c != "ok"), "ok")
        if until_failure and found[case.label()] != "ok":
            break
    return found


def fails_somewhere(spec: ExerciseSpec, model: Model) -> dict[str, str]:
    """The verdicts up to the first case `model` fails (all of them "ok" if it fails none)."""
    return verdicts(spec, model, until_failure=True)


def store(out: torch.Tensor, values: torch.Tensor) -> None:
    """A kernel's stores of every element: values cast to the output's dtype, written through its strides."""
    out.copy_(values.to(out.dtype))


# --- on a GPU ------------------------------------------------------------------------------------------


def grade_fixture(exercise_id: str, name: str | Path, seed: int = 11):
    """Grades a fixture by name, or a file made elsewhere (a Path: a cuda_checks.mutant)."""
    source = name if isinstance(name, Path) else submission(name)
    return grade(resolve((exercise_id,)), submission=source, seed=seed, record=False)


def first_failure(result):
    return next(c for c in result.checks if c.status in ("failed", "error"))


def figure_line(label: str, result) -> str:
    """`label: case: you X unit (P% of roofline); solution Y; torch Z` from a grade's last timed size."""
    t = result.timings[-1]

    def rate(ms):
        return f"{t.learner_rate * t.learner_ms / ms:.4g} {t.unit}" if ms and t.learner_rate else "-"

    return (
        f"{label}: {t.case}: {t.learner_ms:.4g} ms, {rate(t.learner_ms)} ({t.roofline_pct or 0:.0f}% of roofline); "
        f"solution {t.solution_ms or 0:.4g} ms ({rate(t.solution_ms)}); torch {t.torch_ms or 0:.4g} ms "
        f"({rate(t.torch_ms)})"
    )
