"""Peak GPU memory: measured in the child around one untimed run of each contestant, judged in the parent.

"Extra" memory is what a run allocates beyond what was already live when it started (its inputs, the
outputs the grader made) and, for entry points that return their outputs, beyond those too: the
scratch an implementation needs. Naive attention's N x N scores show up here as O(N^2); a flash kernel
needs O(N). A spec may cap it: `[performance] max_extra_bytes = "4 * B * H * N * (d + 2)"` (an expression
of the case, like `bytes`), failing the `memory` check at any timed size above it.

Measured through PyTorch's caching allocator (torch.empty and friends, which Triton wrappers and torch
operators use); memory a CUDA launcher takes with cudaMalloc itself is not seen. The allocator's
functions are bound when this module is imported, before the learner's code is loaded, so replacing
torch.cuda.max_memory_allocated from the learner's file changes nothing here."""

from __future__ import annotations

from typing import Any, Callable

import torch

from grader.core import exprs
from grader.core.records import FAILED, PASSED, SKIPPED, Check, Timing
from grader.core.vocabulary import CheckName, Code

# bound at import (the worker imports this module before it loads the learner's code)
_allocated = torch.cuda.memory_allocated
_peak = torch.cuda.max_memory_allocated
_reset_peak = torch.cuda.reset_peak_memory_stats
_synchronize = torch.cuda.synchronize


# --- the child's side ----------------------------------------------------------------------------
def _returned_bytes(result: Any) -> int:
    tensors = result if isinstance(result, (tuple, list)) else [result]
    return sum(t.untyped_storage().nbytes() for t in tensors if isinstance(t, torch.Tensor) and t.is_cuda)


def peak_extra_bytes(function: Callable[[], Any], returns_outputs: bool) -> tuple[int, Any]:
    """(bytes allocated at the peak of one run beyond what was live before it, the run's result).
    `returns_outputs`: the function allocates its outputs (a torch operator, the reference); those are
    not scratch, so they are not counted."""
    _synchronize()
    before = _allocated()
    _reset_peak()
    result = function()
    _synchronize()
    extra = _peak() - before - (_returned_bytes(result) if returns_outputs else 0)
    return max(0, int(extra)), result


# --- the parent's side ---------------------------------------------------------------------------
def annotate(record: Timing, spec, case, reported: Any, elem: int) -> Timing:
    """Put the child's figures and the spec's limit at this size into the timing record."""
    reported = reported if isinstance(reported, dict) else {}
    for who in ("learner", "solution", "torch"):
        value = reported.get(who)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
            setattr(record, f"{who}_extra_bytes", float(value))
    limit = spec.performance.max_extra_bytes
    if limit is not None:
        record.extra_bytes_limit = float(exprs.evaluate(limit, {**case.params, "elem": elem}))
    return record


def size_text(nbytes: float) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes:.0f} B"


def verdict(spec, records: list[Timing]) -> Check | None:
    """The `memory` check: None where the spec sets no limit."""
    perf = spec.performance
    if perf.max_extra_bytes is None:
        return None
    measured = [r for r in records if r.learner_extra_bytes is not None and r.extra_bytes_limit is not None]
    if not measured:
        return Check(
            CheckName.MEMORY,
            SKIPPED,
            "peak GPU memory was not measured for this kind of entry point "
            "(host-side code allocates with cudaMalloc, which the grader cannot see)",
            {"code": Code.NOT_MEASURED},
        )
    why = f" ({perf.memory_hint})" if perf.memory_hint else ""
    over = [r for r in measured if r.learner_extra_bytes > r.extra_bytes_limit]
    sizes = {r.case: {"extra_bytes": r.learner_extra_bytes, "limit_bytes": r.extra_bytes_limit} for r in measured}
    if over:
        worst = max(over, key=lambda r: r.learner_extra_bytes / max(r.extra_bytes_limit, 1.0))
        text = (
            f"your kernel allocated {size_text(worst.learner_extra_bytes)} beyond its inputs and outputs at "
            f"{worst.case}; the limit is {size_text(worst.extra_bytes_limit)}{why}"
        )
        if len(over) > 1:
            text += f"; over the limit at {len(over)} of {len(measured)} timed sizes"
        hint = (
            f"the limit at each size is {perf.max_extra_bytes} bytes; everything your code allocates while it "
            "runs counts (each torch.empty in your wrapper), its inputs and outputs do not"
        )
        return Check(CheckName.MEMORY, FAILED, text, {"code": Code.TOO_MUCH_MEMORY, "sizes": sizes, "hint": hint})
    listed = "; ".join(
        f"{r.case}: {size_text(r.learner_extra_bytes)} of {size_text(r.extra_bytes_limit)}" for r in measured
    )
    return Check(
        CheckName.MEMORY,
        PASSED,
        f"peak extra GPU memory within the limit{why} at every timed size — {listed}",
        {"code": Code.OK, "sizes": sizes},
    )


def not_measured(spec, on_gpu: bool) -> Check | None:
    """The `memory` check when the timing phase did not run (no GPU, or --quick)."""
    if spec.performance.max_extra_bytes is None:
        return None
    if on_gpu:
        return Check(
            CheckName.MEMORY,
            SKIPPED,
            "--quick: numerics and integrity only; grade without --quick for the memory check",
            {"code": Code.QUICK},
        )
    return Check(
        CheckName.MEMORY, SKIPPED, "no GPU found: peak GPU memory is measured on a GPU only", {"code": Code.NO_GPU}
    )
