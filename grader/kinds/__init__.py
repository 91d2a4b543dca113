"""The kinds of exercise version (spec.toml's `variants.<lang>.kind`). Each kind is one module of this package
that defines `KIND = Kind(...)`: what the learner writes, how the kit builds and loads it, what runs without a
GPU, which compute-sanitizer tools check it, and how it is timed. The rest of the grader asks a version's Kind
(`Variant.kind_of`) and calls its hooks; it never compares kind names. So a new kind of exercise is one new
module here (tests/test_new_kind.py adds one to a copy of the kit and grades with it, touching nothing else).

Owns: the Kind record and the registry. Imports nothing of the grader: every layer may read a Kind. The hooks
(`loader`, `builder`) are named as "module:function" and imported when called, in the process that calls them
(the loader in the child, beside learner code; the builder in the parent)."""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Kind:
    name: str
    lang: str  # the language the learner writes: "triton", "cuda", ... (a version's `language`)
    entry: str  # what the learner's entry point is, in words (docs, messages)
    suffixes: tuple[str, ...]  # the learner's file
    loader: str  # "module:function" that loads an entry point in the child: (variant, source, library, role, renamed)
    builder: str | None = None  # "module:function" the parent runs before the child: (run, solution) -> False when
    # the grade ends there (a build error, or all this machine can do); None: nothing. run: grader.run.grade.GradeRun
    nvcc: bool = False  # built by the kit with nvcc into a shared library and called through ctypes
    gpu_to_run: bool = False  # without a GPU only compiled (or run on the CPU emulator where it takes it)
    interpreted: bool = False  # without a GPU it runs under the Triton interpreter (and is linted for the GPU)
    builds_in_child: bool = False  # the child builds it (a torch extension): compute-sanitizer runs after the child
    sanitizer_tools: tuple[str, ...] = ()  # compute-sanitizer's tools that check it on a GPU
    prewarm: str | None = None  # what the early child imports ahead of the job (child/worker.py)
    host_side: bool = False  # host pointers: it allocates, copies and launches itself; its timing includes transfers
    watch_ops: bool = False  # torch operators called from Python are recorded (integrity.ops_called)
    returns_outputs: bool = False  # the entry point returns its outputs rather than filling given ones
    python_entry: bool = False  # a Python function: spec [checks] (autograd, torch.compile) can call it
    op_library: bool = False  # it registers torch operators (TORCH_LIBRARY): aten calls are its own, not cheats
    compiles_when_run: bool = False  # its kernels compile (and tune) at their first call at a new size: Triton's JIT

    def hook(self, which: str) -> Callable[..., Any]:
        """The function a hook names (`loader` or `builder`), imported now."""
        module, _, function = getattr(self, which).partition(":")
        return getattr(importlib.import_module(module), function)


def _discover() -> dict[str, Kind]:
    """Every module of this package that defines KIND, by name."""
    found = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        kind = getattr(importlib.import_module(f"{__name__}.{info.name}"), "KIND", None)
        if isinstance(kind, Kind):
            found[kind.name] = kind
    return found


KINDS: dict[str, Kind] = _discover()
NVCC_KINDS = tuple(k.name for k in KINDS.values() if k.nvcc)
GPU_TO_RUN = tuple(k.name for k in KINDS.values() if k.gpu_to_run)


def kind_named(name: str) -> Kind:
    """The Kind of that name (spec loading has refused any other)."""
    return KINDS[name]
