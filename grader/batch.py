"""`kcourse grade-batch DIR`: grade a class. DIR holds one folder per learner; each learner's files
are found by the stub's file name anywhere in their folder. One worker per GPU (each grading child
sees only its GPU through CUDA_VISIBLE_DEVICES); a learner's crash or hang is that learner's verdict
and never stops the others. Writes gradebook.csv and gradebook.json."""

from __future__ import annotations

import csv
import json
import queue
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from grader.discovery import Target
from grader.exports import gradescope_json
from grader.grade import grade
from grader.records import GradeResult

COLUMNS = ["learner", "exercise", "lang", "status", "score", "max_score", "verdict", "learner_ms", "ratio", "file"]


def find_submission(learner_dir: Path, target: Target) -> Path | None:
    matches = sorted(learner_dir.rglob(target.variant.stub))
    preferred = [m for m in matches if target.spec.id in m.parts]
    return (preferred or matches or [None])[0]


def gpu_count() -> int:
    from grader.grade import cuda_available

    if not cuda_available():
        return 0
    import torch

    return torch.cuda.device_count()


def grade_batch(submissions: Path, targets: list[Target], workers: int | None = None, seed: int | None = None,
                timeout_s: float | None = None) -> list[dict]:
    learners = sorted(p for p in submissions.iterdir() if p.is_dir() and not p.name.startswith("."))
    gpus = gpu_count()
    slots: queue.Queue = queue.Queue()
    for slot in range(workers or max(1, gpus)):
        slots.put(str(slot % gpus) if gpus else None)

    def one(learner: Path, target: Target) -> dict:
        path = find_submission(learner, target)
        if path is None:
            return _row(learner.name, target, None, f"no {target.variant.stub} in the submission")
        device = slots.get()
        try:
            env = {"CUDA_VISIBLE_DEVICES": device} if device is not None else {}
            result = grade(target, submission=path, seed=seed, timeout_s=timeout_s, record=False, child_env=env)
        finally:
            slots.put(device)
        return _row(learner.name, target, result, result.verdict.splitlines()[0])

    jobs = [(learner, target) for learner in learners for target in targets]
    with ThreadPoolExecutor(max_workers=slots.qsize()) as pool:
        return list(pool.map(lambda job: one(*job), jobs))


def _row(learner: str, target: Target, result: GradeResult | None, verdict: str) -> dict:
    row = {"learner": learner, "exercise": target.spec.id, "lang": target.variant.lang, "verdict": verdict,
           "status": "missing", "score": 0.0, "max_score": sum(target.spec.scoring.values()), "learner_ms": None,
           "ratio": None, "file": "", "result": None}
    if result is not None:
        points = gradescope_json([result])
        timing = result.timings[-1] if result.timings else None
        row.update(status=result.status, score=points["score"], max_score=points["max_score"], file=result.file,
                   learner_ms=timing.learner_ms if timing else None, ratio=timing.ratio if timing else None,
                   result=result.to_dict())
    return row


def write_gradebook(rows: list[dict], out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path, json_path = out_dir / "gradebook.csv", out_dir / "gradebook.json"
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    json_path.write_text(json.dumps(rows, indent=1, default=str))
    return csv_path, json_path
