"""The child's side of `kcourse compare attention`: one attention implementation over a ladder of sequence
lengths, timed beside torch's scaled_dot_product_attention on the same inputs.

Runs in the sandboxed worker (mode "attention_sweep", reached through worker_tools), so learner code
never runs in the grader's own process. It decides no verdict: the figures are a comparison the report
shows; whether the implementation is correct was settled by its grade, which the parent required before
starting this run. At each length it still says how far the output is from SDPA's, so a kernel that
breaks only at lengths its grade never saw shows as such instead of as a fast row.

A length that does not fit in GPU memory ends the sweep for this implementation (longer ones would not
fit either); the parent reports it as skipped, with the reason."""

from __future__ import annotations

from typing import Any

import torch

from grader.checks import memory
from grader.checks.checking import make_inputs, make_outputs
from grader.core.spec import Case, ExerciseSpec, Variant

# torch.OutOfMemoryError since torch 2.1; the older name is the same class
OUT_OF_MEMORY = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)
SDPA_SLACK = 2.0  # SDPA rounds in the inputs' dtype too: twice the spec's tolerance against it


def sweep_case(spec: ExerciseSpec, config: dict[str, Any], n: int) -> Case:
    """The case of one length: the spec's own parameters (those of its largest timed size), with the sweep's
    B, H, d, dtype and N, and no causal masking where the entry point takes `causal`."""
    base = (spec.performance.cases or spec.cases)[-1].params
    params = {**base, "B": config["B"], "H": config["H"], "N": n, "d": config["d"], "dtype": config["dtype"]}
    if "causal" in params:
        params["causal"] = False
    return Case(params=params)


def accepts(variant: Variant, case: Case) -> bool:
    """Whether the version takes this case's dtype (a spec may restrict a version to some dtypes)."""
    check = getattr(variant, "accepts", None)
    return check(case) if check is not None else True


def agreement(out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float) -> tuple[float | None, bool]:
    """(max |out - ref|, within SDPA_SLACK x the tolerance everywhere). NaN or never-written (poisoned)
    elements never agree; the maximum is None where it is not a finite number."""
    diff = (out.float() - ref.float()).abs()
    ok = bool((diff <= SDPA_SLACK * (atol + rtol * ref.float().abs())).all())
    worst = float(diff.max()) if diff.numel() else 0.0
    return (worst if worst == worst and worst != float("inf") else None), ok


def attention_sweep(worker, learner) -> dict[str, Any]:
    """Every length of the job's sweep; stops at the first that does not fit in memory or breaks the GPU."""
    job = worker.job.sweep  # {config, lengths, budget_s}
    points: list[dict[str, Any]] = []
    stopped = ""
    for n in job["lengths"]:
        case = sweep_case(worker.spec, job["config"], n)
        if not accepts(worker.variant, case):
            return {
                "points": [],
                "stopped": f"this version does not take {case.dtype} inputs",
                "device": worker.device_info,
            }
        worker.progress(f"timing N={n}")
        try:
            points.append(_measure(worker, learner, case, job))
        except OUT_OF_MEMORY:
            points.append({"N": n, "error": "out of GPU memory"})
            stopped = f"out of GPU memory at N={n}: longer sequences skipped"
        except Exception as exc:  # the learner's code raised: say so at this length
            from grader.child.learner_errors import learner_error

            text = learner_error(exc, worker.learner_path)
            points.append({"N": n, "error": text.splitlines()[0][:300]})
            if "CUDA error" in text or type(exc).__name__ == "AcceleratorError":
                stopped = f"CUDA error at N={n}: the GPU context is lost, longer sequences skipped"
        torch.cuda.empty_cache()  # what a failed length left cached must not count against the next
        if stopped:
            break
    return {"points": points, "stopped": stopped, "device": worker.device_info}


def _measure(worker, learner, case: Case, job: dict[str, Any]) -> dict[str, Any]:
    from grader.child import timing

    inputs = make_inputs(worker.spec, case, worker.job.seed, worker.tensor_device)
    returns = worker.variant.returns_outputs  # a torch operator makes its own outputs
    outputs = {} if returns else make_outputs(worker.spec, case, worker.tensor_device)
    q, k, v = (inputs[name] for name in ("q", "k", "v"))
    got: dict[str, Any] = {}

    def run_learner():
        got["result"] = learner({**inputs, **outputs}, case.params)
        return got["result"]

    def run_sdpa():
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    functions = {"learner": run_learner, "sdpa": run_sdpa}
    measured = timing.time_alternating(functions, budget_s=job["budget_s"])
    extra = {
        who: memory.peak_extra_bytes(fn, returns_outputs=who == "sdpa" or returns)[0] for who, fn in functions.items()
    }
    out = _returned_out(worker.spec, got["result"]) if returns else outputs["out"]
    tol = worker.spec.tolerance_for(case.dtype)
    worst, ok = agreement(out, run_sdpa(), tol.atol, tol.rtol)
    return {
        "N": case.params["N"],
        "ms": measured["learner"]["median_ms"],
        "sdpa_ms": measured["sdpa"]["median_ms"],
        "runs": measured["learner"]["runs"],
        "extra_bytes": extra["learner"],
        "sdpa_extra_bytes": extra["sdpa"],
        "max_abs_diff": worst,
        "agrees": ok,
        "error": "",
    }


def _returned_out(spec: ExerciseSpec, result: Any) -> torch.Tensor:
    """`out` among the outputs an entry point returned (a torch operator), in the spec's order."""
    returned = list(result) if isinstance(result, (tuple, list)) else [result]
    return returned[[o.name for o in spec.outputs].index("out")]
