"""Numerics, decided in the trusted parent: the reference in float64 on the grader's own copy of the
inputs, per-case tolerances, NaN never passes. Messages say which size, how wrong, and where first."""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from grader.checks import output_map
from grader.checks.inputs import element_size, make_inputs, make_outputs, unwritten  # noqa: F401 (re-exported)
from grader.core.spec import Case, ExerciseSpec, SpecError, Tolerance
from grader.core.vocabulary import Code

# A cached answer is only named when the previous trial's answer is this many tolerances away from
# this trial's: otherwise "equals the previous answer" is just rounding, and the verdict is numerics.
CACHE_EVIDENCE = 100
CHUNK = 1 << 20  # elements per step of a passing output's check (_max_error_if_within)


def load_reference(path, name: str = "reference") -> Callable:
    """exercises/<id>/reference.py's `reference` function, or the one a version names (spec.Variant.reference)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"kcourse_reference_{path.parent.name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    function = getattr(module, name, None)
    if not callable(function):
        raise SpecError(f"{path} has no function {name!r}: define `def {name}(...)` there, or fix the spec's name")
    return function


def reference_keywords(reference: Callable, params: dict[str, Any], device: str = "cpu") -> dict[str, Any]:
    """The keyword-only parameters the reference declares, filled from the case's parameters and the
    `device` to build its answer on: how an exercise with no inputs (one that writes its thread indices)
    tells the reference its sizes, `def reference(*, n, device="cpu")`."""
    known = {**params, "device": device}
    declared = inspect.signature(reference).parameters.values()
    return {p.name: known[p.name] for p in declared if p.kind is p.KEYWORD_ONLY and p.name in known}


def reference_outputs(
    reference: Callable, spec: ExerciseSpec, inputs: dict[str, torch.Tensor], params: dict[str, Any] | None = None
) -> list[torch.Tensor]:
    """The reference on float64 copies of the inputs: the higher-precision truth to compare against."""
    upcast = [x.double() if x.is_floating_point() else x for x in inputs.values()]
    device = str(upcast[0].device) if upcast else "cpu"
    result = reference(*upcast, **reference_keywords(reference, params or {}, device))
    outs = list(result) if isinstance(result, (tuple, list)) else [result]
    if len(outs) != len(spec.outputs):
        raise ValueError(f"reference returned {len(outs)} outputs; spec lists {len(spec.outputs)}")
    return outs


# A float64 reference rounded to float32 moves by at most 2^-24 (6e-8) of its value, a 170th of this rtol: where an
# output's tolerance allows at least this much relative error, its reference may travel and be compared as float32.
NARROW_RTOL = 1e-5
NARROW_DTYPES = ("float16", "bfloat16", "float32")


def narrowable(spec: ExerciseSpec, case: Case) -> list[bool]:
    """Per output of this case: whether its float64 reference may be handed over as float32 (half the bytes a GPU
    reference process copies back and the judge reads): a 16- or 32-bit float output, compared elementwise,
    whose tolerance's rtol makes the rounding invisible (NARROW_RTOL)."""
    from grader.checks.inputs import dtype_of

    return [
        dtype_of(out, case) in NARROW_DTYPES and out.check is None and spec.tolerance_of(case, out).rtol >= NARROW_RTOL
        for out in spec.outputs
    ]


def narrowed(refs: list[torch.Tensor], narrow: list[bool] | None) -> list[torch.Tensor]:
    """The references with those `narrowable` marks as float32 (float64 ones only; the rest as they are)."""
    if not narrow:
        return refs
    return [r.float() if wanted and r.dtype == torch.float64 else r for r, wanted in zip(refs, narrow)]


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


def _bound(want: torch.Tensor, tol: Tolerance) -> torch.Tensor:
    """The largest error each element may have: atol + rtol |want| (one new tensor, the rest in place)."""
    return want.abs().mul_(tol.rtol).add_(tol.atol)


def _within(got: torch.Tensor, want: torch.Tensor, tol: Tolerance) -> torch.Tensor:
    """Elementwise pass mask: equal values pass (inf == inf), NaN never does unless expected."""
    err = (got - want).abs()
    ok = err <= _bound(want, tol)
    return ok | (got == want) | (torch.isnan(got) & torch.isnan(want))


def _never_written(poisoned: torch.Tensor, out: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """The poisoned elements that are evidence of a missing store. Only a byte's poison is an ordinary value
    (inputs.BYTE_POISON): a pixel holding it where the answer is that value may have been written."""
    if out.dtype != torch.uint8:
        return poisoned  # NaN payloads and INT_POISON differ from every answer
    return poisoned & (out.detach().cpu().flatten().double() != ref.detach().cpu().flatten().double())


def _shape_or_unwritten(
    name: str, out: torch.Tensor, ref: torch.Tensor, label: str, tol: Tolerance
) -> Comparison | None:
    """The failures told before any value is looked at: a wrong shape, elements never written."""
    if tuple(out.shape) != tuple(ref.shape):
        return Comparison(
            False, Code.MISMATCH, f"{label}: {name} has shape {tuple(out.shape)}, expected {tuple(ref.shape)}"
        )
    poisoned = unwritten(out.detach().cpu()).flatten()
    if not bool(poisoned.any()):  # every element written (never is a part of poisoned)
        return None
    never = _never_written(poisoned, out, ref)
    total = never.numel()
    n_unwritten = int(never.sum())
    if total > 0 and bool(poisoned.all()) and n_unwritten:
        return Comparison(
            False,
            Code.NOT_WRITTEN,
            f"{label}: no element of {name} was written — not implemented yet? "
            "(or a launch that covers no block at this size)",
            {"unwritten": n_unwritten},
        )
    if n_unwritten:
        first, last = int(never.nonzero()[0]), int(never.nonzero()[-1])
        got = out.detach().double().cpu().flatten()
        bad = never | ~_within(got, ref.detach().double().cpu().flatten(), tol)
        return Comparison(
            False,
            Code.PARTIAL_WRITE,
            f"{label}: {n_unwritten} of {total} elements of {name} never written (first at index "
            f"{_index(first, tuple(out.shape))}) — does your last block handle the tail?",
            {
                "unwritten": n_unwritten,
                "first_index": first,
                "last_unwritten": last,
                "total": total,
                **_picture(name, tuple(out.shape), got, bad, never),
            },
        )
    return None


def _picture(name: str, shape: tuple[int, ...], got: torch.Tensor, bad: torch.Tensor, never: torch.Tensor) -> dict:
    """{"map": lines} of where the output is wrong (output_map.py), or {} when there is nothing to draw: the
    output's values, and which elements are wrong and never written (flat, as the comparison has them)."""
    lines = output_map.draw(name, shape, output_map.categories(got, bad, never))
    return {"map": lines} if lines else {}


def compare(name: str, out: torch.Tensor, ref: torch.Tensor, tol: Tolerance, label: str) -> Comparison:
    early = _shape_or_unwritten(name, out, ref, label, tol)
    if early is not None:
        return early
    worst = _max_error_if_within(out, ref, tol)
    if worst is not None:
        return Comparison(True, details={"max_abs_error": worst})
    got, want = out.detach().double().cpu().flatten(), ref.detach().double().cpu().flatten()
    total = got.numel()
    bad = ~_within(got, want, tol)
    err = (got - want).abs()
    finite = torch.where(torch.isfinite(err), err, torch.zeros_like(err))
    if not bool(bad.any()):
        return Comparison(True, details={"max_abs_error": float(finite.max()) if total else 0.0})
    return _mismatch(name, out, got, want, bad, finite, tol, label)


def _max_error_if_within(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance) -> float | None:
    """An output's max abs error where every element is within tolerance and finite (a passing output, the common
    case), taken CHUNK elements at a time so the temporaries (float64, or float32: `_work_dtype`) stay in the CPU's
    cache: the whole-tensor path below makes a dozen of the output's size. None where any element is not: the
    whole path then decides, with equal infs, expected NaNs and the account of what is wrong."""
    got, want = out.detach().cpu().flatten(), ref.detach().cpu().flatten()
    work = _work_dtype(got, want, tol)
    worst = 0.0
    for start in range(0, got.numel(), CHUNK):
        g, w = got[start : start + CHUNK].to(work), want[start : start + CHUNK].to(work)
        err = torch.sub(g, w).abs_()  # never in place on g: it is the output itself where that is float64
        if not bool((err <= _bound(w, tol)).all()):
            return None
        worst = max(worst, float(err.max()))
    return worst if math.isfinite(worst) else None


def _work_dtype(got: torch.Tensor, want: torch.Tensor, tol: Tolerance) -> torch.dtype:
    """float32 where output and reference are floats of 32 bits or fewer (a narrowed reference, `narrowed`) and the
    tolerance is one NARROW_RTOL lets narrow: the error and its bound then move by a few units of 2^-24, far inside
    it, at twice the speed; float64 otherwise."""
    small = tuple(getattr(torch, name) for name in NARROW_DTYPES)
    narrow = got.dtype in small and want.dtype in small and tol.rtol >= NARROW_RTOL
    return torch.float32 if narrow else torch.float64


def _mismatch(name, out, got, want, bad, finite, tol: Tolerance, label: str) -> Comparison:
    """The wrong elements' account: NaN and inf values counted and placed apart, the error figures taken over
    the other wrong elements only (a NaN has no error figure: a max error of 0 would read as a pass)."""
    shape = tuple(out.shape)
    nan, inf = bad & torch.isnan(got), bad & torch.isinf(got)
    others = bad & ~nan & ~inf
    first = int(bad.nonzero()[0])
    rel = finite / want.abs().clamp_min(1e-30)
    details = {
        "wrong": int(bad.sum()),
        "first_index": first,
        "max_abs_error": _max_over(finite, others),
        "max_rel_error": _max_over(rel, others),
        "got": float(got[first]),
        "expected": float(want[first]),
        "nan": int(nan.sum()),
        "inf": int(inf.sum()),
        "total": got.numel(),
        "last_wrong": int(bad.nonzero()[-1]),
        "other_wrong": int(others.sum()),
    }
    details.update(_picture(name, shape, got, bad, torch.zeros_like(bad)))
    head = f"{label}: {details['wrong']} of {got.numel()} elements of {name} wrong"
    if not (details["nan"] or details["inf"]):
        return Comparison(
            False,
            Code.MISMATCH,
            f"{head}; {_error_figures(details, tol)}; {_first_text(first, shape, got, want)}",
            details,
        )
    counts = []
    for key, word, mask in (("nan", "NaN", nan), ("inf", "inf", inf)):
        if details[key]:
            details[f"first_{key}"] = where = int(mask.nonzero()[0])
            counts.append(
                f"{details[key]} {word} (first at index {_index(where, shape)}, expected {float(want[where]):.6g})"
            )
    rest = (
        "every other element is within tolerance — find the operation in your kernel that makes the first "
        "NaN/inf (see the hint)"
    )
    if details["other_wrong"]:
        rest = (
            f"elsewhere {details['other_wrong']} more wrong: {_error_figures(details, tol)}; "
            f"{_first_text(int(others.nonzero()[0]), shape, got, want)}"
        )
    return Comparison(False, Code.MISMATCH, f"{head}: {', '.join(counts)}; {rest}", details)


def _max_over(values: torch.Tensor, mask: torch.Tensor) -> float | None:
    return float(values[mask].max()) if bool(mask.any()) else None


def _error_figures(details: dict, tol: Tolerance) -> str:
    return (
        f"max abs error {details['max_abs_error']:.3g}, max rel error {details['max_rel_error']:.3g} "
        f"(tolerance atol {tol.atol:g}, rtol {tol.rtol:.3g})"
    )


def _first_text(first: int, shape: tuple[int, ...], got: torch.Tensor, want: torch.Tensor) -> str:
    return f"first at index {_index(first, shape)}: got {float(got[first]):.6g}, expected {float(want[first]):.6g}"


def matches(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance) -> bool:
    """True when `out` agrees with `ref` within tolerance."""
    if tuple(out.shape) != tuple(ref.shape):
        return False
    return bool(_within(out.detach().double().cpu(), ref.detach().double().cpu(), tol).all())


def looks_cached(out: torch.Tensor, previous_ref: torch.Tensor, ref: torch.Tensor, tol: Tolerance) -> bool:
    """`out` is the previous trial's answer, and that answer is clearly not this trial's: the two
    references differ by far more than the tolerance. Never accuse on a difference rounding explains."""
    if not matches(out, previous_ref, tol):
        return False
    wide = Tolerance(tol.atol * CACHE_EVIDENCE, tol.rtol * CACHE_EVIDENCE)
    return not matches(previous_ref, ref, wide)


# --- outputs whose right answer is not unique: the exercise's own property check -------------------------


def check_function(spec: ExerciseSpec, name: str) -> Callable:
    """reference.py's function `name`, which an output's `check = "name"` in spec.toml names."""
    from grader.checks.inputs import _reference_module  # reference.py, loaded once per process
    from grader.core.spec import SpecError

    function = getattr(_reference_module(spec.folder / "reference.py"), name, None)
    if not callable(function):
        raise SpecError(
            f"{spec.folder / 'spec.toml'}: check {name!r} is not a function of "
            f"{spec.folder / 'reference.py'}: define `def {name}(got, *, params, device)` there"
        )
    return function


def judge_output(
    spec: ExerciseSpec,
    spec_out,
    out: torch.Tensor,
    ref: torch.Tensor,
    tol: Tolerance,
    label: str,
    *,
    inputs: dict[str, torch.Tensor] | None = None,
    params: dict[str, Any] | None = None,
    device: dict[str, Any] | None = None,
) -> Comparison:
    """One output's verdict: compared with the reference elementwise, or, for an output whose right answer
    is not unique (the SM a block ran on: spec.toml `check = "name"`), checked for the properties every
    right answer has by that function of reference.py. It is called as name(got, **keywords) with the
    keyword-only parameters it declares among `expected` (the reference's output), `inputs`, `params` (the
    case's) and `device` (the GPU's description, e.g. "multiprocessors"), and returns None when right, else
    what is wrong and what to do. Elements never written fail first, as in compare."""
    if spec_out.check is None:
        return compare(spec_out.name, out, ref, tol, label)
    early = _shape_or_unwritten(spec_out.name, out, ref, label, tol)
    if early is not None:
        return early
    function = check_function(spec, spec_out.check)
    known = {"expected": ref, "inputs": inputs or {}, "params": params or {}, "device": device or {}}
    declared = inspect.signature(function).parameters.values()
    keywords = {p.name: known[p.name] for p in declared if p.kind is p.KEYWORD_ONLY and p.name in known}
    problem = function(out.detach().cpu(), **keywords)
    if problem is None:
        return Comparison(True)
    return Comparison(False, Code.PROPERTY, f"{label}: {spec_out.name}: {problem}", {"check": spec_out.check})
