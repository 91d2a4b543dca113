"""Catching results that were not computed by the learner's own kernel.

Under torch's profiler every ATen operator shows, also one called from C++ inside a custom op. Only
the memory and view operators a wrapper legitimately needs (allocate, reshape, copy) are allowed;
anything that computes (aten::softmax, aten::add, aten::mm, ...) means torch did the work."""

from __future__ import annotations

from typing import Callable

import torch

ALLOWED_ATEN = {
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "zero_", "fill_", "full", "full_like",
    "ones", "ones_like", "view", "reshape", "_reshape_alias", "_unsafe_view", "as_strided", "contiguous",
    "clone", "copy_", "to", "_to_copy", "detach", "alias", "t", "transpose", "permute", "expand",
    "select", "slice", "unsqueeze", "squeeze", "flatten", "resolve_conj", "resolve_neg", "lift_fresh",
    "item", "_local_scalar_dense", "is_nonzero", "numpy_T", "view_as", "set_", "resize_", "unbind",
    "split", "chunk", "narrow", "record_stream", "_has_compatible_shallow_copy_type", "empty_permuted",
    "new_empty", "new_empty_strided", "new_zeros", "new_full", "lift", "result_type", "can_cast",
    "data_ptr", "stride", "size", "is_same_size", "_shape_as_tensor",
}


def forbidden_ops(names: set[str]) -> list[str]:
    bad = []
    for name in sorted(names):
        if not name.startswith("aten::"):
            continue
        if name.removeprefix("aten::").split(".")[0] not in ALLOWED_ATEN:
            bad.append(name)
    return bad


def ops_called(function: Callable[[], object]) -> tuple[object, set[str]]:
    """Run `function` under torch's profiler and return its result and every operator name seen."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=False) as prof:
        result = function()
    return result, {event.name for event in prof.events()}


def inputs_modified(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> list[str]:
    return [name for name, original in before.items() if not torch.equal(original, after[name])]
