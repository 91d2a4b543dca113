"""`kcourse grade-batch DIR`: grade a class. DIR holds one folder per learner; each learner's files
are found by the stub's file name anywhere in their folder. One task per (learner, exercise), graded
exactly as `kcourse grade --file` grades it: the learner's code runs in a child process with a time
limit, so a learner's crash or hang is that learner's verdict and never stops the others.

Where the tasks run is a runner's business: LocalRunner (threads here, one per GPU, each grading child
seeing only its GPU through CUDA_VISIBLE_DEVICES) or cluster.DaskRunner (workers of a Dask cluster).
Rows stream into the gradebook (gradebook.py) as they finish; what it already holds is not graded again."""

from __future__ import annotations

import os
import queue
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Protocol

from grader.commands.batch_progress import Progress
from grader.core.discovery import Target
from grader.core.records import GradeResult
from grader.reports.exports import gradescope_json
from grader.reports.gradebook import Gradebook, file_digest, write_views
from grader.run.warm_children import WarmChildren

MISSING, ERROR = "missing", "error"


@dataclass(frozen=True)
class Job:
    """One learner × one exercise variant: the file found for it and that file's content hash. `timed_sizes`:
    "all", or "verdict" for only the size the speed verdict is taken at (validate's repeats after the first)."""

    learner: str
    exercise: str
    lang: str
    path: Path | None
    sha256: str
    timed_sizes: str = "all"

    @property
    def key(self) -> tuple[str, str, str, str]:
        return self.learner, self.exercise, self.lang, self.sha256

    @property
    def name(self) -> str:
        return f"{self.learner} {self.exercise}:{self.lang}"


class Runner(Protocol):
    def run(
        self, work: list[tuple[Job, Target]], seed: int | None, timeout_s: float | None, progress: Progress
    ) -> Iterator[tuple[Job, dict]]:
        """Grade each job; yield (job, row) as each finishes, in any order."""


def find_submission(learner_dir: Path, target: Target) -> Path | None:
    matches = sorted(learner_dir.rglob(target.variant.stub))
    preferred = [m for m in matches if target.spec.id in m.parts]
    return (preferred or matches or [None])[0]


def learner_dirs(submissions: Path) -> list[Path]:
    return sorted(p for p in submissions.iterdir() if p.is_dir() and not p.name.startswith("."))


def submitted_targets(submissions: Path, targets: list[Target]) -> list[Target]:
    """The targets at least one learner has a file for: what grade-batch grades without --all (a class that
    did three exercises gets three columns of rows, not the kit's seventy, two thirds of them `missing`)."""
    learners = learner_dirs(submissions)
    return [t for t in targets if any(find_submission(learner, t) is not None for learner in learners)]


def plan_jobs(submissions: Path, targets: list[Target]) -> list[Job]:
    """One job per learner × target; a learner without the target's file gets a `missing` row. Every target
    given is planned: narrow them with submitted_targets first (grade-batch does, unless --all)."""
    jobs = []
    for learner in learner_dirs(submissions):
        for target in targets:
            path = find_submission(learner, target)
            jobs.append(Job(learner.name, target.spec.id, target.variant.lang, path, file_digest(path)))
    return jobs


def gpu_count() -> int:
    from grader.run.grade import cuda_available

    if not cuda_available():
        return 0
    import torch

    return torch.cuda.device_count()


def visible_gpus() -> list[str]:
    """This machine's GPUs as CUDA_VISIBLE_DEVICES entries: the ones this process was given (by a batch system,
    or a shell that gave each of several graders its own GPU), else all of them. A child is given one of these
    entries, never its index among them: CUDA_VISIBLE_DEVICES=0 in a child of a process given GPU 3 is GPU 0."""
    count = gpu_count()
    given = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return given[:count] if given else [str(i) for i in range(count)]


def grade_row(
    target: Target,
    path: Path,
    seed: int | None,
    timeout_s: float | None,
    device: str | None,
    children: WarmChildren | None = None,
    timed_sizes: str = "all",
) -> dict:
    """Grade one file (in a child process, as `kcourse grade --file` does) into a gradebook row. `children`:
    where to take a child already started for this device (and start the next grade's); `timed_sizes` as
    grade.grade's."""
    from grader.run.grade import grade

    env = {"CUDA_VISIBLE_DEVICES": device} if device is not None else {}
    compile_only = device is None and target.variant.kind_of.gpu_to_run  # no child runs
    child = children.take(device) if children is not None and not compile_only else None
    settle = (lambda: children.settle(device)) if child is not None else None  # the next grade's spare, warming up
    result = grade(
        target,
        submission=path,
        seed=seed,
        timeout_s=timeout_s,
        record=False,
        child_env=env,
        child=child,
        timed_sizes=timed_sizes,
        before_timing=settle,
    )
    return result_row("", target, result, result.verdict.splitlines()[0] if result.verdict else result.status)


def result_row(learner: str, target: Target, result: GradeResult | None, verdict: str, status: str = MISSING) -> dict:
    row = {
        "learner": learner,
        "exercise": target.spec.id,
        "lang": target.variant.lang,
        "verdict": verdict,
        "status": status,
        "score": 0.0,
        "max_score": sum(target.spec.scoring.values()),
        "learner_ms": None,
        "ratio": None,
        "gpu": "",
        "bar": "",
        "attempts": 0,
        "file": "",
        "result": None,
    }
    if result is not None:
        points = gradescope_json([result])
        timing = result.timings[-1] if result.timings else None
        row.update(
            status=result.status,
            score=points["score"],
            max_score=points["max_score"],
            file=result.file,
            learner_ms=timing.learner_ms if timing else None,
            ratio=timing.ratio if timing else None,
            gpu=result.device.get("name", ""),
            bar=timing.solution_source if timing else "",
            attempts=1,
            result=result.to_dict(),
        )
    return row


class LocalRunner:
    """Threads on this machine, one per GPU by default; each grade's child sees only its slot's GPU."""

    def __init__(self, workers: int | None = None):
        gpus = visible_gpus()
        self.devices = [gpus[slot % len(gpus)] if gpus else None for slot in range(workers or max(1, len(gpus)))]

    def describe(self) -> str:
        gpus = sorted({d for d in self.devices if d is not None})
        where = f"GPU {', '.join(gpus)}" if gpus else "the CPU"
        return f"{len(self.devices)} worker(s) on this machine ({where})"

    def run(self, work, seed, timeout_s, progress) -> Iterator[tuple[Job, dict]]:
        slots: queue.Queue = queue.Queue()
        for device in self.devices:
            slots.put(device)

        def one(job: Job, target: Target) -> dict:
            device = slots.get()
            progress.started(job.name)
            try:
                return grade_row(target, job.path, seed, timeout_s, device, children, job.timed_sizes)
            finally:
                progress.stopped(job.name)
                slots.put(device)

        children = WarmChildren()
        try:
            with ThreadPoolExecutor(max_workers=len(self.devices)) as pool:
                futures = {pool.submit(one, job, target): job for job, target in work}
                for future in as_completed(futures):
                    yield futures[future], future.result()
        finally:
            children.close()


def grade_batch(
    submissions: Path,
    targets: list[Target],
    workers: int | None = None,
    seed: int | None = None,
    timeout_s: float | None = None,
    out_dir: Path | None = None,
    runner: Runner | None = None,
    regrade: bool = False,
    progress: Progress | None = None,
) -> list[dict]:
    """One row per learner × target, in learner order. With out_dir, rows already in its gradebook (same
    learner, exercise and file content) are reused and new ones appended as they finish; `regrade`
    grades everything again (the newest row of a key is the one shown)."""
    jobs = plan_jobs(submissions, targets)
    by_key = {t.key: t for t in targets}
    book = Gradebook(out_dir) if out_dir is not None else None
    known = book.rows() if book is not None and not regrade else {}
    rows: dict[tuple, dict] = {}
    for job in jobs:
        target = by_key[f"{job.exercise}:{job.lang}"]
        if job.path is None:
            rows[job.key] = {
                **result_row(job.learner, target, None, f"no {target.variant.stub} in the submission"),
                "sha256": "",
            }
        elif job.key in known:
            rows[job.key] = known[job.key]
    work = [(job, by_key[f"{job.exercise}:{job.lang}"]) for job in jobs if job.key not in rows]
    progress = progress or Progress()
    progress.begin(len(work), already=sum(job.key in known for job in jobs))
    for job, row in (runner or LocalRunner(workers)).run(work, seed, timeout_s, progress):
        row.update(learner=job.learner, sha256=job.sha256, file=_shown_path(job.path))
        if book is not None:
            book.append(row)
        rows[job.key] = row
        progress.finished(job.name, row)
    progress.close()
    return [rows[job.key] for job in jobs]


def _shown_path(path: Path) -> str:
    from grader.run.grade import _relative

    return _relative(path)


def write_gradebook(rows: list[dict], out_dir: Path) -> tuple[Path, Path]:
    return write_views(rows, out_dir)
