"""Triton's compiles as steps of the grade (the grading child, on a GPU).

The first grade after a kernel edit spends most of its time compiling (each kernel once per dtype and constexpr the
cases use, every configuration of a tuned size: docs/grading.md). A grade that sat at "checking n=1000" for a minute
now says what it is doing: the step is the child's live line, which `kcourse grade` and `kcourse watch` show while
they wait and a time-out's message names, and scripts/feedback_bench.py's event timeline shows how long each compile
took. Triton calls the hook before each compile of a kernel this process has not compiled yet, a hit in its disk
cache included (that one ends at once).

On a GPU the child compiles first (`compile_first`): before its trials, for every case they use, and before its
timed sizes, for each of them, it calls the code once with every kernel compiled and none launched, Triton's
autotuners compiling every configuration (`compiling_only`), the compiles running side by side on
`compile_threads()` threads, and PyTorch's operations giving shapes only (`torch_left_out`): nothing runs on the
GPU. A kernel edit's grade then waits for its compiles once, in parallel, not one after another through the trials
and the tuning. Where grades share a GPU (the kit's parallel tests, grader/core/gpu_lock.py) the grade holds no part
of the lock meanwhile, so that neither the numerics nor the timing, with the GPU held, wait for a compile.
`KCOURSE_COMPILE_FIRST=0` turns it off; `KCOURSE_COMPILE_THREADS=1` compiles one kernel at a time."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Callable

from grader.core.vocabulary import COMPILING

SOLUTION = "kcourse_solution_"  # the module name the loader gives the solution (loading.load)
COMPILE_FIRST_ENV = "KCOURSE_COMPILE_FIRST"  # "0": no compile pass (the compiles happen at the first runs)
COMPILE_THREADS_ENV = "KCOURSE_COMPILE_THREADS"  # threads a compile pass compiles on (Triton's AsyncCompileMode)
COMPILE_THREADS = 8  # at most, and no more than the host's cores: Triton's compiler lets go of Python's lock
COMPILE_NICE = 19  # the compile threads' CPU priority: the lowest (_yielding_the_cpu)


def compile_first() -> bool:
    """Whether a grade's child compiles before its trials and its timed sizes (on a GPU, a kind that
    `compiles_when_run`: the judge decides), unless COMPILE_FIRST_ENV is 0."""
    return os.environ.get(COMPILE_FIRST_ENV) != "0"


def compile_threads() -> int:
    value = os.environ.get(COMPILE_THREADS_ENV)
    return int(value) if value else min(COMPILE_THREADS, os.cpu_count() or 1)


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


@contextmanager
def compiling_only() -> Iterator[None]:
    """For the block, every Triton kernel called is compiled and not launched (Triton's own warm-up: the
    interpreter's calls do nothing), and Triton's autotuners compile each configuration where they would time it,
    keeping nothing of it: the choices made meanwhile are forgotten after, and Triton's disk cache of tunings is
    neither read nor written. The compiles run side by side (`_in_parallel`) and are all done when the block ends.
    The runs after the block tune as they would have (from that cache, or by timing), with every configuration
    compiled already (compile_first). The outputs keep what they held. A Triton without these internals: the block
    runs as it is."""
    try:
        from triton.runtime.autotuner import Autotuner
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction
    except ImportError:
        yield
        return
    if "_bench" not in Autotuner.__dict__ or not all("run" in f.__dict__ for f in (JITFunction, InterpretedFunction)):
        yield
        return
    touched: dict[int, tuple[Any, set]] = {}  # id -> (autotuner, the tuning keys it had before the block)
    launch = JITFunction.run

    def once(self, *args, config, **meta):
        touched.setdefault(id(self), (self, set(self.cache)))
        return _run_once(self, args, config, meta)

    def uncached(self, tuning_key, configs, bench_fn) -> bool:
        bench_fn()
        return False

    replacements = {
        (Autotuner, "_bench"): once,
        (Autotuner, "check_disk_cache"): uncached,
        (JITFunction, "run"): lambda self, *args, **kwargs: launch(self, *args, **{**kwargs, "warmup": True}),
        (InterpretedFunction, "run"): lambda self, *args, **kwargs: None,
    }
    with _replaced(replacements):
        try:
            with _in_parallel():
                yield
        finally:
            for tuner, keys in touched.values():
                for key in set(tuner.cache) - keys:
                    del tuner.cache[key]


@contextmanager
def torch_left_out(device: str) -> Iterator[None]:
    """For the block, PyTorch's operations on `device` run nothing there: each gives uninitialised tensors in the
    shapes, dtypes and strides it would give (its meta implementation), views stay views, an in-place operation
    leaves its tensor as it was, and `.item()` reads 0. The code around a compile pass's kernels (a wrapper's
    allocations, casts, a tuner's zeroing hook) then launches nothing on the GPU while its grade holds no part of
    the lock (gpu_lock.step_out). An operation without a meta implementation (one whose output's shape depends on
    the data: nonzero, unique) raises, which ends the pass as any failure does."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    kind = torch.device(device).type

    class Shapes(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return _shapes_only(func, args, kwargs or {}, kind)

    with Shapes():
        yield


def _shapes_only(func, args: tuple, kwargs: dict, kind: str):
    """`func` run on meta tensors, its outputs given back as uninitialised tensors where it would have put them (see
    torch_left_out)."""
    import torch
    from torch.utils._pytree import tree_flatten, tree_map

    flat, _ = tree_flatten((args, kwargs))
    there = [t.device for t in flat if isinstance(t, torch.Tensor) and t.device.type == kind]
    asked = torch.device(kwargs["device"]) if kwargs.get("device") is not None else None
    if func.is_view or not (there or (asked is not None and asked.type == kind)):
        return func(*args, **kwargs)
    if func is torch.ops.aten._local_scalar_dense.default:  # .item()
        return _zero_of(args[0].dtype)
    where = asked or there[0]
    real = {}

    def to_meta(x):
        if not isinstance(x, torch.Tensor):
            return x
        meta = torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device="meta")
        real[id(meta)] = (meta, x)  # the meta tensor kept alive: no output of the call can take its id
        return meta

    meta_kwargs = {**kwargs, "device": torch.device("meta")} if asked is not None else kwargs
    out = func(*tree_map(to_meta, args), **tree_map(to_meta, meta_kwargs))

    def back(x):
        if not isinstance(x, torch.Tensor):
            return x
        if id(x) in real:  # an in-place operation's (or an out= argument's) own tensor
            return real[id(x)][1]
        return torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device=where)

    return tree_map(back, out)


def _zero_of(dtype) -> bool | int | float:
    import torch

    return False if dtype == torch.bool else 0.0 if dtype.is_floating_point or dtype.is_complex else 0


@contextmanager
def _in_parallel() -> Iterator[None]:
    """Each Triton compile in the block handed to a pool of compile_threads() threads, all awaited at its end (an error
    raised there): Triton's AsyncCompileMode, where this Triton has it; one compile after another where not."""
    try:
        from triton.runtime._async_compile import AsyncCompileMode, FutureKernel
    except ImportError:
        AsyncCompileMode = None
    threads = compile_threads()
    if AsyncCompileMode is None or threads < 2:
        yield
        return
    pool = ThreadPoolExecutor(threads, thread_name_prefix="triton-compile", initializer=_yielding_the_cpu)
    with pool, _deferring(FutureKernel), AsyncCompileMode(pool):
        yield


def _yielding_the_cpu() -> None:
    """A compile thread's CPU priority lowered as far as it goes (Linux: per thread; the compiler processes it starts
    inherit it): where grades share a host, a compile never slows another grade's timed calls or its probe's clock."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), COMPILE_NICE)
    except (AttributeError, OSError):
        pass


@contextmanager
def _deferring(future_kernel: type) -> Iterator[None]:
    """For the block, a pending kernel's attributes read from its compiled kernel, as Triton 3.7 and later do (code
    that reads a warm-up's `n_regs` or calls its `_init_handles()` then waits for that compile alone); Triton 3.6's
    FutureKernel raised AttributeError instead, which ended the pass."""
    if "__getattr__" in future_kernel.__dict__:
        yield
        return
    future_kernel.__getattr__ = lambda self, name: getattr(self.result(), name)
    try:
        yield
    finally:
        del future_kernel.__getattr__


@contextmanager
def _replaced(replacements: dict[tuple[type, str], Any]) -> Iterator[None]:
    """Class attributes replaced for the block, where the class defines them, and put back after."""
    saved = {(owner, name): owner.__dict__[name] for owner, name in replacements if name in owner.__dict__}
    for owner, name in saved:
        setattr(owner, name, replacements[(owner, name)])
    try:
        yield
    finally:
        for (owner, name), original in saved.items():
            setattr(owner, name, original)


def _run_once(tuner, args: tuple, config, meta: dict) -> list[float]:
    """The autotuner's kernel with `config` called once (compiled, not launched, inside compiling_only): [0, 0, 0] as
    its timing, or infinities where it failed (a configuration too large for this GPU, which the timed tuning then
    meets and skips)."""
    current = dict(meta, **config.all_kwargs())
    try:
        if config.pre_hook:
            config.pre_hook({**tuner.nargs, **current})
        tuner.fn.run(*args, **current)
    except Exception:
        return [float("inf")] * 3
    return [0.0] * 3
