"""Evidence, gathered in the child, that a result was not computed by the learner's own kernel.

Python-level entry points (Triton) run under a TorchDispatchMode: every ATen operator called from
Python passes through it, at the cost of a function call (torch's profiler costs seconds to start).
Custom operators (torch_op) run under torch's profiler, which also sees ATen operators called from C++
inside the operator. Only the memory and view operators a wrapper legitimately needs (allocate,
reshape, copy) are allowed; anything that computes (aten::softmax, aten::add, aten::mm, ...) means
torch did the work. The parent turns this evidence into the verdict."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Callable

import torch

ALLOWED_ATEN = {
    "empty",
    "empty_like",
    "empty_strided",
    "zeros",
    "zeros_like",
    "zero_",
    "fill_",
    "full",
    "full_like",
    "ones",
    "ones_like",
    "view",
    "reshape",
    "_reshape_alias",
    "_unsafe_view",
    "as_strided",
    "contiguous",
    "clone",
    "copy_",
    "to",
    "_to_copy",
    "detach",
    "alias",
    "t",
    "transpose",
    "permute",
    "expand",
    "select",
    "slice",
    "unsqueeze",
    "squeeze",
    "flatten",
    "resolve_conj",
    "resolve_neg",
    "lift_fresh",
    "item",
    "_local_scalar_dense",
    "is_nonzero",
    "numpy_T",
    "view_as",
    "set_",
    "resize_",
    "unbind",
    "split",
    "chunk",
    "narrow",
    "record_stream",
    "_has_compatible_shallow_copy_type",
    "empty_permuted",
    "new_empty",
    "new_empty_strided",
    "new_zeros",
    "new_full",
    "lift",
    "result_type",
    "can_cast",
    "data_ptr",
    "stride",
    "size",
    "is_same_size",
    "_shape_as_tensor",
}


def forbidden_ops(names: set[str]) -> list[str]:
    bad = []
    for name in sorted(names):
        if not name.startswith("aten::"):
            continue
        if name.removeprefix("aten::").split(".")[0] not in ALLOWED_ATEN:
            bad.append(name)
    return bad


def ops_called(function: Callable[[], object], op_library: bool = False) -> tuple[object, set[str]]:
    """Run `function` and return its result and every operator name seen while it ran. An operator library's
    (kinds' `op_library`) calls go through the dispatcher as ops of their own: the profiler sees them."""
    if op_library:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU], record_shapes=False) as prof:
            result = function()
        return result, {event.name for event in prof.events()}
    recorder = _op_recorder()
    with recorder:
        result = function()
    return result, recorder.names


_TRITON_DIR = None


def _called_from_triton() -> bool:
    """Triton's own runtime (the autotuner's benchmarking, the interpreter) calls torch operators;
    those are not the learner computing with torch."""
    global _TRITON_DIR
    if _TRITON_DIR is None:
        import triton

        _TRITON_DIR = os.path.dirname(os.path.abspath(triton.__file__)) + os.sep
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.startswith(_TRITON_DIR):
            return True
        frame = frame.f_back
    return False


def _op_recorder():
    from torch.utils._python_dispatch import TorchDispatchMode

    class OpRecorder(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names: set[str] = set()

    # Set after the class is made: TorchDispatchMode wraps a __torch_dispatch__ defined in the class body so
    # that torch.compile never traces into it, and that wrapper imports torch._dynamo at the first operator:
    # 1-3 s in the first trial of every Triton grade (the interpreter's copies are operators), for nothing
    # while no code compiles. _dispatch keeps that protection for when something does.
    OpRecorder.__torch_dispatch__ = _dispatch
    return OpRecorder()


def _dispatch(recorder, func, types, args=(), kwargs=None):
    if "torch._dynamo" in sys.modules:  # torch.compile is loaded (the learner's code may compile): as torch wraps it
        return _record_without_dynamo()(recorder, func, types, args, kwargs)
    return _record(recorder, func, types, args, kwargs)


def _record(recorder, func, types, args=(), kwargs=None):
    if not _called_from_triton():
        recorder.names.add(func.name())
    if func.namespace not in ("aten", "prims"):
        return _inside_operator(recorder, func, args, kwargs or {})
    return func(*args, **(kwargs or {}))


@functools.cache
def _record_without_dynamo():
    return torch._disable_dynamo(_record, recursive=True)


def _inside_operator(recorder, func, args, kwargs):
    """An operator of the learner's own (torch.library.custom_op): its Python implementation runs with the
    recorder still on, so torch calls inside it are seen (a dispatch mode is off while it handles an operator,
    and calling the operator again would come back here: the backend's kernel is called directly)."""
    import torch

    tensor = next((a for a in args if isinstance(a, torch.Tensor)), None)
    key = "CUDA" if tensor is not None and tensor.is_cuda else "CPU"
    if not torch._C._dispatch_has_computed_kernel_for_dispatch_key(func.name(), key):
        return func(*args, **kwargs)
    with recorder:
        return func.redispatch(torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, key)), *args, **kwargs)


class SolutionWatch:
    """Notes every file opened (or library dlopen'ed) under the instructor's solutions/ by the learner's
    code, through a Python audit hook: on a machine that has the solutions (grade-batch), importing or
    reading one is borrowing its kernel. Stop it before the grader loads the solution for timing."""

    def __init__(self, solutions_root: str | None, learner_file: Path):
        self.root = os.path.abspath(solutions_root) + os.sep if solutions_root else None
        own = os.path.abspath(learner_file)
        stem = os.path.splitext(os.path.basename(own))[0]
        # the graded file itself, and its bytecode cache (when the solution is graded in the learner's place)
        self.own = (own, os.path.join(os.path.dirname(own), "__pycache__", stem + "."))
        self.seen: set[str] = set()
        self.active = self.root is not None
        if self.active:
            sys.addaudithook(self._hook)

    def _hook(self, event: str, args: tuple) -> None:
        if not self.active or event not in ("open", "ctypes.dlopen") or not args:
            return
        try:
            path = os.path.abspath(os.fsdecode(args[0]))
        except (TypeError, ValueError):
            return  # a file descriptor or a name that is not a path
        if path.startswith(self.root) and path != self.own[0] and not path.startswith(self.own[1]):
            self.seen.add(os.path.basename(path))


def inputs_modified(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> list[str]:
    return [name for name, original in before.items() if not torch.equal(original, after[name])]
