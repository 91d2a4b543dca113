"""`kcourse compare attention`: every attention implementation the learner has graded, over a ladder of
sequence lengths, beside torch's scaled_dot_product_attention (the plan's benchmarks/compare_all.py).

An attention implementation is any exercise variant whose spec takes q, k, v of shape (B, H, N, d) and
writes `out` of that shape (naive_attention, flash_attention_v1 in Triton and CUDA, flash_attention_v2,
...): a new one joins the sweep by its spec alone. It takes part when the learner's file for it exists
and that file's latest grade passed numerics; the others are listed with the reason. Each runs in the
sandboxed child (worker_attention.py), timed at each length beside SDPA on the same inputs, with its peak
extra GPU memory (memory.py). One `compare_attention` record holds the sweep; `kcourse report week10`
renders its tables and plots, and the week-11 summary and the final report repeat them."""

from __future__ import annotations

import random
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from grader.core import store
from grader.core.discovery import Target, all_targets
from grader.core.errors import KcourseError
from grader.reports.console import table

KIND = "compare_attention"  # the record kind (a plan unit can require it: requires = ["compare_attention"])
REPORT_KEY = "week10"  # the 11-week plan's week that shows the sweep (templates/week10_attention.md.j2)
LENGTHS = (512, 1024, 2048, 4096, 8192, 16384)
CONFIG = {"B": 1, "H": 16, "d": 64, "dtype": "float16"}
BUDGET_S = 1.0  # timing budget per length (timing.time_alternating: at least 15 runs each)
TIMEOUT_FACTOR = 4  # the child's limit: the variant's timeout x this (a length ladder, each compiled and tuned)
QKV = ("q", "k", "v")
OOM = "out of GPU memory"


class AttentionCompareError(KcourseError, RuntimeError):
    """The sweep cannot run here (no GPU, nothing graded); the message says what to do."""


@dataclass
class Contestant:
    target: Target
    path: Path
    reason: str = ""  # why it does not take part; "" when it does

    @property
    def label(self) -> str:
        return f"{self.target.spec.id} ({self.target.variant.lang})"


# --- which implementations ------------------------------------------------------------------------


def is_attention(spec) -> bool:
    """Inputs q, k, v of shape (B, H, N, d) and an output `out` of that shape: the sweep can call it."""
    shape = ["B", "H", "N", "d"]
    inputs = {t.name: t.shape for t in spec.inputs}
    outputs = {t.name: t.shape for t in spec.outputs}
    return set(inputs) == set(QKV) and all(s == shape for s in inputs.values()) and outputs.get("out") == shape


def attention_targets() -> list[Target]:
    """Every attention variant in the kit, in the order the default plan teaches them (then by name)."""
    from grader.core.plans import default_plan, load_plans

    plans = load_plans()
    order = [(e.id, e.lang) for u in default_plan(plans).units for e in u.exercises] if plans else []
    targets = [t for t in all_targets() if is_attention(t.spec)]

    def position(t: Target) -> tuple[int, str, str]:
        key = (t.spec.id, t.variant.lang)
        return (order.index(key) if key in order else len(order), t.spec.id, t.variant.lang)

    return sorted(targets, key=position)


def _relative(path: Path) -> str:
    from grader.core.paths import course_root

    try:
        return str(path.resolve().relative_to(course_root()))
    except ValueError:
        return str(path)


def grade_command(target: Target) -> str:
    lang = f" --lang {target.variant.lang}" if len(target.spec.variants) > 1 else ""
    return f"kcourse grade {target.spec.id}{lang}"


def latest_grade_of(target: Target, path: Path) -> dict[str, Any] | None:
    """The newest learner grade of this very file (a `--file try.py` grade is another file's)."""
    rel = _relative(path)

    def of_this_file(record: dict[str, Any]) -> bool:
        if record.get("source") in store.INSTRUCTOR_SOURCES:
            return False
        return record.get("file") == rel if record.get("file") else record.get("source") == "learner"

    return store.latest_per_exercise("grade", keep=of_this_file).get(target.key)


def passed_numerics(record: dict[str, Any]) -> bool:
    checks = [c for c in record.get("checks") or [] if isinstance(c, dict)]
    return record.get("status") == "passed" or any(
        c.get("name") == "numerics" and c.get("status") == "passed" for c in checks
    )


def why_not(target: Target, path: Path, source: str) -> str:
    """ "" when the implementation takes part, else the reason (and what to do)."""
    from grader.run.grade import learner_file

    if not path.exists():
        kit = " (solutions/ is absent from a learner's kit)" if source == "solutions" else ""
        return f"{_relative(path)} does not exist{kit}"
    if source == "solutions":
        return ""  # the instructor's solutions: known good, not gated on a grade
    record = latest_grade_of(target, path)
    if record is None:
        other = store.latest_grades().get(target.key)
        also = (
            (
                f" (your latest grade was of {Path(str(other.get('file') or other.get('source'))).name}; the sweep runs "
                f"the exercise's own file {_relative(learner_file(target, source, None))})"
            )
            if other
            else ""
        )
        return (
            f"not graded yet{also}: run `{grade_command(target)}` first; only a file whose latest grade passed "
            "numerics is compared"
        )
    if not passed_numerics(record):
        verdict = str(record.get("verdict") or record.get("status") or "no verdict").splitlines()[0][:120]
        return (
            f"its latest grade did not pass numerics ({record.get('status', '?')}: {verdict}): fix it and run "
            f"`{grade_command(target)}` again"
        )
    return ""


def takes_dtype(target: Target, dtype: str) -> bool:
    """Whether the version runs inputs of `dtype` (a spec may restrict a version: variants.<lang>.dtypes)."""
    dtypes = getattr(target.variant, "dtypes", None)
    return dtypes is None or dtype in dtypes


def contestants(source: str = "learner", dtype: str = CONFIG["dtype"]) -> list[Contestant]:
    from grader.run.grade import learner_file

    found = []
    for target in attention_targets():
        path = learner_file(target, source, None)
        reason = why_not(target, path, source)
        if not reason and not takes_dtype(target, dtype):
            takes = target.variant.dtypes
            reason = f"this version takes {', '.join(takes)} inputs, not {dtype}: compare with --dtype {takes[0]}"
        found.append(Contestant(target, path, reason))
    return found


# --- running the sweep --------------------------------------------------------------------------------


def flops(config: dict[str, Any], n: int) -> float:
    """Q K^T and P V, 2 FLOPs per multiply-add, no causal mask: the usual attention figure."""
    return 4.0 * config["B"] * config["H"] * n * n * config["d"]


def roster(everyone: list[Contestant]) -> str:
    """What would run and what would not, and why: one line each."""
    return "\n".join(f"  {c.label}: {c.reason or 'ready'}" for c in everyone) or "  (the kit has no attention exercise)"


def require_gpu(source: str, dtype: str = CONFIG["dtype"]) -> None:
    from grader.run.grade import cuda_available

    if not cuda_available():
        raise AttentionCompareError(
            "kcourse compare attention times each implementation on an NVIDIA GPU, and none was found here "
            "(or KCOURSE_DEVICE=cpu is set): run it on a GPU machine. Nothing was timed or recorded. Here, "
            "`kcourse grade <exercise>` checks numerics (Triton under the interpreter, CUDA compiled only).\n"
            "On a GPU it would compare:\n" + roster(contestants(source, dtype))
        )


def sweep(
    source: str = "learner",
    config: dict[str, Any] | None = None,
    lengths: tuple[int, ...] = LENGTHS,
    seed: int | None = None,
    timeout_s: float | None = None,
    on_done: Callable[[dict[str, Any]], None] = lambda row: None,
    show_progress: bool | None = None,
) -> dict[str, Any]:
    """Run every implementation that takes part; record and return the comparison. `on_done` hears of each
    implementation as it finishes (a sweep takes minutes). At a terminal, a progress bar on stderr meanwhile
    (implementations done, the one running now), unless `show_progress` is False (None: unless the command runs
    with --json); elsewhere nothing more is printed."""
    config = {**CONFIG, **(config or {})}
    require_gpu(source, config["dtype"])
    seed = seed if seed is not None else random.randrange(1, 2**31)
    everyone = contestants(source, config["dtype"])
    if not any(not c.reason for c in everyone):
        raise AttentionCompareError("nothing to compare: no attention implementation is ready\n" + roster(everyone))
    job = {"config": config, "lengths": list(lengths), "budget_s": BUDGET_S}
    rows, device = _run_everyone(everyone, source, seed, job, timeout_s, on_done, show_progress)
    record = {
        "kind": KIND,
        "at": time.time(),
        "seed": seed,
        "source": source,
        "lengths": list(lengths),
        **config,
        "causal": False,
        "device": device.get("name", ""),
        "implementations": rows,
        "matmul_tflops": device.get(f"matmul_tflops_{config['dtype']}"),
        "sdpa": sdpa_points(rows, config, lengths),
    }
    store.append(record)
    return record


def _run_everyone(everyone, source, seed, job, timeout_s, on_done, show_progress) -> tuple[list[dict], dict]:
    """Each contestant's row (a skipped one's says why), in order, and the GPU the first run described."""
    from grader.commands.batch_progress import StepBar

    rows, device = [], {}
    with StepBar("comparing", sum(1 for c in everyone if not c.reason), enabled=show_progress) as bar:
        for contestant in everyone:
            if contestant.reason:
                row, found = _skipped(contestant), {}
            else:
                bar.working_on(contestant.label)
                row, found = _run(contestant, source, seed, job, timeout_s)
                bar.advance()
            device = device or found
            rows.append(row)
            on_done(row)
    return rows, device


def _skipped(contestant: Contestant) -> dict[str, Any]:
    return {
        "label": contestant.label,
        "exercise": contestant.target.spec.id,
        "lang": contestant.target.variant.lang,
        "file": _relative(contestant.path),
        "status": "skipped",
        "reason": contestant.reason,
        "points": [],
    }


def _run(
    contestant: Contestant, source: str, seed: int, job: dict[str, Any], timeout_s: float | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    from grader.run.grade import grade

    target = contestant.target
    result = grade(
        target,
        source=source,
        seed=seed,
        mode="attention_sweep",
        record=False,
        job_extra={"sweep": job},
        timeout_s=timeout_s or target.variant.timeout_s * TIMEOUT_FACTOR,
        sanitize_code=False,
    )
    row = _skipped(contestant)
    found = result.extra.get("attention_sweep")
    if not isinstance(found, dict):  # the build, the load or the child failed: the grade's first complaint
        bad = [c for c in result.checks if c.status in ("failed", "error", "skipped")]
        row.update(status="failed", reason=(bad[0].message if bad else result.verdict).splitlines()[0][:300])
        return row, {}
    raw = [p for p in found.get("points") or [] if isinstance(p, dict) and isinstance(p.get("N"), int)]
    points = [_point(p, job["config"]) for p in raw]
    broken = [p for p in points if (p["error"] and p["error"] != OOM) or p["agrees"] is False]
    timed = [p for p in points if p["ms"] is not None]
    row.update(
        points=points,
        reason=str(found.get("stopped") or ""),
        status="failed" if broken else "timed" if timed else "skipped",
    )
    if not timed and not row["reason"]:
        row["reason"] = "no length was timed"
    return row, found.get("device") if isinstance(found.get("device"), dict) else {}


def _figure(value: Any) -> float | None:
    """A figure the child reported, as a number (anything else is not one)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _point(raw: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    n, ms, sdpa_ms = raw["N"], _figure(raw.get("ms")), _figure(raw.get("sdpa_ms"))
    rate = lambda t: flops(config, n) / (t / 1000) / 1e12 if t else None
    return {
        "N": n,
        "ms": ms,
        "tflops": rate(ms),
        "extra_bytes": _figure(raw.get("extra_bytes")),
        "sdpa_ms": sdpa_ms,
        "sdpa_extra_bytes": _figure(raw.get("sdpa_extra_bytes")),
        "vs_sdpa": sdpa_ms / ms if ms and sdpa_ms else None,
        "max_abs_diff": _figure(raw.get("max_abs_diff")),
        "agrees": raw.get("agrees"),
        "error": str(raw.get("error") or ""),
    }


def sdpa_points(rows: list[dict[str, Any]], config: dict[str, Any], lengths) -> list[dict[str, Any]]:
    """SDPA at each length: the median of its timings beside every implementation that reached it."""
    points = []
    for n in lengths:
        beside = [p for r in rows for p in r["points"] if p["N"] == n and p.get("sdpa_ms")]
        if beside:
            ms = statistics.median(p["sdpa_ms"] for p in beside)
            points.append(
                {
                    "N": n,
                    "ms": ms,
                    "tflops": flops(config, n) / (ms / 1000) / 1e12,
                    "extra_bytes": beside[0]["sdpa_extra_bytes"],
                    "error": "",
                }
            )
    return points


def exit_status(record: dict[str, Any]) -> int:
    """1 when an implementation failed (its run, a length that raised, an answer far from SDPA's), else 0."""
    return 1 if any(r["status"] == "failed" for r in record["implementations"]) else 0


# --- what the terminal and the reports show ------------------------------------------------------------


def size_text(nbytes: float) -> str:
    """Bytes as people write them (memory.size_text's units, without importing torch into `kcourse report`)."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes:.0f} B"


METRICS = {  # key -> (table title, how a figure is written)
    "ms": ("time (ms)", lambda v: f"{v:.4g}"),
    "tflops": ("TFLOP/s (4·B·H·N²·d / time)", lambda v: f"{v:.1f}"),
    "extra_bytes": ("peak extra GPU memory", size_text),
}


def cell(points: list[dict[str, Any]], n: int, key: str) -> str:
    """One implementation's figure at one length: the number (with * where its answer is far from SDPA's),
    "OOM", "error", or "—" where it did not run."""
    point = next((p for p in points if p.get("N") == n), None)
    if point is None:
        return "—"
    if point.get("error"):
        return "OOM" if point["error"] == OOM else "error"
    value = point.get(key)
    if value is None:
        return "—"
    return METRICS[key][1](value) + ("*" if point.get("agrees") is False else "")


def grid(record: dict[str, Any], key: str) -> list[list[str]]:
    """Rows of one metric's table: each implementation that ran, then SDPA."""
    ran = [r for r in record["implementations"] if r["points"]]
    rows = [[r["label"]] + [cell(r["points"], n, key) for n in record["lengths"]] for r in ran]
    return rows + [["torch SDPA"] + [cell(record["sdpa"], n, key) for n in record["lengths"]]]


def markdown_table(record: dict[str, Any], key: str) -> str:
    """One metric's table for the reports (the same grid the terminal prints)."""
    lines = [
        "| implementation | " + " | ".join(f"N={n}" for n in record["lengths"]) + " |",
        "|---|" + "---|" * len(record["lengths"]),
    ]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in grid(record, key)])


def notes(record: dict[str, Any]) -> list[str]:
    """One line per implementation that was skipped, failed, stopped early or strayed from SDPA."""
    lines = []
    for r in record["implementations"]:
        bad = [p for p in r["points"] if p.get("error") and p["error"] != OOM]
        far = [p for p in r["points"] if p.get("agrees") is False]
        if r["reason"]:
            status = "" if r["status"] == "timed" else f"{r['status']}: "
            lines.append(f"{r['label']}: {status}{r['reason']}")
        lines += [f"{r['label']}: N={p['N']}: {p['error']}" for p in bad]
        if far:
            known = [p["max_abs_diff"] for p in far if p.get("max_abs_diff") is not None]
            worst = f"max |you − SDPA| {max(known):.3g}" if len(known) == len(far) else "NaN or unwritten outputs"
            lines.append(
                f"{r['label']}: * answer far from SDPA's at N={', '.join(str(p['N']) for p in far)} ({worst}): "
                "its grade's sizes did not show this; look at what grows with N (int32 offsets, the number "
                "of key blocks, sums kept in float16)"
            )
    return lines


def format_attention(record: dict[str, Any]) -> str:
    header = ["implementation"] + [f"N={n}" for n in record["lengths"]]
    lines = [
        f"attention on {record['device'] or 'the GPU'}: B={record['B']} H={record['H']} d={record['d']} "
        f"{record['dtype']}, no causal mask; seed {record['seed']}; every implementation beside torch's "
        "scaled_dot_product_attention on the same inputs"
    ]
    for key, (title, _) in METRICS.items():
        lines += ["", title, table(grid(record, key), header)]
    lines += [""] + notes(record)
    lines.append(f"recorded; `kcourse report {REPORT_KEY}` shows these tables and plots (so do week11 and final)")
    return "\n".join(lines)
