"""`kcourse release`: the learner's kit holds what a learner needs (the files git tracks, the learner's
README) and nothing that passes an exercise: no solutions, no test fixtures of learner code, no work
lying untracked in the instructor's tree, no solution pasted into a notebook."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import ROOT

from grader.cli import VERBS, main
from grader.commands.release import ReleaseError, release
from grader.core.discovery import resolve
from grader.toolchain.notebook import write_notebook

nbformat = pytest.importorskip("nbformat")

pytestmark = pytest.mark.solutions  # a release is made from the instructor's tree

QUICK_START = "bash scripts/setup.sh && .venv/bin/kcourse env-check && .venv/bin/kcourse grade week1 vector_add"
TESTS = "bash scripts/setup.sh && .venv/bin/python -m pytest -n 2 --dist loadfile"


def git(cwd, *args):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def course(tmp_path, monkeypatch):
    """A git checkout of the course as this working tree has it: tracked and new files, not ignored ones."""
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # never the repository around tmp_path
    try:
        listed = git(ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("the course here is not a git checkout")
    course = tmp_path / "course"
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (course / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, course / name)
    git(course, "init", "-q")
    git(course, "add", "-A")
    return course


def release_from(course, kit):
    return CliRunner().invoke(main, ["release", str(kit)], env={"KCOURSE_ROOT": str(course)}, catch_exceptions=False)


def files_in(folder):
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def notebook_with_solution(path):
    path = write_notebook(resolve(("softmax",)), path)
    nb = nbformat.read(str(path), as_version=4)
    for cell in nb.cells:
        if "kcourse" in cell.metadata.get("tags", []):
            cell.source = (ROOT / "solutions/softmax/softmax.py").read_text()
    nbformat.write(nb, str(path))
    return path


def run_in_kit(kit, tmp_path, *args, timeout=300):
    env = dict(os.environ, KCOURSE_HOME=str(tmp_path / "kit-home"))
    env.pop("KCOURSE_ROOT", None)
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=kit, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_the_kit_ships_what_git_tracks_less_solutions_fixtures_and_ci(course, tmp_path):
    notebook_with_solution(course / "replace_op.ipynb")  # a learner's work, never added to git (.gitignore'd)
    (course / "exercises/softmax/scratch.py").write_text("x = 1\n")
    result = release_from(course, tmp_path / "kit")
    assert result.exit_code == 0, result.output
    assert (
        "left out 1 file(s) git does not track: exercises/softmax/scratch.py —" in result.output
    )  # the notebook: ignored
    shipped = files_in(tmp_path / "kit")
    assert not [f for f in shipped if f.split("/")[0] in ("solutions", ".ci", ".github", "learner")]
    assert not [f for f in shipped if f.startswith("tests/fixtures/")]
    assert [f for f in shipped if f.startswith("scripts/")] == ["scripts/setup.sh"]
    assert "replace_op.ipynb" not in shipped and "exercises/softmax/scratch.py" not in shipped
    assert {
        "exercises/softmax/softmax.py",
        "grader/cli/__init__.py",
        "tests/conftest.py",
        "calibration/calibration.json",
    } <= shipped
    assert (tmp_path / "kit/exercises/softmax/softmax.py").read_text() == (
        course / "exercises/softmax/softmax.py"
    ).read_text()


def test_a_tracked_notebook_holding_the_solution_is_a_leak_and_nothing_is_written(course, tmp_path):
    write_notebook(resolve(("softmax",)), course / "exercises/softmax/starter.ipynb")  # the stub: fine to ship
    notebook_with_solution(course / "exercises/softmax/replace_op.ipynb")
    git(course, "add", "-A")
    with pytest.raises(ReleaseError) as caught:
        release(tmp_path / "kit", root=course)
    assert re.search(
        r"exercises/softmax/replace_op.ipynb contains \d+ lines of softmax.py's solution", str(caught.value)
    )
    assert "starter.ipynb" not in str(caught.value)
    assert not (tmp_path / "kit").exists() and not list(tmp_path.glob(".kit*"))


def test_a_solution_copied_over_a_stub_is_a_leak(course, tmp_path):
    shutil.copy(course / "solutions/reduction/reduction.cu", course / "exercises/reduction/notes_backup.cu")
    git(course, "add", "-A")
    with pytest.raises(ReleaseError, match=r"exercises/reduction/notes_backup.cu contains \d+ lines of reduction.cu"):
        release(tmp_path / "kit", root=course)
    assert not (tmp_path / "kit").exists() and not list(tmp_path.glob(".kit*"))


def test_outside_a_git_checkout_the_release_is_refused_with_what_to_do(course, tmp_path):
    shutil.rmtree(course / ".git")
    result = release_from(course, tmp_path / "kit")
    assert result.exit_code == 2
    assert "is not a git checkout" in result.output and "git init && git add" in result.output
    assert "nothing was written" in result.output and not (tmp_path / "kit").exists()


def test_release_refuses_an_existing_folder_and_changes_nothing(tmp_path):
    (tmp_path / "kit").mkdir()
    (tmp_path / "kit" / "notes.txt").write_text("mine")
    result = CliRunner().invoke(main, ["release", str(tmp_path / "kit")])
    assert result.exit_code == 2 and "already exists" in result.output
    assert [p.name for p in (tmp_path / "kit").iterdir()] == ["notes.txt"]


def test_release_refuses_a_folder_inside_the_kit_and_writes_nothing():
    from grader.core.paths import course_root

    inside = course_root() / "kit-inside-the-kit"
    result = CliRunner().invoke(main, ["release", str(inside)])
    assert result.exit_code == 2 and "is inside the kit" in result.output and "outside it" in result.output
    assert not inside.exists() and not (course_root() / ".kit-inside-the-kit.partial").exists()


def test_the_kits_readme_is_the_learners_and_names_only_what_the_kit_has(course, tmp_path):
    release_from(course, tmp_path / "kit")
    readme = (tmp_path / "kit/README.md").read_text()
    assert readme == (course / "learner/README.md").read_text()
    assert [block.strip() for block in re.findall(r"```bash\n(.*?)```", readme, re.S)[:2]] == [QUICK_START, TESTS]
    for instructor_only in (
        "--source solutions",
        ".ci/run",
        "device_check",
        "kcourse validate",
        "kcourse calibrate",
        "kcourse grade-batch",
        "kcourse release",
    ):
        assert instructor_only not in readme
    # every verb (VERBS: they load lazily, so main.commands holds none)
    assert set(re.findall(r"kcourse ([a-z][a-z-]+)", readme)) <= set(VERBS)
    week1 = resolve(("week1", "vector_add"))  # the quick start grades the default plan's first exercise
    assert (tmp_path / "kit/exercises/vector_add" / week1.variant.stub).exists() and week1.variant.lang == "cuda"


@pytest.mark.emulator
@pytest.mark.slow
def test_the_quick_start_grade_in_a_fresh_kit_does_what_its_readme_says(course, tmp_path):
    release_from(course, tmp_path / "kit")
    proc = run_in_kit(tmp_path / "kit", tmp_path, "grader", "grade", "week1", "vector_add")
    # "this first grade fails, with exit status 1: ... not implemented yet" (without a GPU, on the CUDA emulator)
    assert proc.returncode == 1 and "not implemented yet" in proc.stdout, proc.stdout
    triton = run_in_kit(tmp_path / "kit", tmp_path, "grader", "grade", "week4", "vector_add")
    assert triton.returncode == 1 and "not implemented yet" in triton.stdout
    solutions = run_in_kit(tmp_path / "kit", tmp_path, "grader", "grade", "softmax", "--source", "solutions")
    assert "solutions/ is absent from a learner's kit" in solutions.stdout


@pytest.mark.slow
def test_the_kits_own_tests_pass_and_those_that_need_the_instructors_files_skip_there_saying_why(request, tmp_path):
    # the learner README's second quick-start command, `pytest` in the kit (its fast tier; GPU tests left out
    # here), as a learner runs it: a test that reads solutions/ or tests/fixtures/ without its marker fails there.
    # .ci/run runs it before the repository's tests (KCOURSE_KIT_TIER_LOG: its output) and stops if it fails.
    if os.environ.get("KCOURSE_KIT_TIER_LOG"):
        returncode, output = 0, Path(os.environ["KCOURSE_KIT_TIER_LOG"]).read_text()
    else:
        release_from(request.getfixturevalue("course"), tmp_path / "kit")
        args = ["pytest", "-q", "-rfEs", "-p", "no:cacheprovider", "-m", "not slow and not bench and not gpu"]
        proc = run_in_kit(tmp_path / "kit", tmp_path, *args, timeout=1500)  # the README's `pytest`: the fast tier
        returncode, output = proc.returncode, proc.stdout
    failures = [line for line in output.splitlines() if line.startswith(("FAILED", "ERROR"))]
    assert returncode == 0, "\n".join(failures) + "\n" + output[-3000:]  # the kit's failures named first
    assert " passed" in output and "failed" not in output
    assert "tests/fixtures/submissions/ is absent (a learner's kit)" in output
    assert "solutions/ is absent (a learner's kit)" in output


def test_scaffolding_a_stub_gives_is_not_a_leak_but_a_stub_overwritten_with_its_solution_is(course, tmp_path):
    from grader.commands.release import solution_lines

    telling = solution_lines(course)[course / "solutions/flash_attention_v1/flash_attention_v1.cu"]
    assert "const c10::DeviceGuard guard(q.device());" not in telling  # the operator's host code, given in the stub
    shutil.copy(course / "solutions/reduction/reduction.cu", course / "exercises/reduction/reduction.cu")
    git(course, "add", "-A")
    with pytest.raises(ReleaseError, match=r"exercises/reduction/reduction.cu contains \d+ lines of reduction.cu"):
        release(tmp_path / "kit", root=course)


def test_a_ladder_rung_shares_its_exercises_launcher_but_a_rung_copied_over_the_stub_is_a_leak(course, tmp_path):
    from grader.commands.release import solution_lines

    rung = course / "solutions/tk_gemm/ladder/step2_wgmma.cu"
    launcher = "__global__ __launch_bounds__(THREADS) void gemm_kernel(const __grid_constant__ globals g) {"
    assert launcher not in solution_lines(course)[rung]  # the stub gives it: scaffolding, not the rung's answer
    shutil.copy(rung, course / "exercises/tk_gemm/tk_gemm.cu")
    git(course, "add", "-A")
    with pytest.raises(ReleaseError, match=r"exercises/tk_gemm/tk_gemm.cu contains \d+ lines of step2_wgmma.cu"):
        release(tmp_path / "kit", root=course)
