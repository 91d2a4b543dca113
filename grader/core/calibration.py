"""Calibrated speed thresholds for machines without the solutions (a learner's kit).

`kcourse calibrate` (an instructor, on a GPU) times every solution and records, per exercise, timed
size and GPU model, the solution's time and its fraction of that GPU's measured roofline. At grade
time the bar comes from, in order: the live solution; the calibration for this GPU model; otherwise
the calibrated roofline fraction times this GPU's measured ceiling, labelled as an estimate."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from grader.core.errors import KcourseError
from grader.core.paths import course_root

VERSION = 1


class CalibrationError(KcourseError, ValueError):
    """The calibration file exists but cannot be used; nothing is changed."""


def calibration_path() -> Path:
    override = os.environ.get("KCOURSE_CALIBRATION")
    return Path(override) if override else course_root() / "calibration" / "calibration.json"


def load(path: Path | None = None) -> dict[str, Any]:
    """{exercise:lang: {case: {gpu: entry}}}; empty when there is no file."""
    path = path or calibration_path()
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
        entries = data["entries"]
        for cases in entries.values():
            for gpus in cases.values():
                for entry in gpus.values():
                    float(entry["solution_ms"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CalibrationError(
            f"{path} is corrupt ({type(exc).__name__}: {exc}): restore it from git or run "
            "`kcourse calibrate` on a GPU to write it again"
        ) from None
    return entries


def merge(new_entries: dict[str, Any], path: Path | None = None) -> Path:
    """Add measurements to the file (same exercise, size and GPU replaced); refuse a corrupt file."""
    path = path or calibration_path()
    entries = load(path)
    for key, cases in new_entries.items():
        for case, gpus in cases.items():
            entries.setdefault(key, {}).setdefault(case, {}).update(gpus)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"version": VERSION, "entries": entries}, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path


def entry_from_timing(timing: Any, device: dict[str, Any]) -> dict[str, Any]:
    return {
        "solution_ms": timing.solution_ms,
        "unit": timing.unit,
        "rate": timing.solution_rate,
        "roofline_fraction": (timing.solution_roofline_pct or 0) / 100 or None,
        "copy_gbps": device.get("copy_gbps"),
        "matmul_tflops": device.get("matmul_tflops"),
        "measured_at": time.strftime("%Y-%m-%d"),
    }


def entries_from_result(key: str, result: Any) -> dict[str, Any]:
    """A passed grade's timed sizes as entries for its GPU ({} when it passed nothing or timed nothing).
    Only sizes where the solution itself ran: a figure taken from the calibration is not a new measurement."""
    name = (result.device or {}).get("name")
    if result.status != "passed" or not name:
        return {}
    cases = {
        timing.case: {name: entry_from_timing(timing, result.device)}
        for timing in result.timings
        if timing.solution_source == "live solution" and timing.solution_ms
    }
    return {key: cases} if cases else {}


def lacking(targets: list, entries: dict[str, Any], gpu: str | None) -> list:
    """The targets with a timed size that has no figure for this GPU (`kcourse calibrate --missing`)."""

    def covered(target) -> bool:
        cases = entries.get(target.key, {})
        return all(gpu in cases.get(case.label(), {}) for case in target.spec.performance.cases)

    return [t for t in targets if t.spec.performance.cases and not covered(t)]


def solution_bar(
    calibration: dict[str, Any], case: str, gpu: str, work: float | None, ceiling: float | None
) -> tuple[float, str] | None:
    """(solution milliseconds to compare against, where that figure came from) or None."""
    by_gpu = calibration.get(case, {})
    if gpu in by_gpu:
        return float(by_gpu[gpu]["solution_ms"]), f"calibration for {gpu} ({by_gpu[gpu].get('measured_at', '?')})"
    fractions = [(g, e["roofline_fraction"]) for g, e in by_gpu.items() if e.get("roofline_fraction")]
    if fractions and work and ceiling:
        source_gpu, fraction = fractions[0]
        rate = fraction * ceiling
        return work / rate * 1000, (
            f"ESTIMATE: the solution's {100 * fraction:.0f}% of roofline on {source_gpu} "
            f"applied to this GPU's measured ceiling ({ceiling:.4g})"
        )
    return None


def calibrate(targets: list, grade_fn) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Time every solution on this GPU; returns the new entries and a row per exercise for the table."""
    entries: dict[str, Any] = {}
    rows = []
    for target in targets:
        result = grade_fn(target)
        row = {
            "exercise": target.spec.id,
            "lang": target.variant.lang,
            "status": result.status,
            "case": "",
            "ms": None,
            "roofline_pct": None,
        }
        for case, gpus in entries_from_result(target.key, result).get(target.key, {}).items():
            entries.setdefault(target.key, {}).setdefault(case, {}).update(gpus)
        if result.status == "passed" and result.timings:
            last = result.timings[-1]
            row.update(case=last.case, ms=last.solution_ms, roofline_pct=last.solution_roofline_pct)
        rows.append(row)
    return entries, rows
