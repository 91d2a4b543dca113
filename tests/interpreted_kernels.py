"""Triton kernels judged in this process under the Triton interpreter, with the grader's own pieces, against
the reference of the version graded (spec.Variant.reference: activations' four entry points).

A grade of a Triton file on the CPU costs a child process (torch and triton imported again) per file and
version. For the many classic-mistake files of an elementwise exercise that is most of a CPU test budget,
so these tests run the file's entry point here, under the interpreter, on each trial of the cases asked
for, drawn, laid out and judged as a grade does (generate, place, make_outputs, written_outside, compare
with the version's float64 reference at the spec's tolerance). Loading under the interpreter is
tests/interpreted.py's; simulated_kernels.verdicts, which it feeds, judges against `reference` only. One
real grade per exercise still shows the whole pipeline (tests/test_swiglu.py, tests/test_activations.py)."""

from __future__ import annotations

from typing import Callable

import torch
from interpreted import interpreter_on, load_interpreted  # noqa: F401 (re-exported for the tests)

from grader.checks.checking import compare, load_reference, reference_outputs
from grader.checks.inputs import generate, make_outputs, place, written_outside
from grader.core.spec import Case, ExerciseSpec, Variant


def case_named(spec: ExerciseSpec, label: str) -> Case:
    """The spec's case whose label is `label` (as a failure names it: "M=64 H=1000 (x scale=30.0)")."""
    found = [c for c in spec.cases if c.label() == label]
    assert len(found) == 1, f"{spec.id}: no single case labelled {label!r}: {[c.label() for c in spec.cases]}"
    return found[0]


def verdict(spec: ExerciseSpec, variant: Variant, entry: Callable, case: Case, seed: int = 7) -> str:
    """The grader's code for `entry` on every trial of `case`: "ok", or the first failing trial's code."""
    reference = load_reference(spec.folder / "reference.py", variant.reference)
    for trial in range(spec.trials_for(case)):
        values = generate(spec, case, seed + trial, trial)
        inputs = {name: place(v, case.inputs.get(name, {}).get("layout"), "cpu") for name, v in values.items()}
        outputs = make_outputs(spec, case, "cpu")
        tensors = {**inputs, **outputs}
        with interpreter_on(), torch.no_grad():
            entry(*(tensors.get(a.name, case.params.get(a.name)) for a in variant.args))
        if any(written_outside(t) for t in outputs.values()):
            return "out_of_bounds"
        refs = reference_outputs(reference, spec, values, case.params)
        for spec_out, ref in zip(spec.outputs, refs):
            result = compare(spec_out.name, outputs[spec_out.name], ref, spec.tolerance_of(case), case.label())
            if not result.ok:
                return result.code
    return "ok"


def verdicts(spec: ExerciseSpec, variant: Variant, entry: Callable, cases: list[Case] | None = None) -> dict[str, str]:
    """Case label -> verdict, for `cases` (default: every case the CPU runs)."""
    cases = cases if cases is not None else [c for c in spec.cases if not c.gpu_only]
    return {case.label(): verdict(spec, variant, entry, case) for case in cases}
