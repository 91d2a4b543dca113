"""The child's other jobs besides grading: profiling and tuning the learner's kernel. They reuse the
Worker's loading, inputs and checks, and run in the same sandbox (learner code is untrusted here too)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from grader.checks.checking import judge_output, make_inputs, make_outputs, reference_outputs
from grader.child import loading
from grader.core.spec import Case

PROFILE_CALLS = 5
TOP_ROWS = 12
GPU_WORK = ("kernel", "gpu_memcpy", "gpu_memset")  # trace categories of work on the device
LEARNER_RANGE = "kcourse_learner"  # the NVTX range around the learner's calls: Nsight Compute profiles only these


def profiling_case(worker) -> Case:
    """The largest timed size on a GPU; on the CPU the largest case the interpreter can take."""
    if worker.device == "cuda" and worker.spec.performance.cases:
        return worker.spec.performance.cases[-1]
    return last_cpu_case(worker)


def last_cpu_case(worker) -> Case:
    """The largest case every machine runs (listed last) that this version of the exercise takes."""
    return [c for c in worker.spec.cases if not c.gpu_only and worker.variant.accepts(c)][-1]


def _event_time(event: Any, *names: str) -> float:
    for name in names:
        value = getattr(event, name, None)
        if value:
            return float(value)
    return 0.0


def _profiled_tensors(worker, learner) -> tuple[Case, dict[str, Any]]:
    """The profiling case's inputs and outputs, after two warm-up calls (compilation stays out of the profile)."""
    case = profiling_case(worker)
    inputs = make_inputs(worker.spec, case, worker.job.seed, worker.tensor_device)
    tensors = worker.host_memory({**inputs, **make_outputs(worker.spec, case, worker.tensor_device, inputs)})
    for _ in range(2):
        worker.call(learner, tensors, case, f"profiling {case.label()}")
    return case, tensors


def counters(worker, learner) -> dict[str, Any]:
    """The learner's calls inside one NVTX range, for Nsight Compute (`ncu --nvtx-include`) to profile: the
    child's own start-up work (bandwidth probes, input draws, warm-up) launches kernels too, and a plain
    `--launch-count` would spend itself on those before the learner's first kernel."""
    import torch

    case, tensors = _profiled_tensors(worker, learner)
    gpu = worker.device == "cuda"  # NVTX is CUDA's: on the CPU the calls run plainly
    if gpu:
        torch.cuda.nvtx.range_push(LEARNER_RANGE)
    for _ in range(PROFILE_CALLS):
        worker.call(learner, tensors, case, f"profiling {case.label()}")
    if gpu:
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    return {"case": case.label(), "calls": PROFILE_CALLS}


def profile(worker, learner) -> dict[str, Any]:
    """torch.profiler over a few calls: the top kernels/operators table and a Chrome trace file."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    case, tensors = _profiled_tensors(worker, learner)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if worker.device == "cuda" else [])
    with torch_profile(activities=activities) as prof:
        for _ in range(PROFILE_CALLS):
            worker.call(learner, tensors, case, f"profiling {case.label()}")
    trace = Path(worker.job.trace_path)
    prof.export_chrome_trace(str(trace))
    rows = []
    for event in prof.key_averages():
        rows.append(
            {
                "name": event.key[:90],
                "calls": int(event.count),
                "device_us": _event_time(event, "self_device_time_total", "self_cuda_time_total"),
                "cpu_us": _event_time(event, "self_cpu_time_total"),
            }
        )
    key = "device_us" if worker.device == "cuda" else "cpu_us"
    rows.sort(key=lambda r: r[key], reverse=True)
    return {
        "case": case.label(),
        "calls": PROFILE_CALLS,
        "trace": str(trace),
        "top": rows[:TOP_ROWS],
        **device_concurrency(trace),
    }


def device_concurrency(trace: Path) -> dict[str, Any]:
    """What the trace shows running at once on the GPU (kernels, copies, memsets): the streams that
    carried work, the most operations at one time, and the share of the GPU's busy time with two or
    more — about 0 for copy-compute-copy on one stream, most of it when streams overlap copies with compute."""
    try:
        events = json.loads(trace.read_text()).get("traceEvents", [])
    except (OSError, ValueError, AttributeError):
        return {}
    spans = [
        (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)), (e.get("args") or {}).get("stream"))
        for e in events
        if isinstance(e, dict) and e.get("ph") == "X" and e.get("cat") in GPU_WORK
    ]
    if not spans:
        return {}
    edges = sorted([(start, 1) for start, _, _ in spans] + [(end, -1) for _, end, _ in spans])  # ends first at a tie
    busy = overlapped = 0.0
    active = most = 0
    last = edges[0][0]
    for at, step in edges:
        busy += (at - last) if active >= 1 else 0.0
        overlapped += (at - last) if active >= 2 else 0.0
        active, last = active + step, at
        most = max(most, active)
    return {
        "streams": len({stream for _, _, stream in spans}),
        "most_at_once": most,
        "overlap_pct": round(100 * overlapped / busy, 1) if busy else 0.0,
    }


def configurations(spec, lang: str) -> list[dict[str, Any]]:
    grid = spec.tuning.get(lang, {})
    names = list(grid)
    return [dict(zip(names, values)) for values in itertools.product(*(grid[n] for n in names))]


def config_label(config: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items())


def _config_runner(worker, learner):
    """config -> callable(tensors, params), or an error text. Triton: the values are keyword arguments
    of the entry point; CUDA: each configuration is its own build (-D defines) made by the parent."""
    libraries = worker.job.tune_libraries  # CUDA: {configuration: its library}, those that built
    if not worker.variant.kind_of.nvcc:
        return lambda config: lambda tensors, params: learner(tensors, params, **config)

    def for_config(config):
        label = config_label(config)
        if label not in libraries:
            return "did not compile: " + worker.job.tune_build_errors.get(label, "")[:200]
        return loading.load(worker.variant, worker.learner_path, libraries[label], "learner")

    return for_config


def tune(worker, learner) -> dict[str, Any]:
    """Every configuration: checked on a ragged size with fresh inputs, then timed at the largest size."""
    from grader.child import timing

    check_case = last_cpu_case(worker)
    time_case = worker.spec.performance.cases[-1] if worker.spec.performance.cases else None
    work, ceiling, unit = worker.work_and_ceiling(time_case) if time_case else (None, None, "")
    rows = []
    runner = _config_runner(worker, learner)
    configs = configurations(worker.spec, worker.variant.lang)
    for index, config in enumerate(configs):
        label = config_label(config)
        worker.progress(f"tuning configuration {index + 1} of {len(configs)}: {label}")  # the parent's bar reads it
        row: dict[str, Any] = {
            "config": label,
            "ms": None,
            "rate": None,
            "roofline_pct": None,
            "correct": True,
            "error": "",
        }
        call = runner(config)
        row["error"] = (
            call if isinstance(call, str) else _check_config(worker, call, check_case, worker.job.seed + index)
        )
        row["correct"] = not row["error"]
        if row["correct"] and worker.device == "cuda" and time_case is not None:
            inputs = make_inputs(worker.spec, time_case, worker.job.seed, worker.tensor_device)
            tensors = worker.host_memory(
                {**inputs, **make_outputs(worker.spec, time_case, worker.tensor_device, inputs)}
            )
            measured = timing.time_alternating({"c": lambda: call(tensors, time_case.params)}, budget_s=1.0)
            row["ms"] = measured["c"]["median_ms"]
            if work:
                row["rate"] = work / (row["ms"] / 1000)
                row["roofline_pct"] = 100 * row["rate"] / ceiling if ceiling else None
        rows.append(row)
    timed = [r for r in rows if r["ms"]]
    best = min(timed, key=lambda r: r["ms"]) if timed else None
    return {
        "case": time_case.label() if time_case else "",
        "unit": unit,
        "rows": rows,
        "best": best,
        "speedup": max(r["ms"] for r in timed) / best["ms"] if best else None,
    }


def _check_config(worker, call, case: Case, seed: int) -> str:
    inputs = worker.host_memory(make_inputs(worker.spec, case, seed, worker.tensor_device))
    outputs = worker.host_memory(make_outputs(worker.spec, case, worker.tensor_device, inputs))
    refs = reference_outputs(worker.reference, worker.spec, inputs, case.params)
    try:
        call({**inputs, **outputs}, case.params)
        worker.sync()
    except NotImplementedError as exc:
        return f"not implemented yet: {exc}"
    except Exception as exc:  # a configuration the kernel cannot take (too many registers, ...)
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:150] if str(exc) else ''}"
    for spec_out, ref in zip(worker.spec.outputs, refs):
        result = judge_output(
            worker.spec,
            spec_out,
            outputs[spec_out.name],
            ref,
            worker.spec.tolerance_of(case, spec_out),
            case.label(),
            inputs=inputs,
            params=case.params,
            device=worker.device_info,
        )
        if not result.ok:
            return result.message[:200]
    return ""


def attention_sweep(worker, learner) -> dict[str, Any]:
    """`kcourse compare attention`: this implementation over the sweep's lengths beside torch's SDPA."""
    from grader.child.worker_attention import attention_sweep as sweep

    return sweep(worker, learner)
