"""`kcourse profile` and `kcourse tune`: run the learner's kernel in the sandbox under torch's profiler
(optionally Nsight Compute) or over a grid of configurations, record the findings, format a table."""

from __future__ import annotations

import csv
import io
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from grader import store
from grader.console import num, table
from grader.discovery import Target
from grader.grade import grade
from grader.records import GradeResult

NCU_METRICS = ("Duration", "Memory Throughput", "DRAM Throughput", "Compute (SM) Throughput")
NOT_LEARNER_KERNELS = ("at::", "void at::", "distribution", "elementwise_kernel", "fill", "cub::")


class ToolError(RuntimeError):
    """The learner's code could not be profiled or tuned; the message is the grader's verdict."""


def _failure(result: GradeResult) -> str:
    bad = [c for c in result.checks if c.status in ("failed", "error")]
    return bad[0].message if bad else result.verdict


def run_profile(target: Target, out_dir: Path, submission: Path | None = None, source: str = "learner",
                ncu: bool = False) -> dict[str, Any]:
    """torch.profiler's table and trace; with `ncu`, a second run under Nsight Compute (the two
    profilers cannot share one process: both want the GPU's performance counters)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    trace = out_dir / f"trace_{target.spec.id}_{target.variant.lang}.json"
    ncu_path = shutil.which("ncu") if ncu else None
    if ncu and ncu_path is None:
        raise ToolError("Nsight Compute (ncu) was not found on PATH: install it with the CUDA Toolkit, or drop --ncu")
    result = grade(target, source=source, submission=submission, mode="profile", job_extra={"trace_path": str(trace)},
                   record=False, timeout_s=target.variant.timeout_s * 3)
    if "profile" not in result.extra:
        raise ToolError(_failure(result))
    record = {"kind": "profile", "exercise": target.spec.id, "lang": target.variant.lang, "at": time.time(),
              "device": result.device.get("name", "CPU"), **result.extra["profile"],
              "ncu": _ncu_metrics(target, submission, source, ncu_path) if ncu_path else []}
    store.append(record)
    return record


def _ncu_metrics(target: Target, submission: Path | None, source: str, ncu_path: str) -> list[dict[str, str]]:
    log = Path(tempfile.mkdtemp(prefix="kcourse-ncu-")) / "ncu.csv"
    wrapper = [ncu_path, "--clock-control", "none", "--csv", "--section", "SpeedOfLight", "--target-processes", "all",
               "--launch-count", "60", "--log-file", str(log)]
    grade(target, source=source, submission=submission, mode="profile", record=False,
          job_extra={"trace_path": str(log.with_suffix(".json")), "wrapper": wrapper},
          timeout_s=target.variant.timeout_s * 10)
    return parse_ncu(log.read_text()) if log.exists() else []


def parse_ncu(text: str) -> list[dict[str, str]]:
    """Key Speed-of-Light metrics of the learner's kernels from `ncu --csv` output."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    rows, seen = [], set()
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        kernel = row.get("Kernel Name", "")
        if any(kernel.startswith(p) or p in kernel for p in NOT_LEARNER_KERNELS):
            continue
        metric = row.get("Metric Name", "")
        if metric in NCU_METRICS and (kernel, metric) not in seen:
            seen.add((kernel, metric))
            rows.append({"kernel": kernel[:60], "metric": metric, "value": row.get("Metric Value", ""),
                         "unit": row.get("Metric Unit", "")})
    return rows


def format_profile(record: dict[str, Any]) -> str:
    rows = [[r["name"], r["calls"], num(r["device_us"], "{:.1f}"), num(r["cpu_us"], "{:.1f}")] for r in record["top"]]
    text = (f"{record['exercise']} ({record['lang']}) at {record['case']}, {record['calls']} calls on {record['device']}\n"
            + table(rows, ["kernel / operator", "calls", "device µs", "host µs"])
            + f"\ntrace (open in chrome://tracing or ui.perfetto.dev): {record['trace']}")
    if record.get("ncu"):
        text += "\nNsight Compute:\n" + table([[m["kernel"], m["metric"], f"{m['value']} {m['unit']}"] for m in record["ncu"]],
                                             ["kernel", "metric", "value"])
    return text


def run_tune(target: Target, submission: Path | None = None, source: str = "learner") -> dict[str, Any]:
    if not target.spec.tuning.get(target.variant.lang):
        raise ToolError(f"{target.spec.id} ({target.variant.lang}) exposes no tunable parameters "
                        "(its spec.toml has no [tuning." + target.variant.lang + "] table)")
    result = grade(target, source=source, submission=submission, mode="tune", record=False,
                   timeout_s=target.variant.timeout_s * 5)
    if "tune" not in result.extra:
        raise ToolError(_failure(result))
    record = {"kind": "tune", "exercise": target.spec.id, "lang": target.variant.lang, "at": time.time(),
              "device": result.device.get("name", "CPU"), **result.extra["tune"]}
    store.append(record)
    return record


def format_tune(record: dict[str, Any]) -> str:
    rows = [[r["config"], num(r["ms"]), num(r["rate"]), num(r["roofline_pct"], "{:.0f}%"),
             "yes" if r["correct"] else "NO: " + r["error"][:60]] for r in record["rows"]]
    text = (f"{record['exercise']} ({record['lang']}) on {record['device']}, timed at {record['case']}\n"
            + table(rows, ["configuration", "ms", record["unit"] or "rate", "% roofline", "correct"]))
    if record.get("best"):
        text += f"\nbest: {record['best']['config']} ({record['speedup']:.2f}× the slowest correct configuration)"
    elif record["device"].startswith("CPU"):
        text += "\nno GPU: configurations were checked for correctness only, not timed"
    return text
