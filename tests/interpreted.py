"""Triton files run in the test's own process under the Triton interpreter (for the CPU tests of the
day 31-39 Triton exercises): much cheaper than a grade's child process per mistake, and judged with the
grader's own pieces through simulated_kernels.verdicts (the spec's cases, poisoned outputs, float64 reference).

The interpreter is chosen when @triton.jit runs, from TRITON_INTERPRET (and Triton's first interpreted launch
checks it again): it is set while a file loads and while its entry point runs only, so kernels of other
tests in this process are untouched. The grader's own runs (a child process) are
what the solution and stub tests use; these are for the many mistakes."""

from __future__ import annotations

import importlib.util
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from grader.core.spec import ExerciseSpec


@contextmanager
def interpreter_on():
    previous = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = previous


def load_module(path: Path, name: str):
    """The file at `path` as the module `name`, its kernels compiled for the GPU when called (a GPU test)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # Triton reads a kernel's source through its module
    spec.loader.exec_module(module)
    return module


def load_interpreted(path: Path, name: str):
    """The module at `path`, its @triton.jit kernels interpreted (run on the CPU, programs one after another)."""
    with interpreter_on():
        return load_module(path, name)


def as_model(spec: ExerciseSpec, module):
    """The module's entry point called as the grader calls it: the spec's args, tensors and case parameters
    by name; a simulated_kernels model (inputs, outputs, params)."""
    variant = spec.variants["triton"]
    entry = getattr(module, variant.entry)

    def run(inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor], params: dict[str, Any]) -> None:
        tensors = {**inputs, **outputs}
        with interpreter_on():
            entry(*[tensors[a.name] if a.name in tensors else params[a.name] for a in variant.args])

    return run
