"""The learner's results store: one JSON record per line, appended, never rewritten.

Appending one whole line with a single write, then fsync, means a crash or Ctrl-C mid-grade loses at
most the record being written, and a torn last line is skipped on read: earlier results survive.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator

from grader.paths import state_dir


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


def latest_per_exercise(kind: str, path: Path | None = None, keep=lambda record: True) -> dict[str, dict[str, Any]]:
    """The newest record of `kind` per exercise:lang (grades, tunes, profiles), among those `keep` accepts."""
    found: dict[str, dict[str, Any]] = {}
    for record in read_all(path):
        if record.get("kind") == kind and keep(record):
            found[f"{record['exercise']}:{record['lang']}"] = record
    return found


def latest_grades(path: Path | None = None, learner_only: bool = True) -> dict[str, dict[str, Any]]:
    """The newest grade per exercise:lang; by default the learner's own (their files, --file, notebooks),
    not runs of the solutions or stubs."""
    return latest_per_exercise("grade", path, lambda r: not (learner_only and r.get("source") in INSTRUCTOR_SOURCES))
