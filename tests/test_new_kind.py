"""Issue 39's proof that a new kind of exercise touches only grader/kinds/, following docs/adding-a-kind.md: a
copy of the kit gains one module there (a "plain_torch" kind, whose learner writes a Python function of torch
operations, with its own loader) and one exercise of that kind, and nothing else; `kcourse grade` then builds
nothing, loads the file with the new loader in the boxed child, and gives the usual verdicts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def code_blocks(page: Path, language: str) -> list[str]:
    """The fenced code blocks of that language in a docs page, in order."""
    return [block.split("\n", 1)[1] for block in page.read_text().split("```")[1::2] if block.startswith(language)]


# docs/adding-a-kind.md's walkthrough, as written there: this test keeps it true
PAGE = ROOT / "docs" / "adding-a-kind.md"
KIND_MODULE = code_blocks(PAGE, "python")[0]
SPEC = code_blocks(PAGE, "toml")[0]

RIGHT = "def scale(x, y):\n    y.copy_(2 * x)\n"
WRONG = "def scale(x, y):\n    y.copy_(3 * x)\n"


@pytest.fixture
def kit_with_a_new_kind(tmp_path):
    root = tmp_path / "kit"
    for folder in ("grader", "templates", "calibration"):
        shutil.copytree(ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "plans").mkdir()
    shutil.copy(ROOT / "pyproject.toml", root)
    (root / "grader" / "kinds" / "plain_torch.py").write_text(KIND_MODULE)
    exercise = root / "exercises" / "scale"
    exercise.mkdir(parents=True)
    (exercise / "spec.toml").write_text(SPEC)
    (exercise / "reference.py").write_text("def reference(x):\n    return 2 * x\n")
    (exercise / "scale.py").write_text("def scale(x, y):\n    pass  # your code here\n")
    return root


def grade(root: Path, source: str) -> dict:
    learner = root / "learner.py"
    learner.write_text(source)
    env = {**os.environ, "KCOURSE_ROOT": str(root), "PYTHONPATH": str(root), "KCOURSE_DEVICE": "cpu"}
    command = [sys.executable, "-m", "grader", "grade", "scale", "--file", str(learner), "--seed", "3", "--json"]
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert done.stdout.strip(), done.stderr[-3000:]
    return json.loads(done.stdout)


def statuses(result: dict) -> dict[str, str]:
    return {check["name"]: check["status"] for check in result["checks"]}


@pytest.mark.slow
def test_a_kind_added_as_one_module_grades_right_and_wrong_files(kit_with_a_new_kind):
    root = kit_with_a_new_kind
    right = grade(root, RIGHT)
    assert statuses(right)["numerics"] == "passed", right
    assert statuses(right)["speed"] == "skipped"  # no GPU (KCOURSE_DEVICE=cpu): never passed unmeasured
    wrong = grade(root, WRONG)
    assert statuses(wrong)["numerics"] == "failed", wrong
    kinds = sorted(p.name for p in (root / "grader" / "kinds").glob("*.py"))
    assert kinds == ["__init__.py", "cuda.py", "cuda_host.py", "plain_torch.py", "torch_op.py", "triton.py"]
