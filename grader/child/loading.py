"""Loading an entry point (the learner's or the solution's) inside the child, by kind of variant.

Each loader returns a `Caller`: call it with the case's tensors and parameters and it invokes the
entry point the way that kind expects (Python call, ctypes call, torch operator)."""

from __future__ import annotations

import ctypes
import importlib.util
import inspect
import sys
from pathlib import Path
from typing import Any, Callable

import torch

from grader.core.spec import BUILDS, Argument, Variant
from grader.core.toolkit import c_parameter_count
from grader.core.vocabulary import Code

_CTYPES = {"int32": ctypes.c_int, "int64": ctypes.c_int64, "float32": ctypes.c_float, "float64": ctypes.c_double}


class EntryError(Exception):
    """The entry point could not be loaded or has the wrong shape; `code` names the verdict."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


class Caller:
    def __init__(self, variant: Variant, function: Callable):
        self.variant, self.function = variant, function

    def arguments(self, tensors: dict[str, torch.Tensor], params: dict[str, Any]) -> list[Any]:
        args = []
        for arg in self.variant.args:
            value = argument_value(arg, tensors, params)
            if self.variant.kind_of.nvcc:  # a ctypes call: pointers and C scalars
                if isinstance(value, torch.Tensor):
                    value = ctypes.c_void_p(value.data_ptr())
                else:
                    ctype = arg.ctype or ("float32" if isinstance(value, float) else "int32")
                    value = _CTYPES[ctype](value)
            args.append(value)
        return args

    def __call__(self, tensors: dict[str, torch.Tensor], params: dict[str, Any], **tunables: Any) -> Any:
        return self.function(*self.arguments(tensors, params), **tunables)


class EmulatedCaller(Caller):
    """A library built for the CPU emulator (grader/cuda_cpu): the tensors the grader passes are device memory to
    it for the call (a kernel argument pointing anywhere else is a host pointer, which faults on a GPU). A
    host-side exercise gets host arrays, device memory only where the spec pins them (pinned memory is
    reachable from kernels)."""

    def __init__(self, variant: Variant, function: Callable, library: ctypes.CDLL):
        super().__init__(variant, function)
        self.register, self.forget = library.kcourse_cuda_cpu_register, library.kcourse_cuda_cpu_forget
        self.register.argtypes, self.forget.argtypes = [ctypes.c_void_p, ctypes.c_size_t], [ctypes.c_void_p]
        self.device_memory = not variant.kind_of.host_side or variant.host_memory == "pinned"

    def __call__(self, tensors: dict[str, torch.Tensor], params: dict[str, Any], **tunables: Any) -> Any:
        storages = {
            t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
            for t in tensors.values()
            if self.device_memory and isinstance(t, torch.Tensor)
        }
        for start, size in storages.items():
            self.register(start, size)
        try:
            return super().__call__(tensors, params, **tunables)
        finally:
            for start in storages:
                self.forget(start)


def argument_value(arg: Argument, tensors: dict[str, torch.Tensor], params: dict[str, Any]) -> Any:
    """A tensor, a case parameter, or a tensor's stride ("x.stride(0)": x as laid out for this case)."""
    if arg.stride_of is not None:
        return tensors[arg.stride_of].stride(arg.stride_dim)
    return tensors.get(arg.name, params.get(arg.name))


def load(
    variant: Variant, source: Path, library: str | None, role: str, renamed: dict[str, str] | None = None
) -> Caller:
    """The entry point as its kind loads it (the kind's `loader` hook: one of the three below, or a new kind's).
    `renamed`: text replaced in a Python source before it runs (op namespaces, so two files' operators coexist)."""
    return variant.kind_of.hook("loader")(variant, source, library, role, renamed)


def load_python(variant: Variant, source: Path, library: str | None, role: str, renamed=None) -> Caller:
    """A Python entry point (Triton): the learner's module imported, its function called with tensors."""
    return Caller(variant, _load_python(variant, source, role, renamed))


def load_shared_library(variant: Variant, source: Path, library: str | None, role: str, renamed=None) -> Caller:
    """An nvcc-built library's extern "C" function, called through ctypes (on the CPU emulator where it was built
    for it)."""
    lib, function = _load_shared_library(variant, source, library)
    return (
        EmulatedCaller(variant, function, lib)
        if hasattr(lib, "kcourse_cuda_cpu_register")
        else Caller(variant, function)
    )


def load_torch_op(variant: Variant, source: Path, library: str | None, role: str, renamed=None) -> Caller:
    """A torch operator: the child builds the extension and calls the registered op."""
    return Caller(variant, _load_torch_op(variant, source, role))


def _load_python(variant: Variant, source: Path, role: str, renamed: dict[str, str] | None = None) -> Callable:
    module_name = f"kcourse_{role}_{source.stem}"
    spec = importlib.util.spec_from_file_location(module_name, source)
    if spec is None or spec.loader is None:  # Python has no loader for this suffix: a .cu, .txt, ... file
        raise EntryError(Code.WRONG_LANGUAGE, _not_python_message(variant, source))
    sys.path.insert(0, str(source.parent))  # the learner's helper modules next to the stub
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        if renamed:
            _exec_renamed(module, source, renamed)
        else:
            spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise EntryError(
            Code.SYNTAX_ERROR,
            f"{Path(exc.filename or source).name}:{exc.lineno}: syntax error: {exc.msg}\n    {(exc.text or '').rstrip()}",
        ) from None
    return _entry_function(module, variant, source)


def _not_python_message(variant: Variant, source: Path) -> str:
    """What to give instead of a file Python cannot import, by what the exercise offers."""
    from grader.core.discovery import discover_exercises

    try:
        owner = next((s for s in discover_exercises().values() if variant in s.variants.values()), None)
    except Exception:  # a broken spec elsewhere must not hide this verdict
        owner = None
    if owner is None:
        return (
            f"{source.name} is not a Python file: this exercise's Triton version expects a .py file like "
            f"{variant.stub} (given with --file); a CUDA version, where the exercise has one, is picked with --lang cuda"
        )
    if any(v.lang == "cuda" for v in owner.variants.values()):
        return (
            f"{source.name} is not a Python file: the Triton version of {owner.id} expects a .py file like "
            f"{variant.stub}; to grade a .cu file, pick the CUDA version with --lang cuda"
        )
    return (
        f"{source.name} is not a Python file, and {owner.id} has no CUDA version: give a .py file like "
        f"{variant.stub} with --file"
    )


def _entry_function(module, variant: Variant, source: Path) -> Callable:
    """The module's entry point, callable with the stub's arguments; else the load check's failure."""
    function = getattr(module, variant.entry, None)
    if not callable(function):
        raise EntryError(
            Code.MISSING_ENTRY,
            f"{source.name} has no function `{variant.entry}`: keep the name and signature from the stub",
        )
    expected = [a.name for a in variant.args]
    try:
        inspect.signature(function).bind(*expected)
    except TypeError:
        raise EntryError(
            Code.BAD_SIGNATURE,
            f"{source.name}: `{variant.entry}{inspect.signature(function)}` cannot be called as "
            f"{variant.entry}({', '.join(expected)}): keep the stub's signature",
        ) from None
    return function


def _exec_renamed(module, source: Path, renamed: dict[str, str]) -> None:
    """Run the module's source with each key replaced by its value (same lines: Triton reads kernels from the file)."""
    text = source.read_text()
    for old, new in renamed.items():
        text = text.replace(old, new)
    exec(compile(text, str(source), "exec"), module.__dict__)


def _load_shared_library(variant: Variant, source: Path, library: str | None) -> tuple[ctypes.CDLL, Callable]:
    """The library and its entry point (the CPU emulator's libraries export more: loading's EmulatedCaller)."""
    if library is None:
        raise EntryError(Code.BUILD_ERROR, "no compiled library to load")
    lib = ctypes.CDLL(library)
    try:
        function = getattr(lib, variant.entry)
    except AttributeError:
        raise EntryError(
            Code.MISSING_ENTRY,
            f'{source.name} does not export `{variant.entry}`: keep `extern "C"` and the stub\'s function name',
        ) from None
    declared = c_parameter_count(source.read_text(errors="replace"), variant.entry)
    if declared is not None and declared != len(variant.args):
        raise EntryError(
            Code.BAD_SIGNATURE,
            f"{source.name}: `{variant.entry}` takes {declared} parameters; the grader passes {len(variant.args)} "
            f"({', '.join(a.name for a in variant.args)}): keep the stub's signature",
        )
    function.restype = None
    return lib, function


def _load_torch_op(variant: Variant, source: Path, role: str) -> Callable:
    """Build the way the version says (op_build.py: torch's JIT loader, setup.py or CMake); the op lives at
    torch.ops.<extension name>."""
    from grader.core.paths import build_cache_dir
    from grader.toolchain import op_build

    # Named by content: the same file graded as learner and as solution is built and loaded once,
    # two different files get two names, so their operators never clash in one process.
    name = op_build.extension_name(variant, source)
    build_dir = build_cache_dir() / name
    try:
        library = op_build.build(variant, source, name, build_dir)
    except op_build.BuildFailed as exc:
        how = "" if variant.build == "jit" else f" with {BUILDS[variant.build]}"
        raise EntryError(Code.BUILD_ERROR, f"building {source.name}{how} failed:\n{exc}") from None
    if library is not None:
        torch.ops.load_library(str(library))
    namespace = getattr(torch.ops, name)
    try:
        return getattr(namespace, variant.entry)
    except (AttributeError, RuntimeError):
        raise EntryError(
            Code.MISSING_ENTRY,
            f"{source.name} registers no operator `{variant.entry}`: define it in TORCH_LIBRARY(TORCH_EXTENSION_NAME, m) "
            f"and implement it in TORCH_LIBRARY_IMPL(TORCH_EXTENSION_NAME, CUDA, m)",
        ) from None
