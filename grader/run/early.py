"""What a one-shot `kcourse grade` starts before the grader imports torch (seconds on a GPU machine), so
that their start-ups overlap that import instead of following it: the grading child (a fresh Python that
imports torch and opens a CUDA context), the float64 references' GPU process where the spec asks for one,
and nvcc on a CUDA file (the grade's own build then finds it in the build cache, or waits on its lock).
Each is an optimisation only: whatever is not started here, the grade starts itself."""

from __future__ import annotations

import threading
from pathlib import Path

from grader.checks import op_checks
from grader.core.discovery import Target, learner_file
from grader.run import heavy, sandbox
from grader.toolchain import build


def start(target: Target, source: str, submission: Path | None) -> sandbox.Child | None:
    """Start them; the child, for grade() to take up (None where no child will run here)."""
    child = sandbox.early_child(target.variant.kind, op_checks.first_use_imports(target.spec.checks))
    if child is not None and child.device == "cuda":
        heavy.start_early(target.spec, target.variant.reference, child.visible_devices)
        if target.variant.kind_of.nvcc:
            _build_in_background(learner_file(target, source, submission), target)
    return child


def _build_in_background(path: Path, target: Target) -> None:
    """nvcc on the learner's file, with the arguments grade's build uses (same cache key). A daemon thread:
    an exit never waits for it, and its outcome is read from the cache, never from here."""
    if path.suffix != ".cu" or not path.exists():  # a notebook's code is extracted first, by the grade
        return

    def run() -> None:
        try:
            build.build_variant(path, target.variant, build.gpu_arch())
        except Exception:  # the grade's own build meets the same problem and reports it
            pass

    threading.Thread(target=run, name="kcourse-early-build", daemon=True).start()
