"""The learner's results store: one JSON record per line, appended, never rewritten.

Appending one whole line with a single write, then fsync, means a crash or Ctrl-C mid-grade loses at
most the record being written, and a torn last line is skipped on read: earlier results survive.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator

from grader.core.paths import state_dir


def results_path() -> Path:
    return state_dir() / "results.jsonl"


def append(record: dict[str, Any], path: Path | None = None) -> None:
    path = path or results_path()
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        _ensure_starts_on_new_line(fd, path)
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def _ensure_starts_on_new_line(fd: int, path: Path) -> None:
    """If an earlier writer died mid-line, end that torn line so the new record stays readable."""
    size = path.stat().st_size
    if size:
        with open(path, "rb") as f:
            f.seek(size - 1)
            if f.read(1) != b"\n":
                os.write(fd, b"\n")


def read_all(path: Path | None = None) -> Iterator[dict[str, Any]]:
    path = path or results_path()
    if not path.exists():
        return
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn line from an interrupted write
            if isinstance(record, dict):
                yield record


def latest(kind: str, path: Path | None = None) -> dict[str, Any] | None:
    found = None
    for record in read_all(path):
        if record.get("kind") == kind:
            found = record
    return found


INSTRUCTOR_SOURCES = ("solutions", "stubs")


# Best first: a pass beats a grade that could not run here (skipped), which beats a failure, then an
# error; a status this version does not know (an old or a newer kit's) ranks last.
STATUS_ORDER = ("passed", "skipped", "failed", "error")


def exercise_key(record: dict[str, Any]) -> str | None:
    """ "reduction:cuda" for a record of one exercise; None for one that names no exercise (an old or
    damaged record), which per-exercise views skip rather than crash on."""
    exercise = record.get("exercise")
    if not isinstance(exercise, str) or not exercise:
        return None
    return f"{exercise}:{record.get('lang') or 'unknown'}"


def status_rank(status: Any) -> int:
    """Lower is better (see STATUS_ORDER)."""
    return STATUS_ORDER.index(status) if status in STATUS_ORDER else len(STATUS_ORDER)


def _records_per_exercise(kind: str, path: Path | None, keep) -> Iterator[tuple[str, dict[str, Any]]]:
    for record in read_all(path):
        key = exercise_key(record)
        if key and record.get("kind") == kind and keep(record):
            yield key, record


def latest_per_exercise(kind: str, path: Path | None = None, keep=lambda record: True) -> dict[str, dict[str, Any]]:
    """The newest record of `kind` per exercise:lang (grades, tunes, profiles), among those `keep` accepts."""
    return dict(_records_per_exercise(kind, path, keep))


def best_per_exercise(kind: str, path: Path | None = None, keep=lambda record: True) -> dict[str, dict[str, Any]]:
    """The best record of `kind` per exercise:lang by STATUS_ORDER; among equals the newest, so a pass
    shows the learner's current passing code (not the fastest: timings exist only on a GPU, and a
    learner who rewrote a kernel wants to see the new one)."""
    found: dict[str, dict[str, Any]] = {}
    for key, record in _records_per_exercise(kind, path, keep):
        if key not in found or status_rank(record.get("status")) <= status_rank(found[key].get("status")):
            found[key] = record
    return found


def _learners_own(learner_only: bool):
    return lambda r: not (learner_only and r.get("source") in INSTRUCTOR_SOURCES)


def latest_grades(path: Path | None = None, learner_only: bool = True) -> dict[str, dict[str, Any]]:
    """The newest grade per exercise:lang; by default the learner's own (their files, --file, notebooks),
    not runs of the solutions or stubs."""
    return latest_per_exercise("grade", path, _learners_own(learner_only))


def best_grades(path: Path | None = None, learner_only: bool = True) -> dict[str, dict[str, Any]]:
    """The best grade per exercise:lang (best_per_exercise), by default among the learner's own: a failed
    scratch file (`--file try.py`) does not hide an earlier pass."""
    return best_per_exercise("grade", path, _learners_own(learner_only))
