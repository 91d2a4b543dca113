"""`kcourse compare <exercise> a.cu b.cu ...`: several versions of one exercise, graded side by side.

Each file goes through the ordinary pipeline (grade.grade, the same seed for all, so every version sees the
same inputs) and is recorded as a normal grade, labelled with its file name; one `compare` record then
holds the table (numerics, ms, GB/s or TFLOP/s, % of roofline, speed vs the solution), which the reports
render and chart. `kcourse compare attention` (several exercises over sequence lengths, not one size) is
compare_attention.py."""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.core import store
from grader.core.discovery import ResolveError, Target, resolve
from grader.core.records import ERROR, FAILED, SKIPPED, GradeResult
from grader.reports.console import num, table

# What a file's suffix says about its language, for an exercise that exists in both.
LANG_OF_SUFFIX = {".cu": "cuda", ".py": "triton", ".ipynb": "triton"}
NO_DEVICE = "this machine (no GPU: compiled only)"  # no file ran: the CUDA files were only compiled


@dataclass
class Entry:
    label: str  # the file name: the version's name in the table, its grade record and the chart
    target: Target
    path: Path


def entries_for_files(exercise_id: str, files: list[Path], lang: str | None = None) -> list[Entry]:
    """One exercise, one language, several files; the language from --lang or the files' suffix."""
    if len(files) < 1:
        raise ResolveError(
            f"name the files to compare: kcourse compare {exercise_id} a.cu b.cu ... (or `kcourse compare "
            "attention` for every attention implementation you graded, over sequence lengths)"
        )
    paths = [Path(f).resolve() for f in files]
    if len(set(paths)) < len(paths):
        raise ResolveError("the same file is named twice: compare different files")
    target = resolve((exercise_id,), lang=lang or _lang_of(exercise_id, files))
    allowed = target.variant.kind_of.suffixes
    wrong = [f.name for f in files if Path(f).suffix not in allowed]
    if wrong:
        raise ResolveError(
            f"{exercise_id} ({target.variant.lang}) takes {' or '.join(allowed)} files, not "
            f"{', '.join(wrong)}: compare one language at a time"
        )
    return [Entry(label, target, path) for label, path in zip(labels(files), paths)]


def _lang_of(exercise_id: str, files: list[Path]) -> str | None:
    """The files' language when they agree (resolve asks for --lang if the exercise has two and they do not)."""
    langs = {LANG_OF_SUFFIX.get(Path(f).suffix) for f in files}
    return langs.pop() if len(langs) == 1 else None


def labels(files: list[Path]) -> list[str]:
    """File names; where two share a name (v1/reduction.cu, v2/reduction.cu), the paths as typed."""
    names = [Path(f).name for f in files]
    return [name if names.count(name) == 1 else str(f) for name, f in zip(names, files)]


def compare(
    subject: str,
    entries: list[Entry],
    seed: int | None = None,
    timeout_s: float | None = None,
    on_graded=lambda entry, result: None,
    sanitize_code: bool = True,
    show_progress: bool | None = None,
) -> tuple[dict[str, Any], list[GradeResult]]:
    """Grade every entry on the same inputs (one seed), each recorded as a grade tagged with the run and its
    label, then record the table. `on_graded` hears of each file as it is done (grades take seconds). At a
    terminal, a progress bar on stderr meanwhile (versions done, the file graded now and its step), unless
    `show_progress` is False (None: unless the command runs with --json); elsewhere nothing more is printed."""
    from grader.commands.batch_progress import StepBar

    seed = seed if seed is not None else random.randrange(1, 2**31)
    run = uuid.uuid4().hex[:12]
    results = []
    with StepBar("comparing", len(entries), enabled=show_progress) as bar:
        for entry in entries:
            bar.working_on(entry.label)
            result = _grade(entry, seed, timeout_s, run, sanitize_code)
            results.append(result)
            bar.advance()
            on_graded(entry, result)
    langs = sorted({e.target.variant.lang for e in entries})
    record = {
        "kind": "compare",
        "exercise": subject,
        "lang": "+".join(langs),
        "run": run,
        "seed": seed,
        "at": time.time(),
        "device": next((r.device["name"] for r in results if r.device.get("name")), NO_DEVICE),
        "rows": [row(e, r) for e, r in zip(entries, results)],
    }
    timed = [r for r in record["rows"] if r["case"]]
    record["case"], record["unit"] = (timed[0]["case"], timed[0]["unit"]) if timed else ("", "")
    store.append(record)
    return record, results


def _grade(entry: Entry, seed: int, timeout_s: float | None, run: str, sanitize_code: bool) -> GradeResult:
    from grader.run.grade import grade  # the whole pipeline, once per file

    result = grade(
        entry.target, submission=entry.path, seed=seed, timeout_s=timeout_s, record=False, sanitize_code=sanitize_code
    )
    result.extra["compare"] = {"run": run, "label": entry.label}
    store.append(result.to_dict())
    return result


def row(entry: Entry, result: GradeResult) -> dict[str, Any]:
    """One line of the table: the numerics verdict and the largest timed size (the last timing)."""
    checks = {c.name: c for c in result.checks}
    timing = result.timings[-1] if result.timings else None
    speed = checks.get("speed")
    return {
        "label": entry.label,
        "file": result.file,
        "exercise": result.exercise,
        "lang": result.lang,
        "status": result.status,
        "verdict": result.verdict.splitlines()[0] if result.verdict else "",
        "numerics": checks["numerics"].status if "numerics" in checks else _not_run(result),
        "speed": speed.status if speed else "not run",
        "case": timing.case if timing else "",
        "unit": timing.unit if timing else "",
        "ms": timing.learner_ms if timing else None,
        "rate": timing.learner_rate if timing else None,
        "roofline_pct": timing.roofline_pct if timing else None,
        "ratio": timing.ratio if timing else None,
        "solution_ms": timing.solution_ms if timing else None,
        "solution_rate": timing.solution_rate if timing else None,
        "torch_ms": timing.torch_ms if timing else None,
        "torch_rate": timing.torch_rate if timing else None,
        "extra_bytes": getattr(timing, "learner_extra_bytes", None),  # peak memory beyond inputs and outputs
    }


def _not_run(result: GradeResult) -> str:
    """No numerics check: the file did not get that far (build or load failed), or nothing could run."""
    return "not run" if any(c.status in (FAILED, ERROR) for c in result.checks) else SKIPPED


def speed_cell(row: dict[str, Any], key: str, fmt: str) -> str:
    """A speed figure, or why there is none: "skipped" (no GPU, --quick) or "—" (the file failed earlier)."""
    value = row.get(key)
    if value is not None:
        return num(value, fmt)
    return "skipped" if row.get("speed") == SKIPPED else "—"


def format_comparison(record: dict[str, Any]) -> str:
    rows = [
        [
            r["label"],
            r["numerics"],
            speed_cell(r, "ms", "{:.4g}"),
            speed_cell(r, "rate", "{:.4g}"),
            speed_cell(r, "roofline_pct", "{:.0f}%"),
            speed_cell(r, "ratio", "{:.2f}×"),
            r["speed"],
            r["verdict"][:70],
        ]
        for r in record["rows"]
    ]
    where = f" on {record['device']}" if record["device"] else ""
    timed = f", timed at {record['case']}" if record["case"] else ""
    header = ["file", "numerics", "ms", record["unit"] or "rate", "% roofline", "vs solution", "speed", "verdict"]
    return (
        f"{record['exercise']} ({record['lang']}): {len(rows)} versions{where}, seed {record['seed']}{timed}\n"
        + table(rows, header)
        + "\neach version is recorded as a grade; `kcourse report "
        + _report_key(record)
        + "` shows this table "
        "and a bar chart"
    )


def _report_key(record: dict[str, Any]) -> str:
    """The default plan's unit that holds the exercise (its report shows the comparison), else `final`."""
    from grader.core.plans import default_plan, load_plans

    plans = load_plans()
    if not plans:
        return "final"
    wanted = {(record["exercise"], lang) for lang in record["lang"].split("+")}
    unit = next((u for u in default_plan(plans).units if wanted & {(e.id, e.lang) for e in u.exercises}), None)
    return unit.key if unit else "final"
