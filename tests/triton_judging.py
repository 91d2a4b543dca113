"""Triton files judged in the test's own process under the Triton interpreter (row_reduce, reduction's
Triton version): a grade's child process per classic mistake would cost most of a CPU test budget.

Inputs are drawn, laid out and poisoned as a grade does (generate, place, make_outputs), the file's entry
point is called as the grader calls it (the spec's args: tensors, then case parameters), and each output is
judged by checking.judge_output: compared with the float64 reference at the case's tolerance, or by the
exercise's own `check` (exact argmax / max). The interpreter is chosen when @triton.jit runs, so
TRITON_INTERPRET is set while a file loads and while it runs only: GPU tests in the same process are
untouched."""

from __future__ import annotations

from pathlib import Path

import torch
from interpreted import interpreter_on

from grader.checks.checking import Comparison, judge_output, load_reference, reference_outputs
from grader.checks.inputs import generate, make_outputs, place, written_outside
from grader.core.spec import Case, ExerciseSpec

OK = Comparison(True)


def edited(source: Path, old: str, new: str, folder: Path, name: str) -> Path:
    """`source` with every occurrence of `old` replaced: a one-line mistake, written as folder/name."""
    text = source.read_text()
    assert old in text, f"{name}: {old!r} is not in {source.name}: update the test's edit"
    path = folder / name
    path.write_text(text.replace(old, new))
    return path


def judge(spec: ExerciseSpec, entry, case: Case, seed: int = 5, version: str = "triton", **keywords) -> Comparison:
    """The grader's verdict on `entry` over every trial of `case`: OK, or the first failure. `version`: the
    spec's Triton version to judge as (its arguments, and the function of reference.py it names)."""
    variant = spec.variants[version]
    reference = load_reference(spec.folder / "reference.py", variant.reference)
    for trial in range(spec.trials_for(case)):
        values = generate(spec, case, seed + trial, trial)
        inputs = {name: place(v, case.inputs.get(name, {}).get("layout"), "cpu") for name, v in values.items()}
        outputs = make_outputs(spec, case, "cpu")
        tensors = {**inputs, **outputs}
        with interpreter_on(), torch.no_grad():
            entry(*(tensors[a.name] if a.name in tensors else case.params[a.name] for a in variant.args), **keywords)
        outside = [name for name, t in outputs.items() if written_outside(t)]
        if outside:
            return Comparison(False, "out_of_bounds", f"{case.label()}: wrote past the end of {', '.join(outside)}")
        refs = reference_outputs(reference, spec, values, case.params)
        for spec_out, ref in zip(spec.outputs, refs):
            result = judge_output(
                spec,
                spec_out,
                outputs[spec_out.name],
                ref,
                spec.tolerance_of(case),
                f"{case.label()} trial {trial + 1}",
                inputs=values,
                params=case.params,
            )
            if not result.ok:
                return result
    return OK
