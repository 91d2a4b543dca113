"""Numerics: fresh random inputs per trial, outputs poisoned before the call, a float64 reference,
per-dtype tolerances, NaN never passes. Messages say which size, how wrong, and where first."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from grader import exprs
from grader.spec import Case, ExerciseSpec, TensorSpec, Tolerance

INT_POISON = -1234567  # an integer output nobody computes by accident


def torch_dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def element_size(dtype_name: str) -> int:
    return torch.empty((), dtype=torch_dtype(dtype_name)).element_size()


def shape_of(tensor: TensorSpec, case: Case) -> list[int]:
    return [exprs.evaluate_int(dim, case.params) for dim in tensor.shape]


def dtype_of(tensor: TensorSpec, case: Case) -> str:
    return tensor.dtype or case.dtype


def make_inputs(spec: ExerciseSpec, case: Case, seed: int, device: str) -> dict[str, torch.Tensor]:
    """Fresh random inputs; never zeros, which hide unwritten outputs and wrong indexing."""
    gen = torch.Generator(device=device).manual_seed(seed)
    made = {}
    for t in spec.inputs:
        shape, dtype = shape_of(t, case), torch_dtype(dtype_of(t, case))
        if dtype.is_floating_point:
            if t.init == "normal":
                x = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
            else:
                x = torch.rand(shape, generator=gen, device=device, dtype=torch.float32)
                x += 0.5 if t.init == "positive" else 0.0
            made[t.name] = x.to(dtype)
        else:
            made[t.name] = torch.randint(1, 100, shape, generator=gen, device=device, dtype=dtype)
    return made


def make_outputs(spec: ExerciseSpec, case: Case, device: str) -> dict[str, torch.Tensor]:
    """Outputs filled with NaN (or a sentinel for integers) so elements the kernel never wrote show."""
    made = {}
    for t in spec.outputs:
        dtype = torch_dtype(dtype_of(t, case))
        poison = float("nan") if dtype.is_floating_point else INT_POISON
        made[t.name] = torch.full(shape_of(t, case), poison, dtype=dtype, device=device)
    return made


def reference_outputs(reference: Callable, spec: ExerciseSpec, inputs: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """The reference on float64 copies of the inputs: the higher-precision truth to compare against."""
    upcast = [x.double() if x.is_floating_point() else x for x in inputs.values()]
    result = reference(*upcast)
    outs = list(result) if isinstance(result, (tuple, list)) else [result]
    if len(outs) != len(spec.outputs):
        raise ValueError(f"reference returned {len(outs)} outputs; spec lists {len(spec.outputs)}")
    return outs


@dataclass
class Comparison:
    ok: bool
    code: str = "ok"  # ok | not_written | partial_write | mismatch
    message: str = ""
    details: dict[str, Any] = field(default_factory=dict)


def _index(flat_index: int, shape: tuple[int, ...]) -> list[int] | int:
    if len(shape) <= 1:
        return flat_index
    coords = []
    for dim in reversed(shape):
        coords.append(flat_index % dim)
        flat_index //= dim
    return list(reversed(coords))


def compare(name: str, out: torch.Tensor, ref: torch.Tensor, tol: Tolerance, label: str) -> Comparison:
    if tuple(out.shape) != tuple(ref.shape):
        return Comparison(False, "mismatch", f"{label}: {name} has shape {tuple(out.shape)}, expected {tuple(ref.shape)}")
    got, want = out.detach().double().cpu().flatten(), ref.detach().double().cpu().flatten()
    total = got.numel()
    if out.is_floating_point():
        unwritten = torch.isnan(got) & ~torch.isnan(want)
    else:
        unwritten = got == INT_POISON
    n_unwritten = int(unwritten.sum())
    if n_unwritten == total and total > 0:
        return Comparison(False, "not_written", f"{label}: no element of {name} was written — not implemented yet? "
                          "(or a launch that covers no block at this size)",
                          {"unwritten": n_unwritten})
    if n_unwritten:
        first = int(unwritten.nonzero()[0])
        return Comparison(
            False, "partial_write",
            f"{label}: {n_unwritten} of {total} elements of {name} never written (first at index "
            f"{_index(first, tuple(out.shape))}) — does your last block handle the tail?",
            {"unwritten": n_unwritten, "first_index": first},
        )
    err = (got - want).abs()
    allowed = tol.atol + tol.rtol * want.abs()
    bad = ~(err <= allowed)  # NaN compares false, so NaN is always bad
    if not bool(bad.any()):
        return Comparison(True, details={"max_abs_error": float(err.max()) if total else 0.0})
    first = int(bad.nonzero()[0])
    finite = torch.where(torch.isfinite(err), err, torch.zeros_like(err))
    rel = finite / want.abs().clamp_min(1e-30)
    details = {
        "wrong": int(bad.sum()), "first_index": first, "max_abs_error": float(finite.max()),
        "max_rel_error": float(rel.max()), "got": float(got[first]), "expected": float(want[first]),
        "nan": int(torch.isnan(got).sum()),
    }
    nan_note = f"; {details['nan']} NaN" if details["nan"] else ""
    return Comparison(
        False, "mismatch",
        f"{label}: {details['wrong']} of {total} elements of {name} wrong{nan_note}; max abs error "
        f"{details['max_abs_error']:.3g}, max rel error {details['max_rel_error']:.3g} "
        f"(tolerance atol {tol.atol:g}, rtol {tol.rtol:g}); first at index {_index(first, tuple(out.shape))}: "
        f"got {details['got']:.6g}, expected {details['expected']:.6g}",
        details,
    )


def matches(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance) -> bool:
    """True when `out` agrees with `ref` within tolerance (used to recognise a cached earlier result)."""
    if tuple(out.shape) != tuple(ref.shape):
        return False
    got, want = out.detach().double().cpu(), ref.detach().double().cpu()
    return bool(((got - want).abs() <= tol.atol + tol.rtol * want.abs()).all())
