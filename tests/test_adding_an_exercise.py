"""docs/adding-an-exercise.md, followed word for word: its files (each code block whose first line names a path)
are written into a copy of the kit, and its commands run there; the solution passes and the stub fails, so the
walkthrough stays true (issue 39: a walkthrough that a test keeps true)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "adding-an-exercise.md"


def blocks(page: Path) -> list[tuple[str, str]]:
    """(language, text) of every fenced code block of the page, in order."""
    found = []
    for block in page.read_text().split("```")[1::2]:
        language, _, text = block.partition("\n")
        found.append((language.strip(), text))
    return found


def files(page: Path) -> dict[str, str]:
    """{path: content} of the blocks whose first line is a comment naming a file (the comment is not written)."""
    named = {}
    for _, text in blocks(page):
        first, _, rest = text.partition("\n")
        if first.startswith("# ") and "/" in first and " " not in first[2:]:
            named[first[2:]] = rest
    return named


def commands(page: Path) -> list[list[str]]:
    return [shlex.split(line) for lang, text in blocks(page) if lang == "bash" for line in text.splitlines() if line]


def test_the_page_names_the_five_files_and_two_commands():
    assert sorted(files(PAGE)) == [
        "exercises/relu/README.md",
        "exercises/relu/reference.py",
        "exercises/relu/relu.py",
        "exercises/relu/spec.toml",
        "solutions/relu/relu.py",
    ]
    assert [c[:2] for c in commands(PAGE)] == [["kcourse", "validate"]] * 2


@pytest.mark.slow
def test_following_the_page_gives_an_exercise_whose_solution_passes_and_stub_fails(tmp_path):
    kit = tmp_path / "kit"
    for folder in ("grader", "templates", "calibration", "plans"):
        shutil.copytree(ROOT / folder, kit / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", kit)
    for name, text in files(PAGE).items():
        (kit / name).parent.mkdir(parents=True, exist_ok=True)
        (kit / name).write_text(text)
    env = {**os.environ, "KCOURSE_ROOT": str(kit), "PYTHONPATH": str(kit), "KCOURSE_DEVICE": "cpu"}
    outcomes = []
    for command in commands(PAGE):
        done = subprocess.run(
            [sys.executable, "-m", "grader", *command[1:]], cwd=kit, env=env, capture_output=True, text=True
        )
        outcomes.append(done.returncode)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert outcomes == [0, 0]  # validate exits 0 when solutions pass, and when stubs fail
