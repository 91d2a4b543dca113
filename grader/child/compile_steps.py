"""Triton's compiles as steps of the grade (the grading child, on a GPU).

The first grade after a kernel edit spends most of its time compiling (each kernel once per dtype and constexpr the
cases use, every configuration of a tuned size: docs/grading.md). A grade that sat at "checking n=1000" for a minute
now says what it is doing: the step is the child's live line, which `kcourse grade` and `kcourse watch` show while
they wait and a time-out's message names, and scripts/feedback_bench.py's event timeline shows how long each compile
took. Triton calls the hook before each compile of a kernel this process has not compiled yet, a hit in its disk
cache included (that one ends at once)."""

from __future__ import annotations

from typing import Callable

from grader.core.vocabulary import COMPILING

SOLUTION = "kcourse_solution_"  # the module name the loader gives the solution (loading.load)


def show_compiles(progress: Callable[[str], None]) -> None:
    """Set Triton's jit_cache_hook (once per process), keeping one already set: it still decides as before."""
    from triton import knobs

    before = knobs.runtime.jit_cache_hook
    if getattr(before, "shows_compiles", False):
        return

    def hook(*, fn, **kwargs):
        progress(step_text(str(fn.module), fn.name))
        return before(fn=fn, **kwargs) if before is not None else None  # True would skip the compile: never ours

    hook.shows_compiles = True
    knobs.runtime.jit_cache_hook = hook


def step_text(module: str, name: str) -> str:
    if module.startswith(SOLUTION):  # its kernels' names are the solution's own
        return f"{COMPILING}the solution's Triton kernels"
    return f"{COMPILING}your Triton kernel {name}"
