"""The speed verdict, decided in the parent from the child's measurements, which it cross-checks.

The child times the learner, the solution and torch alternately with CUDA events (timing.py). Those
figures come from the learner's process, so the parent believes them only as far as its own clock
agrees: the claimed runs must fit in the wall-clock time the timed phase took, and the claimed ratio
must agree with a short back-to-back probe of each contestant timed by the parent's clock."""

from __future__ import annotations

from typing import Any

from grader.checks.inputs import element_size
from grader.core import exprs
from grader.core.records import FAILED, PASSED, SKIPPED, Check, Timing
from grader.core.spec import Case, ExerciseSpec, Variant
from grader.core.vocabulary import CheckName, Code

PROBE_AGREEMENT = 1.6  # claimed ratio may exceed the probe's by this factor (launch overhead, L2 warmth)
LAUNCH_SLACK_S = 50e-6  # a probe run includes the host's launch latency, which events do not time
PROBE_BURSTS = 3  # the wall-clock probe times each contestant this many times and keeps the fastest (worker._probe)
WALL_SLACK = 1.10  # claimed device time may exceed the phase's wall clock by 10% (clock granularity)
# A probe burst whose processes waited this share of its wall clock for a CPU was starved by the host: its
# disagreement gets no verdict rather than an accusation (starved). A GPU-bound burst sleeps in its synchronise
# and waits for no CPU; a call path starved of CPU leaves the GPU idle while it waits.
HOST_WAIT_SHARE = 0.25


def work_model(spec: ExerciseSpec, variant: Variant) -> tuple[str | None, str | None, bool]:
    """(flops, bytes, compute-bound) of the version timed: its own expressions where it has them
    (spec.Variant.flops), else the exercise's [performance] ones."""
    perf = spec.performance
    flops, nbytes = variant.flops or perf.flops, variant.bytes or perf.bytes
    return flops, nbytes, perf.bound == "compute" or (not perf.bound and flops is not None and nbytes is None)


def expression_names(case: Case) -> dict[str, Any]:
    """What a spec's flops and bytes expressions may name: the case's parameters and `elem`, its element size."""
    return {**case.params, "elem": element_size(case.dtype)}


def work_and_ceiling(
    spec: ExerciseSpec, variant: Variant, case: Case, device: dict[str, Any]
) -> tuple[float | None, float | None, str]:
    """(work in the reported unit, this GPU's ceiling in that unit, unit) for one timed size."""
    flops, nbytes, compute_bound = work_model(spec, variant)
    names = expression_names(case)
    host = variant.kind_of.host_side  # host transfers have no device roofline
    if compute_bound:
        return exprs.evaluate(flops, names) / 1e12, None if host else device.get(_matmul_ceiling(case.dtype)), "TFLOP/s"
    if nbytes:
        return exprs.evaluate(nbytes, names) / 1e9, None if host else device.get("copy_gbps"), "GB/s"
    return None, None, ""


def _matmul_ceiling(dtype: str) -> str:
    """The device figure a compute-bound case is measured against: float32 cuBLAS for float32 work; half
    precision runs on tensor cores, far above it, and has its own figure, cuBLAS in that dtype
    (timing.CEILINGS). A device record without it (an old one) gives no "% of roofline" rather than a
    percentage of the wrong ceiling."""
    return f"matmul_tflops_{dtype}" if dtype in ("float16", "bfloat16") else "matmul_tflops"


def timing_record(spec: ExerciseSpec, variant: Variant, case: Case, measured: dict, device: dict) -> Timing:
    record = Timing(case=case.label(), runs=int(measured["learner"]["runs"]))
    for who in ("learner", "solution", "torch"):
        if who in measured:
            setattr(record, f"{who}_ms", float(measured[who]["median_ms"]))
    record.learner_spread = measured["learner"].get("spread")
    if "learner_baseline" in measured:  # spec performance.baseline_args: the learner's own code, e.g. on one stream
        record.baseline_ms = float(measured["learner_baseline"]["median_ms"])
        record.baseline_args = " ".join(f"{k}={v}" for k, v in spec.performance.baseline_args.items())
    record.solution_spread = measured.get("solution", {}).get("spread")
    work, ceiling, record.unit = work_and_ceiling(spec, variant, case, device)
    for who in ("learner", "solution", "torch"):
        ms = getattr(record, f"{who}_ms")
        if work is not None and ms:
            setattr(record, f"{who}_rate", work / (ms / 1000))
    if ceiling and record.learner_rate:
        record.roofline_pct = 100 * record.learner_rate / ceiling
        if record.solution_rate:
            record.solution_roofline_pct = 100 * record.solution_rate / ceiling
    flops_model, bytes_model, _ = work_model(spec, variant)
    names = {**case.params, "elem": element_size(case.dtype)}
    if flops_model and bytes_model and record.learner_ms:
        flops = exprs.evaluate(flops_model, names)
        record.intensity = flops / exprs.evaluate(bytes_model, names)
        record.learner_tflops = flops / 1e12 / (record.learner_ms / 1000)
    if record.solution_ms and record.learner_ms:
        record.ratio = record.solution_ms / record.learner_ms
        record.solution_source = "live solution"
    return record


def implausible_claim(measured: dict, wall_s: float) -> str | None:
    """Claimed device time that does not fit in the wall-clock time the phase took, or a run that took no time."""
    instant = sorted(who for who, m in measured.items() if not float(m["median_ms"]) > 0)
    if instant:
        return f"your run reported {', '.join(instant)} taking no time at all (a median of {measured[instant[0]]['median_ms']} ms)"
    claimed_s = sum(float(m["median_ms"]) * int(m["runs"]) for m in measured.values()) / 1000
    if claimed_s > wall_s * WALL_SLACK + 0.05:
        return (
            f"the timings your run reported add up to {claimed_s:.2f} s, but the timed phase took {wall_s:.2f} s "
            "by the grader's clock"
        )
    return None


def fastest_bursts(bursts: list[tuple[str, float, int]]) -> dict[str, dict[str, float]]:
    """Each contestant's fastest burst of the probe ((who, wall seconds, runs) each): the one least slowed
    by other work on the host. A busy host only ever adds time, so the fastest is the fairest."""
    probe: dict[str, dict[str, float]] = {}
    for who, wall_s, runs in bursts:
        kept = probe.get(who)
        if kept is None or wall_s / max(1, runs) < kept["wall_s"] / max(1, kept["runs"]):
            probe[who] = {"wall_s": wall_s, "runs": runs}
    return probe


def starved(
    record: Timing, probe: dict[str, dict[str, float]], bursts: list[tuple[str, float, int]], waits: list[float | None]
) -> dict[str, float] | None:
    """The learner's fastest probe burst (the one the verdict reads, `probe` as fastest_bursts made it), with the
    seconds its processes waited for a CPU, where that wait is HOST_WAIT_SHARE or more of its wall clock and at
    least half of the time the claimed speed does not account for; None where it is less or unknown. A patched
    timer's burst is GPU-bound: its excess is most of its wall clock, and it waits for a CPU only while it queues
    its runs."""
    learner = probe.get("learner")
    if learner is None:
        return None
    wall, runs = learner["wall_s"], learner["runs"]
    wait = next(w for burst, w in zip(bursts, waits) if burst == ("learner", wall, runs))
    excess = wall - runs * (_claim_bound_s(record) + _baseline_s(probe))
    if wait is None or wait < HOST_WAIT_SHARE * wall or wait < excess / 2:
        return None
    return {"wall_s": wall, "runs": runs, "waited_s": wait}


def _baseline_s(probe: dict[str, dict[str, float]]) -> float:
    """The baseline's (flushes only) seconds a run, in the fastest bursts; 0 where there is none."""
    baseline = probe.get("baseline")
    return baseline["wall_s"] / max(1, baseline["runs"]) if baseline else 0.0


def _claim_bound_s(record: Timing) -> float:
    """The most a probe run may take, less the baseline, and still agree with the learner's claimed time a call."""
    return (record.learner_ms or 0) / 1000 * PROBE_AGREEMENT + LAUNCH_SLACK_S


def probe_disagrees(record: Timing, probe: dict[str, dict[str, float]]) -> str | None:
    """The child's figures against the parent's own clock around back-to-back runs (each run: flush, call;
    a synchronise at the burst's end). The baseline (flushes only) is subtracted; what is left is the
    kernel plus its launch latency, never less than the kernel: a claim far below it is not believed."""
    if "learner" not in probe or "baseline" not in probe:
        return None
    base = _baseline_s(probe)
    per_run = {who: max(0.0, p["wall_s"] / max(1, p["runs"]) - base) for who, p in probe.items() if who != "baseline"}
    claimed_s = (record.learner_ms or 0) / 1000
    if _claim_bound_s(record) < per_run["learner"]:
        return (
            f"your run reported {1000 * claimed_s:.3g} ms per call, but the grader's own clock measured "
            f"{1000 * per_run['learner']:.3g} ms"
        )
    if record.ratio is None or "solution" not in per_run or record.solution_source != "live solution":
        return None
    probe_ratio = (per_run["solution"] + LAUNCH_SLACK_S) / max(per_run["learner"], 1e-9)
    if record.ratio > max(probe_ratio, 1.0) * PROBE_AGREEMENT:
        return (
            f"your run reported {record.ratio:.2f}× the solution's speed, but the grader's own clock measured "
            f"about {probe_ratio:.2f}× (you {1000 * per_run['learner']:.3g} ms, solution "
            f"{1000 * per_run['solution']:.3g} ms per call)"
        )
    return None


def apply_calibration(spec, variant, record: Timing, calibration: dict, device: dict) -> bool:
    from grader.core.calibration import solution_bar

    case = next(c for c in spec.performance.cases if c.label() == record.case)
    work, ceiling, _ = work_and_ceiling(spec, variant, case, device)
    bar = solution_bar(calibration or {}, record.case, device.get("name", ""), work, ceiling)
    if bar is None:
        return False
    record.solution_ms, record.solution_source = bar
    record.ratio = record.solution_ms / record.learner_ms
    if work:
        record.solution_rate = work / (record.solution_ms / 1000)
    return True


def baseline_speedup(record: Timing) -> float | None:
    """How much faster the learner's code is than itself run with the spec's baseline_args (one stream)."""
    return record.baseline_ms / record.learner_ms if record.baseline_ms and record.learner_ms else None


def verdict(spec, variant, record: Timing | None, calibration: dict | None, device: dict) -> Check:
    threshold = spec.performance.threshold
    if record is None:
        return Check(CheckName.SPEED, SKIPPED, "this exercise has no timed sizes", {"code": Code.NO_TIMED_SIZES})
    if not record.learner_ms or record.learner_ms <= 0:  # the judge fails such a claim first (implausible_claim)
        return Check(
            CheckName.SPEED,
            FAILED,
            f"your timed run reported taking {record.learner_ms} ms: no kernel runs in no time",
            {"code": Code.IMPLAUSIBLE_TIMING},
        )
    if record.solution_ms is None and not apply_calibration(spec, variant, record, calibration or {}, device):
        return Check(
            CheckName.SPEED,
            SKIPPED,
            f"no solution here to time against (you: {record.learner_ms:.4g} ms) and no "
            "calibration for this exercise: ask your instructor for calibration/calibration.json",
            {"code": Code.NO_SOLUTION},
        )
    rate = f", {record.learner_rate:.4g} {record.unit}" if record.learner_rate else ""
    roof = f" ({record.roofline_pct:.0f}% of this GPU's measured roofline)" if record.roofline_pct else ""
    speedup = baseline_speedup(record)
    own = (
        f" — {speedup:.2f}× the speed of your own code with {record.baseline_args} ({record.baseline_ms:.4g} ms)"
        if speedup
        else ""
    )
    text = (
        f"{record.case}: {record.learner_ms:.4g} ms{rate}{roof}{own}; solution {record.solution_ms:.4g} ms "
        f"[{record.solution_source}]; your speed is {record.ratio:.2f}× the solution's (needed: {threshold:.2f}×)"
    )
    status = PASSED if record.ratio >= threshold else FAILED
    hint = "" if status == PASSED else " — see the exercise README's ladder for the next step"
    return Check(
        CheckName.SPEED,
        status,
        text + hint,
        {
            "ratio": record.ratio,
            "threshold": threshold,
            "bar": record.solution_source,
            "roofline_pct": record.roofline_pct,
            "baseline_speedup": speedup,
            "code": Code.OK if status == PASSED else Code.SLOW,
        },
    )
