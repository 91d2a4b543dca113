"""`kcourse profile` and `kcourse tune`: run the learner's kernel in the sandbox under torch's profiler
(optionally Nsight Compute) or over a grid of configurations, record the findings, format a table.

Each says plainly what this machine could not do: without a GPU, `tune` checks (or compiles) each
configuration and times none, and `profile` shows only torch's operators (the Triton interpreter runs the
kernel in Python, so it has no row of its own). Their records say so too (`timed`, `learner_kernels`), and
`kcourse progress` does not count them for a day that asks for a tuning or a profile (progress.RECORD_SHOWS)."""

from __future__ import annotations

import csv
import io
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from grader.child.worker_tools import LEARNER_RANGE
from grader.core import store
from grader.core.discovery import Target
from grader.core.errors import KcourseError
from grader.core.records import GradeResult
from grader.reports.console import num, table
from grader.reports.progress import profile_kernels, tune_timed
from grader.run.grade import cuda_available, grade, learner_file
from grader.toolchain.build import build_variant, format_resources, gpu_arch

NCU_METRICS = ("Duration", "Memory Throughput", "DRAM Throughput", "Compute (SM) Throughput")
NCU_LAUNCHES = 20  # kernels profiled inside the learner's range: enough for a multi-kernel submission
NOT_LEARNER_KERNELS = ("at::", "void at::", "distribution", "elementwise_kernel", "fill", "cub::")


class ToolError(KcourseError, RuntimeError):
    """The learner's code could not be profiled or tuned; the message is the grader's verdict."""


class CaseError(ToolError):
    """--case names no case this version can run here (a usage error: exit status 2)."""


def failure_message(result: GradeResult) -> str:
    """The learner's failure as the child reported it (a crash, a timeout, an exception, a stub)."""
    bad = [c for c in result.checks if c.status in ("failed", "error")]
    return bad[0].message if bad else result.verdict


def run_profile(
    target: Target, out_dir: Path, submission: Path | None = None, source: str = "learner", ncu: bool = False
) -> dict[str, Any]:
    """torch.profiler's table and trace; with `ncu`, a second run under Nsight Compute (the two
    profilers cannot share one process: both want the GPU's performance counters)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    trace = out_dir / f"trace_{target.spec.id}_{target.variant.lang}.json"
    ncu_path = shutil.which("ncu") if ncu else None
    if ncu and ncu_path is None:
        raise ToolError("Nsight Compute (ncu) was not found on PATH: install it with the CUDA Toolkit, or drop --ncu")
    if target.variant.kind_of.gpu_to_run and not cuda_available():
        raise ToolError(
            f"no GPU here: {target.spec.id} ({target.variant.lang}) is CUDA code, which this machine can "
            "compile but not run, so there is nothing to profile. Run `kcourse profile` on a machine "
            "with an NVIDIA GPU"
        )
    result = grade(
        target,
        source=source,
        submission=submission,
        mode="profile",
        job_extra={"trace_path": str(trace)},
        record=False,
        timeout_s=target.variant.timeout_s * 3,
    )
    if "profile" not in result.extra:
        raise ToolError(failure_message(result))
    record = {
        "kind": "profile",
        "exercise": target.spec.id,
        "lang": target.variant.lang,
        "at": time.time(),
        "device": result.device.get("name", "CPU"),
        **result.extra["profile"],
        **(_ncu_metrics(target, submission, source, ncu_path) if ncu_path else {"ncu": []}),
    }
    record["learner_kernels"] = profile_kernels(record)  # none on a CPU: torch's operators only
    store.append(record)
    return record


def _ncu_metrics(target: Target, submission: Path | None, source: str, ncu_path: str) -> dict[str, Any]:
    """Speed-of-Light rows of the learner's kernels, or a note saying why Nsight Compute gave none."""
    log = Path(tempfile.mkdtemp(prefix="kcourse-ncu-")) / "ncu.csv"
    wrapper = [
        ncu_path,
        "--clock-control",
        "none",
        "--csv",
        "--section",
        "SpeedOfLight",
        "--target-processes",
        "all",
        "--nvtx",
        "--nvtx-include",
        f"{LEARNER_RANGE}/",
        "--launch-count",
        str(NCU_LAUNCHES),
        "--log-file",
        str(log),
    ]
    result = grade(
        target,
        source=source,
        submission=submission,
        mode="counters",
        record=False,
        job_extra={"wrapper": wrapper},
        timeout_s=target.variant.timeout_s * 10,
    )
    text = log.read_text(errors="replace") if log.exists() else ""
    rows = parse_ncu(text)
    return {"ncu": rows} if rows else {"ncu": [], "ncu_note": _ncu_silence(text, result)}


def _ncu_silence(text: str, result: Any) -> str:
    """Why an Nsight Compute run recorded no kernel of the learner's: its own errors first, then the grade's."""
    errors = [
        line.strip()
        for line in text.splitlines()
        if line.startswith(("==ERROR==", "==WARNING==")) and "Note:" not in line
    ]  # not its clock-control note
    if errors:
        return "Nsight Compute said: " + " | ".join(errors[:3])
    if "counters" not in result.extra:
        return f"the run under Nsight Compute did not finish: {failure_message(result)}"
    return (
        "Nsight Compute profiled no kernel inside the learner's calls (all were library kernels, or the "
        "calls launched none): check that your code launches its own kernel"
    )


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
            rows.append(
                {
                    "kernel": kernel[:60],
                    "metric": metric,
                    "value": row.get("Metric Value", ""),
                    "unit": row.get("Metric Unit", ""),
                }
            )
    return rows


def format_profile(record: dict[str, Any]) -> str:
    rows = [[r["name"], r["calls"], num(r["device_us"], "{:.1f}"), num(r["cpu_us"], "{:.1f}")] for r in record["top"]]
    text = (
        f"{record['exercise']} ({record['lang']}) at {record['case']}, {record['calls']} calls on {record['device']}\n"
        + table(rows, ["kernel / operator", "calls", "device µs", "host µs"])
        + f"\ntrace (open in chrome://tracing or ui.perfetto.dev): {record['trace']}"
    )
    if record.get("streams"):  # from the trace: did copies and kernels run at the same time?
        text += (
            f"\nGPU work on {record['streams']} stream(s) over the {record['calls']} calls; at most "
            f"{record['most_at_once']} operations at once; two or more at once {record['overlap_pct']:.0f}% of the busy time"
        )
    if not record.get("learner_kernels", profile_kernels(record)):
        text += "\n" + not_your_kernel(record)
    if record.get("ncu_note"):
        text += "\nNsight Compute: nothing recorded. " + record["ncu_note"]
    if record.get("ncu"):
        text += "\nNsight Compute:\n" + table(
            [[m["kernel"], m["metric"], f"{m['value']} {m['unit']}"] for m in record["ncu"]],
            ["kernel", "metric", "value"],
        )
    return text


def not_your_kernel(record: dict[str, Any]) -> str:
    """What a profile without the learner's kernel could not show, and where to get one that does."""
    where = (
        " (no GPU here: the Triton interpreter runs your kernel in Python, so torch.profiler sees only the "
        "operators around it)"
        if str(record.get("device", "")).startswith("CPU")
        else ""
    )
    return (
        f"your kernel is NOT in this profile{where}: it shows torch's operators only. It does not count as the "
        f"plan's profile: run `kcourse profile {record['exercise']}` on a machine with an NVIDIA GPU"
    )


def _tunable_instead(target: Target) -> str:
    """What to do where this version has nothing to tune: the versions that do, or timing edits by hand."""
    others = sorted(lang for lang in target.spec.tuning if lang in target.spec.variants)
    if others:
        return "tune a version that has them: " + " or ".join(
            f"`kcourse tune {target.spec.id} --lang {x}`" for x in others
        )
    return f"change the sizes in your file and time each with `kcourse grade {target.spec.id}`"


def run_tune(
    target: Target, submission: Path | None = None, source: str = "learner", show_progress: bool | None = None
) -> dict[str, Any]:
    """Each configuration of the spec's [tuning.<lang>] checked, and timed on a GPU. At a terminal, a progress bar
    on stderr meanwhile (configurations compiled, then tried: which one now), unless `show_progress` is False
    (None: unless the command runs with --json); elsewhere nothing more is printed."""
    from grader.child.worker_tools import config_label, configurations
    from grader.commands.batch_progress import StepBar

    if not target.spec.tuning.get(target.variant.lang):
        raise ToolError(
            f"{target.spec.id} ({target.variant.lang}) exposes no tunable parameters "
            "(its spec.toml has no [tuning." + target.variant.lang + "] table): " + _tunable_instead(target)
        )
    labels = [config_label(c) for c in configurations(target.spec, target.variant.lang)]
    job_extra, builds = {}, {}
    if target.variant.kind_of.nvcc:
        builds = _build_configurations(target, learner_file(target, source, submission), show_progress)
        job_extra = {
            "tune_libraries": {label: b.library for label, b in builds.items() if b.ok},
            "tune_build_errors": {label: b.log for label, b in builds.items() if not b.ok},
        }
        if not cuda_available():
            return _record_tune(target, "CPU (compile only)", _compiled_only(builds))
    bar = StepBar("tuning", len(labels), enabled=show_progress)
    bar.on_step = lambda step: follow_tuning(bar, step, labels)  # the grade reports the child's steps to the bar
    with bar:
        result = grade(
            target,
            source=source,
            submission=submission,
            mode="tune",
            record=False,
            job_extra=job_extra,
            timeout_s=target.variant.timeout_s * 5,
        )
    if "tune" not in result.extra:
        raise ToolError(failure_message(result))
    found = result.extra["tune"]
    for row in found["rows"]:  # what the compiler said of each CUDA configuration
        if row["config"] in builds:
            row["resources"] = format_resources(builds[row["config"]].resources[:1])
    return _record_tune(target, result.device.get("name", "CPU"), found)


# The child's step while it tries a configuration (worker_tools.tune): "tuning configuration 2 of 4: num_warps=4".
TUNING_STEP = r"tuning configuration (\d+) of \d+: "


def follow_tuning(bar, step: str, labels: list[str]) -> None:
    """The bar at the configuration the child says it tries: its number, named by this process's own list of them
    (the child's words are not shown as a configuration's name); any other step (loading your code) as it is."""
    step = str(step or "")
    tried = re.match(TUNING_STEP, step)
    if tried is None:
        bar.step = step
        return
    number = int(tried.group(1))
    if 1 <= number <= len(labels):
        bar.done, bar.item, bar.step = number - 1, labels[number - 1], ""


def _build_configurations(target: Target, path: Path, show_progress: bool | None = None) -> dict[str, Any]:
    from grader.child.worker_tools import config_label, configurations
    from grader.commands.batch_progress import StepBar

    arch = gpu_arch() if cuda_available() else None
    builds = {}
    configs = configurations(target.spec, target.variant.lang)
    with StepBar("compiling", len(configs), enabled=show_progress) as bar:
        for config in configs:
            bar.working_on(config_label(config))
            builds[config_label(config)] = build_variant(path, target.variant, arch, defines=config)
            bar.advance()
    return builds


def _compiled_only(builds: dict[str, Any]) -> dict[str, Any]:
    rows = [
        {
            "config": label,
            "ms": None,
            "rate": None,
            "roofline_pct": None,
            "correct": None if b.ok else False,
            "error": "" if b.ok else "did not compile: " + b.log[:200],
            "resources": format_resources(b.resources[:1]),
        }
        for label, b in builds.items()
    ]
    return {"case": "", "unit": "", "rows": rows, "best": None, "speedup": None}


def _record_tune(target: Target, device: str, found: dict[str, Any]) -> dict[str, Any]:
    record = {
        "kind": "tune",
        "exercise": target.spec.id,
        "lang": target.variant.lang,
        "at": time.time(),
        "device": device,
        **found,
    }
    record["timed"] = tune_timed(record)  # False without a GPU: checked or compiled, never timed
    store.append(record)
    return record


def _correct_text(correct: bool | None, error: str) -> str:
    return "not run" if correct is None else "yes" if correct else "NO: " + error[:60]


def format_tune(record: dict[str, Any]) -> str:
    rows = [
        [
            r["config"],
            num(r["ms"]),
            num(r["rate"]),
            num(r["roofline_pct"], "{:.0f}%"),
            _correct_text(r["correct"], r["error"]),
            r.get("resources", ""),
        ]
        for r in record["rows"]
    ]
    name = f"{record['exercise']} ({record['lang']}) on {record['device']}"
    if tune_timed(record):
        header = f"{name}, timed at {record['case'] or '—'}"
    elif record["device"] == "CPU (compile only)":
        header = f"{name}: NOTHING TIMED — no GPU here, so each configuration was compiled (see the compiler report), not run"
    else:
        header = f"{name}: NOTHING TIMED — " + (
            "no GPU here, so each configuration was checked for correctness on a small case only"
            if record["device"].startswith("CPU")
            else "no configuration was both correct and timed"
        )
    text = (
        header
        + "\n"
        + table(rows, ["configuration", "ms", record["unit"] or "rate", "% roofline", "correct", "compiler report"])
    )
    if record.get("best"):
        text += f"\nbest: {record['best']['config']} ({record['speedup']:.2f}× the slowest correct configuration)"
    elif record["device"].startswith("CPU"):
        at = f" at {record['case']}" if record.get("case") else ""
        text += (
            f"\nthis tuning does not count as the plan's tuning: run `kcourse tune {record['exercise']}` on a "
            f"machine with an NVIDIA GPU to time each configuration{at}"
        )
    return text
