"""A class's gradebook: `gradebook.jsonl`, one row per graded submission, appended as each grade finishes
and never rewritten (store.append: one fsynced line, torn lines skipped on read). A row is keyed by the
learner, the exercise:lang and the SHA-256 of the submitted file, so a batch that is interrupted, re-run or
extended with late submissions grades only what the gradebook lacks, and a file graded once is never
recorded twice. gradebook.csv and gradebook.json are views of one run, rewritten at its end."""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path
from typing import Iterable

from grader.core import store

LEDGER = "gradebook.jsonl"
COLUMNS = [
    "learner",
    "exercise",
    "lang",
    "status",
    "score",
    "max_score",
    "verdict",
    "learner_ms",
    "ratio",
    "gpu",
    "bar",
    "attempts",
    "file",
    "sha256",
]


def file_digest(path: Path | None) -> str:
    """The submission's content hash ("" when there is none): the same bytes are the same submission."""
    return hashlib.sha256(path.read_bytes()).hexdigest() if path is not None else ""


def row_key(row: dict) -> tuple[str, str, str, str]:
    return row["learner"], row["exercise"], row["lang"], row.get("sha256", "")


class Gradebook:
    """The append-only ledger of one class (out_dir/gradebook.jsonl)."""

    def __init__(self, out_dir: Path):
        self.dir = Path(out_dir)
        self.path = self.dir / LEDGER

    def rows(self) -> dict[tuple[str, str, str, str], dict]:
        """The recorded rows by key; were a key ever written twice (an older kit), the newest wins."""
        return {row_key(row): row for row in store.read_all(self.path) if _is_row(row)}

    def append(self, row: dict) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        store.append(row, self.path)


def _is_row(record: dict) -> bool:
    return all(isinstance(record.get(k), str) for k in ("learner", "exercise", "lang"))


def write_views(rows: Iterable[dict], out_dir: Path) -> tuple[Path, Path]:
    """gradebook.csv (one line per learner × exercise) and gradebook.json (the same rows with full results)."""
    rows = list(rows)
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path, json_path = out_dir / "gradebook.csv", out_dir / "gradebook.json"
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    json_path.write_text(json.dumps(rows, indent=1, default=str))
    return csv_path, json_path
