"""Triton files judged in the test's own process under the Triton interpreter (row_reduce, reduction's
Triton version): a grade's child process per classic mistake would cost most of a CPU test budget.

Inputs are drawn, laid out and poisoned as a grade does (generate, place, make_outputs), the file's entry
point is called as the grader calls it (the spec's args: tensors, then case parameters), and each output is
judged by checking.judge_output: compared with the float64 reference at the case's tolerance, or by the
exercise's own `check` (exact argmax / max). The interpreter is chosen when @triton.jit runs, so
TRITON_INTERPRET is set while a file loads and while it runs only: GPU tests in the same process are
untouched."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Iterator

import torch

from grader.checking import Comparison, judge_output, load_reference, reference_outputs
from grader.inputs import generate, make_outputs, place, written_outside
from grader.spec import Case, ExerciseSpec

OK = Comparison(True)


@contextlib.contextmanager
def interpreting() -> Iterator[None]:
    before = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = before


def load_module(path: Path, name: str, interpreted: bool = True):
    """The file at `path` as a module (its kernels interpreted unless `interpreted` is False: a GPU test)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # Triton reads a kernel's source through its module
    with interpreting() if interpreted else contextlib.nullcontext():
        spec.loader.exec_module(module)
    return module


def edited(source: Path, old: str, new: str, folder: Path, name: str) -> Path:
    """`source` with every occurrence of `old` replaced: a one-line mistake, written as folder/name."""
    text = source.read_text()
    assert old in text, f"{name}: {old!r} is not in {source.name}: update the test's edit"
    path = folder / name
    path.write_text(text.replace(old, new))
    return path


def case_with(spec: ExerciseSpec, label: str) -> Case:
    """The spec's one case whose label is `label` (as a failure names it)."""
    found = [c for c in spec.cases if c.label() == label]
    assert len(found) == 1, f"{spec.id}: no single case labelled {label!r}: {[c.label() for c in spec.cases]}"
    return found[0]


def judge(spec: ExerciseSpec, entry, case: Case, seed: int = 5, **keywords) -> Comparison:
    """The grader's verdict on `entry` over every trial of `case` (Triton version): OK, or the first failure."""
    variant = spec.variants["triton"]
    reference = load_reference(spec.folder / "reference.py")
    for trial in range(spec.trials_for(case)):
        values = generate(spec, case, seed + trial, trial)
        inputs = {name: place(v, case.inputs.get(name, {}).get("layout"), "cpu") for name, v in values.items()}
        outputs = make_outputs(spec, case, "cpu")
        tensors = {**inputs, **outputs}
        with interpreting(), torch.no_grad():
            entry(*(tensors[a.name] if a.name in tensors else case.params[a.name] for a in variant.args), **keywords)
        outside = [name for name, t in outputs.items() if written_outside(t)]
        if outside:
            return Comparison(False, "out_of_bounds", f"{case.label()}: wrote past the end of {', '.join(outside)}")
        refs = reference_outputs(reference, spec, values, case.params)
        for spec_out, ref in zip(spec.outputs, refs):
            result = judge_output(spec, spec_out, outputs[spec_out.name], ref, spec.tolerance_of(case),
                                  f"{case.label()} trial {trial + 1}", inputs=values, params=case.params)
            if not result.ok:
                return result
    return OK
