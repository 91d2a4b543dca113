"""Is the kit as shipped? Checksums of the files that decide verdicts, before and after learner code runs.

Learner code runs as the learner's user and could rewrite the grader, a reference, a spec or the
results store to change a later verdict. Two checks, as nbgrader checksums its test cells:
- a released kit carries kit-manifest.json (written by `kcourse release`): before each grade the
  trusted files are compared with it, and a changed one is reported and the grade refused;
- around every run of learner code the same files and the results store are hashed: a change made
  while the learner's code ran fails that grade's integrity check, naming the file."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from grader.core.paths import course_root

MANIFEST = "kit-manifest.json"
# Path.glob patterns; git reads the same ones as `:(glob)` pathspecs, where `*` stops at a slash as here.
TRUSTED = (
    "grader/**/*.py",
    "grader/capstone/*.toml",
    "grader/cuda_cpu/include/**/*",
    "exercises/*/spec.toml",
    "exercises/*/reference.py",
    "calibration/*.json",
    "plans/*.toml",
    "templates/*.j2",
    "pyproject.toml",
)


def _digest(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return "missing"


def trusted_files(root: Path | None = None) -> list[Path]:
    root = root or course_root()
    return sorted({p for pattern in TRUSTED for p in root.glob(pattern) if p.is_file()})


def contents(root: Path | None = None) -> dict[str, bytes]:
    """Each trusted file's bytes, by path relative to the kit's root (about 1 MB, read in a few ms)."""
    root = root or course_root()
    found = {}
    for path in trusted_files(root):
        try:
            found[str(path.relative_to(root))] = path.read_bytes()
        except OSError:
            pass
    return found


def restore(before: dict[str, bytes], root: Path | None = None) -> list[str]:
    """Every trusted file that differs from `before` (their names), and each one that was as shipped before the
    run (git's index in a checkout, the manifest in a release) put back. A file that was already edited, or is
    new, is only named: it is someone's work in progress, and an edit saved while the run went on looks the same."""
    root = root or course_root()
    now = contents(root)
    touched = sorted(name for name in set(before) | set(now) if before.get(name) != now.get(name))
    shipped = _shipped_ids(root)
    for name in touched:
        if name in before and shipped.get(name) in (
            _blob_id_of(before[name]),
            hashlib.sha256(before[name]).hexdigest(),
        ):
            (root / name).write_bytes(before[name])
    return touched


def _shipped_ids(root: Path) -> dict[str, str]:
    """Each trusted file's id as shipped: git's blob id in a checkout, the manifest's sha256 in a release."""
    try:
        return json.loads((root / MANIFEST).read_text())
    except (OSError, ValueError):
        pass
    return _git_index(root) or {}


def snapshot(root: Path | None = None) -> dict[str, str]:
    """Digest of each trusted file, by path relative to the kit's root."""
    root = root or course_root()
    return {str(p.relative_to(root)): _digest(p) for p in trusted_files(root)}


def append_only_state(path: Path) -> tuple[int, str]:
    """(size, digest of the content) of an append-only file such as the results store."""
    try:
        data = path.read_bytes()
    except OSError:
        return 0, ""
    return len(data), hashlib.sha256(data).hexdigest()


def rewritten(path: Path, before: tuple[int, str]) -> bool:
    """True when `path` no longer starts with what it held before (appends by other graders are fine)."""
    size, digest = before
    if size == 0:  # nothing was there to rewrite: a file another grade created meanwhile is an append
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(size)
    except OSError:
        return size > 0
    return len(head) != size or hashlib.sha256(head).hexdigest() != digest


def changed(before: dict[str, str], after: dict[str, str]) -> list[str]:
    return sorted(name for name in set(before) | set(after) if before.get(name) != after.get(name))


def write_manifest(root: Path) -> Path:
    """Record the shipped digests in a released kit (run by `kcourse release` on the staged kit)."""
    path = root / MANIFEST
    path.write_text(json.dumps(snapshot(root), indent=1, sort_keys=True) + "\n")
    return path


def _git_index(root: Path) -> dict[str, str] | None:
    """git's blob id of each trusted file in the index, by path; None where git cannot say."""
    import subprocess

    try:
        listed = subprocess.run(
            ["git", "ls-files", "-s", "--", *(f":(glob){p}" for p in TRUSTED)],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if listed.returncode != 0:
        return None
    return {line.split("\t", 1)[1]: line.split()[1] for line in listed.stdout.splitlines() if "\t" in line}


def differs_from_git(root: Path | None = None) -> list[str] | None:
    """Trusted files whose content is not what git's index holds (None where the kit is no git checkout, or git
    is missing): git's blob ids, so nothing is read but the files themselves and one `git ls-files`."""
    root = root or course_root()
    indexed = _git_index(root) if (root / ".git").exists() else None
    if indexed is None:
        return None
    now = {str(p.relative_to(root)): p for p in trusted_files(root)}
    return sorted(name for name in set(indexed) | set(now) if indexed.get(name) != _blob_id(now.get(name)))


def _blob_id(path: Path | None) -> str | None:
    """git's id of a file's content, or None for no file."""
    try:
        return _blob_id_of(path.read_bytes()) if path is not None else None
    except OSError:
        return None


def _blob_id_of(data: bytes) -> str:
    """git's id of these bytes (sha1 of "blob <size>\\0" and the bytes)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def differs_from_shipped(root: Path | None = None) -> list[str]:
    """Trusted files that differ from the kit's manifest ([] where there is none: an instructor's tree)."""
    root = root or course_root()
    try:
        shipped = json.loads((root / MANIFEST).read_text())
    except (OSError, ValueError):
        return []
    return changed(shipped, snapshot(root))
