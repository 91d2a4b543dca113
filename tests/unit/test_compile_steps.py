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


# --- compiling_only: the timed sizes compiled before the GPU is held alone (compile_steps.compile_first) ---------------


def _add_one_tuned(cache_results: bool = True):
    """A fresh autotuner of two configurations over a kernel that adds one to x (interpreted without a GPU)."""
    import triton
    import triton.language as tl

    @triton.jit
    def add_one(x, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x + offs, tl.load(x + offs, mask=offs < n) + 1, mask=offs < n)

    configs = [triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})]
    return triton.autotune(configs=configs, key=["n"], cache_results=cache_results)(add_one)


def _call(tuned, x):
    import triton

    tuned[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, x.numel())


def test_compiling_only_calls_each_configuration_once_launches_nothing_times_none_and_forgets_the_choice(monkeypatch):
    import torch
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    tuned = _add_one_tuned()
    tuned._do_bench = lambda *a, **k: pytest.fail("a configuration was timed")
    monkeypatch.setattr(Autotuner, "check_disk_cache", lambda *a: pytest.fail("Triton's disk cache was used"))
    called, real = [], compile_steps._run_once
    monkeypatch.setattr(
        compile_steps, "_run_once", lambda tuner, *rest: called.append(rest[1].kwargs["BLOCK"]) or real(tuner, *rest)
    )
    x = torch.zeros(40, device="cuda" if torch.cuda.is_available() else "cpu")
    with compile_steps.compiling_only():
        _call(tuned, x)
    assert called == [16, 32]  # each configuration once (compiled on a GPU)
    assert torch.equal(x.cpu(), torch.zeros(40))  # and none launched, nor the call's own run
    assert tuned.cache == {}  # the timed run tunes as it would have
    assert Autotuner._bench.__name__ == "_bench" and Autotuner.check_disk_cache is not None  # restored
    assert JITFunction.run.__name__ == "run" and InterpretedFunction.run.__name__ == "run"


def test_compiling_only_keeps_a_choice_made_before_and_a_failing_configuration_costs_nothing():
    import torch

    tuned = _add_one_tuned(cache_results=False)
    tuned._do_bench = lambda kernel_call, quantiles: (kernel_call(), [1.0, 1.0, 1.0])[1]  # a timer that only runs
    x = torch.zeros(40, device="cuda" if torch.cuda.is_available() else "cpu")
    _call(tuned, x)  # tuned before the block: each configuration once by that timer, then the call
    chosen = dict(tuned.cache)
    with compile_steps.compiling_only():
        _call(tuned, x)  # the choice kept: nothing run per configuration, nor launched
    assert tuned.cache == chosen and len(chosen) == 1 and torch.equal(x.cpu(), torch.full((40,), 3.0))
    failing = SimpleNamespace(all_kwargs=lambda: {"BLOCK": 16}, pre_hook=lambda nargs: 1 / 0)
    tuned.nargs = {}
    assert compile_steps._run_once(tuned, (x, 40), failing, {}) == [float("inf")] * 3


@pytest.mark.parametrize("threads", ["4", "1"])
def test_the_compiles_of_a_pass_go_to_a_pool_of_threads_unless_one_is_asked_for(monkeypatch, threads):
    """Triton's AsyncCompileMode is active inside compiling_only (each compile a task of a thread pool, all awaited at
    the block's end) with two or more threads, and not with KCOURSE_COMPILE_THREADS=1."""
    _async = pytest.importorskip("triton.runtime._async_compile")
    monkeypatch.setenv(compile_steps.COMPILE_THREADS_ENV, threads)
    with compile_steps.compiling_only():
        mode = _async.active_mode.get()
    assert (mode is not None) is (threads != "1") and _async.active_mode.get() is None


def test_the_pass_is_on_unless_turned_off_and_its_threads_are_at_most_the_hosts_cores(monkeypatch):
    import os

    monkeypatch.delenv(compile_steps.COMPILE_FIRST_ENV, raising=False)
    monkeypatch.delenv(compile_steps.COMPILE_THREADS_ENV, raising=False)
    assert compile_steps.compile_first()
    assert compile_steps.compile_threads() == min(compile_steps.COMPILE_THREADS, os.cpu_count() or 1)
    monkeypatch.setenv(compile_steps.COMPILE_FIRST_ENV, "0")
    assert not compile_steps.compile_first()


def test_a_pending_kernel_reads_its_attributes_from_the_compiled_one_on_a_triton_without_that():
    """Triton 3.6's FutureKernel had no __getattr__: a solution that calls its warm-up's `_init_handles()` ended the
    pass (an H100, session 70). Inside `_deferring` such a class defers to `result()`; after it, it is as it was."""

    class Pending:  # Triton 3.6's FutureKernel, its attribute reads aside
        def result(self):
            return SimpleNamespace(n_regs=96, _init_handles=lambda: "loaded")

    with compile_steps._deferring(Pending):
        assert Pending().n_regs == 96 and Pending()._init_handles() == "loaded"
    assert "__getattr__" not in Pending.__dict__
    with pytest.raises(AttributeError):
        Pending().n_regs


def test_a_compile_thread_runs_at_the_lowest_cpu_priority(monkeypatch):
    """The pool's threads yield the CPU to every other process (another grade's timed calls and its probe's clock,
    where grades share a host): the lowest priority, on the thread alone, not the grade's main thread."""
    import os
    import threading
    from concurrent.futures import ThreadPoolExecutor

    if not hasattr(os, "setpriority"):
        pytest.skip("no per-thread priority on this system")
    main = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    with ThreadPoolExecutor(1, initializer=compile_steps._yielding_the_cpu) as pool:
        niced = pool.submit(lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id())).result()
    assert niced == compile_steps.COMPILE_NICE
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == main


def test_torch_left_out_gives_the_shapes_and_layouts_an_operation_would_and_runs_nothing():
    """The code around a compile pass's kernels runs on shapes only (its grade holds no part of the GPU lock): new
    tensors in the operation's shape, dtype and strides, views that stay views, in-place operations that change
    nothing, `.item()` as 0, and an operation whose shape depends on the data raising (the pass then ends)."""
    import torch

    x = torch.arange(12.0).reshape(3, 4)
    row_slice = torch.zeros(3, 8)[:, :4]
    with compile_steps.torch_left_out("cpu"):
        total = x + 1
        made = torch.zeros(5, 7, dtype=torch.float16)
        x.add_(100)
        flipped = x.t()
        packed = row_slice.contiguous()
        count = (x.sum() > 3).item()
        cast = x.to(torch.bfloat16)
        with pytest.raises(NotImplementedError):
            torch.nonzero(x)
    assert total.shape == (3, 4) and (made.shape, made.dtype) == ((5, 7), torch.float16)
    assert x[0, :3].tolist() == [0.0, 1.0, 2.0] and flipped.data_ptr() == x.data_ptr()
    assert packed.stride() == (4, 1) and count is False and cast.dtype == torch.bfloat16
    assert (x + 1)[0, 0] == 1  # after the block, operations run again


def test_torch_left_out_leaves_other_devices_tensors_to_run():
    import torch

    x = torch.ones(3)
    with compile_steps.torch_left_out("cuda"):  # nothing here is on a GPU: every operation runs
        x.add_(1)
        assert (x * 2).tolist() == [4.0, 4.0, 4.0]
