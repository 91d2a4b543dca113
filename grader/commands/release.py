"""`kcourse release DIR`: the learner's kit — what a learner needs, and nothing that passes an exercise.

What ships is what the instructor's git repository tracks (never work lying untracked in the tree, such
as a learner's notebook), less the instructor-only files (solutions/, the learner-code fixtures of the
grader's tests, CI and device scripts), with the files of learner/ in place of the instructor's:
learner/README.md becomes the kit's README.md. The kit is written to a temporary folder beside DIR,
checked for leaked solution text in every file (notebook cells included), given the manifest of its
trusted files' digests, and only then renamed to DIR: a failed release leaves nothing behind."""

from __future__ import annotations

import math
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from grader.core.errors import KcourseError
from grader.core.paths import course_root
from grader.run.kit import write_manifest

# Never shipped: the solutions; the grader tests' fixtures of learner code (some pass an exercise:
# matmul_tiled.cu, the complete vector add in vector_add_cached.py); the instructors' CI; learner/, whose
# files ship in place of the instructor's rather than as themselves.
INSTRUCTOR_ONLY = ("solutions", "tests/fixtures", ".ci", ".github", "learner")
# scripts/ holds the instructors' device and batch checks, which need solutions/; a learner needs set-up only.
LEARNER_SCRIPTS = ("scripts/setup.sh",)
LEARNER_OVERLAY = "learner"
MIN_DISTINCTIVE_LENGTH = 24  # shorter lines (braces, imports, signatures) are shared with stubs anyway
SCAFFOLD_FRACTION = 0.3  # a stub may give up to this share of its solution's long lines (host code, bindings)
RUNG_SCAFFOLD_FRACTION = 0.5  # ... and of a ladder rung's, a short file around the same launcher (tk_gemm's: 33%)
LEAK_LINES = 5  # this many of a solution's long lines in one released file is a leak (stubs share 2 or 3)


class ReleaseError(KcourseError, ValueError):
    pass


@dataclass
class Release:
    files: list[Path]  # relative paths written to the kit
    untracked: list[Path]  # files in the instructor's tree that git does not track: left out


def _git(root: Path, *args: str) -> list[str]:
    try:
        proc = subprocess.run(["git", *args, "-z"], cwd=root, capture_output=True, text=True)
    except OSError:
        raise ReleaseError(
            "git was not found: a release ships the files your course repository tracks, "
            "so install git and run it from your clone (nothing was written)"
        ) from None
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or ["git failed"])[-1]
        raise ReleaseError(
            f"{root} is not a git checkout ({why}): a release ships only the files git tracks, so "
            "run it from your clone of the course repository, or `git init && git add` the course's "
            "files there first (nothing was written)"
        )
    return [name for name in proc.stdout.split("\0") if name]  # -z: names verbatim, whatever they hold


def tracked_files(root: Path) -> list[Path]:
    """The files git tracks under root, as they are in the working tree (a deleted one is left out)."""
    files = [Path(p) for p in _git(root, "ls-files", "--cached") if (root / p).is_file()]
    if not files:
        raise ReleaseError(
            f"git tracks no files under {root}: `git add` the course's files, then release again (nothing was written)"
        )
    return files


def untracked_files(root: Path) -> list[Path]:
    return [Path(p) for p in _git(root, "ls-files", "--others", "--exclude-standard")]


def instructor_only(relative: Path) -> bool:
    text = relative.as_posix()
    if text.startswith("scripts/"):
        return text not in LEARNER_SCRIPTS
    return any(text == item or text.startswith(item + "/") for item in INSTRUCTOR_ONLY)


def learner_overlay(root: Path) -> dict[Path, Path]:
    """learner/'s files by the path they take in the kit (learner/README.md -> README.md)."""
    folder = root / LEARNER_OVERLAY
    return (
        {p.relative_to(folder): p for p in sorted(folder.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}
        if folder.is_dir()
        else {}
    )


def planned_files(root: Path) -> dict[Path, Path]:
    """Every file of the kit: its path in the kit -> the file it is copied from."""
    files = {f: root / f for f in tracked_files(root) if not instructor_only(f)}
    files.update(learner_overlay(root))
    return files


def _lines(path: Path) -> set[str]:
    """A file's stripped lines; a notebook's are its cells' source lines, not its JSON."""
    if path.suffix == ".ipynb":
        cells = _notebook_sources(path)
        if cells is not None:
            return {line.strip() for source in cells for line in source.splitlines()}
    try:
        return {line.strip() for line in path.read_text(errors="replace").splitlines()}
    except OSError:
        return set()


def _notebook_sources(path: Path) -> list[str] | None:
    import nbformat

    try:
        return [cell.source for cell in nbformat.read(str(path), as_version=4).cells]
    except Exception:  # nbformat raises several kinds for a broken file; then its raw text is checked
        return None


def solution_lines(root: Path) -> dict[Path, set[str]]:
    """Per solution file, its lines long enough to be telling (short ones are braces and imports), less
    the scaffolding its own stub gives the learner (a torch operator's input checks and bindings)."""
    telling = {}
    for path in sorted((root / "solutions").rglob("*")):
        if path.is_file() and path.suffix in (".py", ".cu", ".cuh", ".cpp", ".h"):
            lines = {line for line in _lines(path) if len(line) >= MIN_DISTINCTIVE_LENGTH}
            telling[path] = lines - _given(root, path, lines)
    return telling


def _given(root: Path, solution: Path, lines: set[str]) -> set[str]:
    """Lines the exercise's stub (same name, exercises/<id>/) shares with its solution: given code, unless
    the stub holds most of the solution (a stub overwritten with it), which is a leak, not scaffolding. A
    solution without a stub of its name (a ladder's rung, solutions/<id>/ladder/step2.cu) gets the scaffolding
    of the exercise's stubs in its language: the launcher the stub gives is in every rung too."""
    relative = solution.relative_to(root / "solutions")
    stub = root / "exercises" / relative
    stubs = [stub] if stub.is_file() else sorted((root / "exercises" / relative.parts[0]).glob(f"*{solution.suffix}"))
    shared = lines & set().union(*(_lines(s) for s in stubs)) if stubs else set()
    fraction = SCAFFOLD_FRACTION if stub.is_file() else RUNG_SCAFFOLD_FRACTION
    return shared if len(shared) <= fraction * len(lines) else set()


def find_leaks(kit: Path, solutions: dict[Path, set[str]]) -> list[str]:
    """A stub shares a signature or two with its solution; a leak shares most of the solution."""
    leaks = []
    for path in sorted(p for p in kit.rglob("*") if p.is_file()):
        lines = _lines(path)
        for solution, telling in solutions.items():
            common = telling & lines
            if telling and len(common) >= min(LEAK_LINES, math.ceil(0.6 * len(telling))):
                leaks.append(
                    f"{path.relative_to(kit)} contains {len(common)} lines of {solution.name}'s solution, "
                    f"e.g. {sorted(common)[0]!r}"
                )
    return leaks


def release(target: Path, root: Path | None = None) -> Release:
    root = (root or course_root()).resolve()
    target = target.resolve()
    if target.exists():
        raise ReleaseError(f"{target} already exists: give a new folder (nothing was written)")
    if target.is_relative_to(root):  # the kit would hold a copy of itself, and git would list it as untracked
        raise ReleaseError(f"{target} is inside the kit ({root}): give a folder outside it (nothing was written)")
    files = planned_files(root)
    solutions = solution_lines(root) if (root / "solutions").exists() else {}
    staging = target.parent / f".{target.name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        for relative, source in files.items():
            destination = staging / relative
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination)
        leaks = find_leaks(staging, solutions)
        if leaks:
            raise ReleaseError(
                "solution text would leak into the learner's kit (nothing was written):\n  " + "\n  ".join(leaks)
            )
        write_manifest(staging)  # the digests a grade checks the kit's grader, specs and references against
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return Release(files=sorted(files), untracked=[f for f in untracked_files(root) if not instructor_only(f)])
