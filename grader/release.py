"""`kcourse release DIR`: the learner's kit, without solutions/ and instructor-only files.

The kit is written to a temporary folder beside DIR, checked for leaked solution text (a solution
copied over a stub, say), and only then renamed to DIR: a failed release leaves nothing behind."""

from __future__ import annotations

import math
import shutil
import subprocess
from pathlib import Path

from grader.paths import course_root

# Never shipped to learners: the solutions, the instructors' CI and device scripts, local state.
INSTRUCTOR_ONLY = ("solutions", ".ci", ".github", "scripts/device_check.sh", ".git", ".kcourse", "reports",
                   ".venv", ".whl", "build")
SKIP_NAMES = ("__pycache__", ".pytest_cache")
MIN_DISTINCTIVE_LENGTH = 24  # shorter lines (braces, imports, signatures) are shared with stubs anyway
LEAK_LINES = 5  # this many of a solution's long lines in one released file is a leak (stubs share 2 or 3)


class ReleaseError(ValueError):
    pass


def shipped_files(root: Path) -> list[Path]:
    """Files to ship: git's tracked and untracked-not-ignored files when in a checkout, else all."""
    try:
        listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=root,
                                capture_output=True, text=True, check=True).stdout.splitlines()
        files = [Path(p) for p in listed if (root / p).is_file()]
    except (OSError, subprocess.CalledProcessError):
        files = [p.relative_to(root) for p in root.rglob("*") if p.is_file()]
    return [f for f in files if not _instructor_only(f)]


def _instructor_only(relative: Path) -> bool:
    text = relative.as_posix()
    if any(part in SKIP_NAMES or part.endswith(".egg-info") for part in relative.parts):
        return True
    return any(text == item or text.startswith(item + "/") for item in INSTRUCTOR_ONLY)


def _lines(path: Path) -> set[str]:
    try:
        return {line.strip() for line in path.read_text(errors="replace").splitlines()}
    except OSError:
        return set()


def solution_lines(root: Path) -> dict[Path, set[str]]:
    """Per solution file, its lines long enough to be telling (short ones are braces and imports)."""
    return {
        path: {line for line in _lines(path) if len(line) >= MIN_DISTINCTIVE_LENGTH}
        for path in sorted((root / "solutions").rglob("*"))
        if path.is_file() and path.suffix in (".py", ".cu", ".cuh", ".cpp", ".h")
    }


def find_leaks(kit: Path, solutions: dict[Path, set[str]]) -> list[str]:
    """A stub shares a signature or two with its solution; a leak shares most of the solution."""
    leaks = []
    for path in sorted(p for p in kit.rglob("*") if p.is_file()):
        lines = _lines(path)
        for solution, telling in solutions.items():
            common = telling & lines
            if telling and len(common) >= min(LEAK_LINES, math.ceil(0.6 * len(telling))):
                leaks.append(f"{path.relative_to(kit)} contains {len(common)} lines of {solution.name}'s solution, "
                             f"e.g. {sorted(common)[0]!r}")
    return leaks


def release(target: Path, root: Path | None = None) -> list[Path]:
    root = root or course_root()
    target = target.resolve()
    if target.exists():
        raise ReleaseError(f"{target} already exists: give a new folder (nothing was written)")
    solutions = solution_lines(root) if (root / "solutions").exists() else {}
    staging = target.parent / f".{target.name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    files = shipped_files(root)
    try:
        for relative in files:
            destination = staging / relative
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / relative, destination)
        leaks = find_leaks(staging, solutions)
        if leaks:
            raise ReleaseError("solution text would leak into the learner's kit (nothing was written):\n  " + "\n  ".join(leaks))
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return files
