"""grader/child/compile_steps.py: each Triton compile is a step of the grade, named for the learner's kernels and not
for the solution's; a hook already set still decides."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from triton import knobs

from grader.child import compile_steps


@pytest.fixture(autouse=True)
def no_hook(monkeypatch):
    monkeypatch.setattr(knobs.runtime, "jit_cache_hook", None)


def fn(module: str, name: str):
    return SimpleNamespace(module=module, name=name)


def test_a_compile_is_a_step_that_names_the_learners_kernel_and_not_the_solutions():
    steps = []
    compile_steps.show_compiles(steps.append)
    hook = knobs.runtime.jit_cache_hook
    assert hook(key="k", fn=fn("kcourse_learner_flash", "_attn_fwd"), already_compiled=False) is None
    assert hook(key="k", fn=fn("kcourse_solution_flash", "_bwd_dkdv"), already_compiled=False) is None
    assert steps == ["compiling your Triton kernel _attn_fwd", "compiling the solution's Triton kernels"]


def test_a_hook_set_before_is_kept_and_still_decides_and_the_step_is_set_once():
    seen = []
    knobs.runtime.jit_cache_hook = lambda **kwargs: seen.append(kwargs["fn"].name) or True
    steps = []
    compile_steps.show_compiles(steps.append)
    compile_steps.show_compiles(steps.append)  # a second call wraps nothing again
    assert knobs.runtime.jit_cache_hook(key="k", fn=fn("helpers", "_load"), already_compiled=False) is True
    assert seen == ["_load"] and steps == ["compiling your Triton kernel _load"]
