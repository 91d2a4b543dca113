"""Results are data: plain dataclasses that serialise to JSON. Reports render these, never recompute."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from grader.core.vocabulary import Status

PASSED, FAILED, ERROR, SKIPPED = Status.PASSED, Status.FAILED, Status.ERROR, Status.SKIPPED


@dataclass
class Check:
    name: str  # a vocabulary.CheckName
    status: str  # a vocabulary.Status
    message: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class Timing:
    """One timed size: the learner's kernel, the solution and torch, side by side in one process."""

    case: str
    learner_ms: float | None = None
    solution_ms: float | None = None
    torch_ms: float | None = None
    learner_spread: float | None = None  # (p75 - p25) / median of the learner's runs
    solution_spread: float | None = None
    learner_rate: float | None = None  # GB/s or TFLOP/s, per `unit`
    solution_rate: float | None = None
    torch_rate: float | None = None
    unit: str = ""  # "GB/s" or "TFLOP/s"
    roofline_pct: float | None = None  # learner's rate as % of the device's measured ceiling
    solution_roofline_pct: float | None = None
    ratio: float | None = None  # learner speed / solution speed (solution_ms / learner_ms)
    runs: int = 0
    intensity: float | None = None  # FLOP per byte, for the roofline chart
    learner_tflops: float | None = None
    solution_source: str = ""  # "live solution", "calibration for <GPU>", or "ESTIMATE: ..."
    # Peak GPU memory each one allocated beyond what was live before its run (inputs, outputs; for entry
    # points that return their outputs, beyond those too), in bytes, from one untimed run (memory.py)
    learner_extra_bytes: float | None = None
    solution_extra_bytes: float | None = None
    torch_extra_bytes: float | None = None
    extra_bytes_limit: float | None = None  # the spec's performance.max_extra_bytes at this size
    # the learner's own entry point run with the spec's performance.baseline_args ("n_streams=1"), timed beside it
    baseline_ms: float | None = None
    baseline_args: str = ""


@dataclass
class GradeResult:
    exercise: str
    lang: str
    source: str  # learner | stubs | solutions | a submission path
    seed: int
    status: str = PASSED
    verdict: str = ""
    checks: list[Check] = field(default_factory=list)
    timings: list[Timing] = field(default_factory=list)
    device: dict[str, Any] = field(default_factory=dict)
    build: dict[str, Any] = field(default_factory=dict)
    output: str = ""  # the learner's own stdout/stderr, trimmed
    unit: str | None = None
    plan: str | None = None
    threshold: float | None = None
    file: str = ""  # the graded file, relative to the course root where possible
    scoring: dict[str, float] = field(default_factory=dict)  # points per check, from the spec
    extra: dict[str, Any] = field(default_factory=dict)  # profile / tune findings from the child
    phases: dict[str, float] = field(default_factory=dict)  # seconds per phase: start, build, load, numerics, ...
    started_at: float = field(default_factory=time.time)
    duration_s: float = 0.0
    kind: str = "grade"
    isolation: str = ""  # what boxed the learner's code (box.py), or "none (why)"
    emulation: str = ""  # a CUDA file graded without a GPU: how its kernels ran (cuda_cpu.mode), or why they did not
    kit_changes: list[str] = field(default_factory=list)  # trusted files that differ from git's index (a checkout)
    # how the version was picked where the id has several and no --lang was given ("the spec's default_lang")
    lang_choice: str = ""

    def add(self, check: Check) -> Check:
        self.checks.append(check)
        return check

    def finish(self) -> "GradeResult":
        self.status = overall_status(self.checks)
        if not self.verdict:
            self.verdict = summary_verdict(self.checks)
        self.duration_s = round(time.time() - self.started_at, 3)
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def overall_status(checks: list[Check]) -> str:
    """Failures first; "passed" only when the numerics actually ran and passed. A CUDA exercise
    that only compiled here is "skipped": what was not run is never reported as passed."""
    statuses = {c.status for c in checks}
    for status in (ERROR, FAILED):
        if status in statuses:
            return status
    if any(c.name == "numerics" and c.status == PASSED for c in checks):
        return PASSED
    return SKIPPED


def summary_verdict(checks: list[Check]) -> str:
    bad = [c for c in checks if c.status in (ERROR, FAILED)]
    if bad:
        return bad[0].message.splitlines()[0]
    ran = [c.name for c in checks if c.status == PASSED]
    skipped = [c for c in checks if c.status == SKIPPED]
    text = "passed: " + ", ".join(ran) if ran else "nothing could run here"
    if skipped:
        reason = skipped[0].message.split(":")[0]
        text += f"; skipped: {', '.join(c.name for c in skipped)} ({reason})"
    return text


def grade_from_dict(data: dict[str, Any]) -> GradeResult:
    known = set(GradeResult.__dataclass_fields__)
    data = {k: v for k, v in data.items() if k in known}  # records of other kit versions
    data["checks"] = [Check(**c) for c in data.get("checks", [])]
    timing_fields = set(Timing.__dataclass_fields__)
    data["timings"] = [Timing(**{k: v for k, v in t.items() if k in timing_fields}) for t in data.get("timings", [])]
    return GradeResult(**data)
