"""The box around learner code (issue 38, grader/child/box.py): each attack is a learner file among the fixtures.
For every one: a clear verdict, the grader lives, nothing earlier is lost, and the kit is unchanged."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import ROOT, SUBMISSIONS, submission

from grader.child import box
from grader.cli import main
from grader.core import store
from grader.core.discovery import resolve
from grader.run.grade import grade

pytestmark = pytest.mark.skipif(not box.available()[0], reason="no Landlock on this kernel: nothing is boxed here")

SOFTMAX, VECTOR_ADD = ("softmax",), ("vector_add",)
REFUSED = "the grading box refused this"


def grade_file(words, name, lang="triton", **kwargs):
    return grade(resolve(words, lang=lang), submission=submission(name), seed=5, **kwargs)


def failing(result):
    return next(c for c in result.checks if c.status in ("failed", "error"))


def kit_digest(root: Path = ROOT) -> str:
    """The trusted files' content, as one digest (grader, specs, references, calibration, plans, templates)."""
    from grader.run import kit

    return hashlib.sha256(json.dumps(kit.snapshot(root), sort_keys=True).encode()).hexdigest()


@pytest.fixture
def kit_copy(tmp_path, monkeypatch):
    """A copy of the kit (KCOURSE_ROOT points the grader and the child at it), solutions included."""
    root = tmp_path / "kit"
    for folder in ("exercises", "plans", "templates", "calibration", "grader", "solutions"):
        shutil.copytree(ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", root)
    monkeypatch.setenv("KCOURSE_ROOT", str(root))
    return root


@pytest.mark.slow
@pytest.mark.solutions
def test_a_reference_rewritten_at_import_fails_both_grades_and_the_solution_still_passes(kit_copy):
    before = kit_digest(kit_copy)
    for _ in range(2):
        check = failing(grade_file(SOFTMAX, "box_softmax_rewrites_reference.py"))
        assert check.name == "load" and "PermissionError" in check.message and REFUSED in check.message
        assert kit_digest(kit_copy) == before
    assert grade(resolve(SOFTMAX, lang="triton"), source="solutions", seed=5).status == "passed"


@pytest.mark.slow
@pytest.mark.solutions
def test_unboxed_a_rewritten_reference_is_put_back_and_fails_every_grade(kit_copy, monkeypatch):
    """Where no box is possible (here forced), the kit check restores the file after the run."""
    from grader.run import kit

    monkeypatch.setenv(box.UNBOXED_ENV, "1")
    kit.write_manifest(kit_copy)  # a release: only files as shipped are put back
    reference = kit_copy / "exercises" / "softmax" / "reference.py"
    original = reference.read_text()
    for _ in range(2):
        result = grade_file(SOFTMAX, "box_softmax_rewrites_reference.py")
        codes = [c.details.get("code") for c in result.checks if c.status == "failed"]
        assert result.status == "failed" and "kit_modified" in codes
        assert result.isolation.startswith("none (") and reference.read_text() == original
    assert grade(resolve(SOFTMAX, lang="triton"), source="solutions", seed=5).status == "passed"


@pytest.mark.solutions
def test_the_header_says_once_when_nothing_boxes_the_learners_code(monkeypatch):
    from grader.reports.console import format_grade

    monkeypatch.setattr(box, "available", lambda: (False, "this kernel has no Landlock"))
    result = grade(resolve(VECTOR_ADD, lang="triton"), source="solutions", seed=5)
    assert result.status == "passed"
    assert format_grade(result).count("isolation: none (this kernel has no Landlock)") == 1


@pytest.mark.slow
@pytest.mark.solutions
def test_writing_into_the_results_store_is_refused_and_earlier_results_are_kept():
    assert grade(resolve(VECTOR_ADD, lang="triton"), source="solutions", seed=5).status == "passed"
    earlier = store.results_path().read_text()
    check = failing(grade_file(VECTOR_ADD, "box_vector_add_writes_results.py"))
    assert check.name == "load" and REFUSED in check.message
    text = store.results_path().read_text()
    added = [json.loads(line) for line in text[len(earlier) :].splitlines()]
    assert text.startswith(earlier) and [r.get("status") for r in added] == ["failed"]
    assert not any(r.get("forged") for r in added)


@pytest.mark.solutions
def test_reading_the_instructors_solution_is_refused():
    check = failing(grade_file(VECTOR_ADD, "box_vector_add_reads_solution.py"))
    assert check.name == "load" and "solutions/vector_add/vector_add.py" in check.message and REFUSED in check.message


@pytest.mark.slow
def test_a_network_connection_is_refused_and_never_reaches_the_listener(monkeypatch):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(0.2)
        monkeypatch.setenv("KCOURSE_TEST_PORT", str(listener.getsockname()[1]))
        check = failing(grade_file(VECTOR_ADD, "box_vector_add_socket.py"))
        assert check.name == "load" and "PermissionError" in check.message
        with pytest.raises(socket.timeout):
            listener.accept()


def _processes_capped() -> bool:
    return os.getuid() != 0 or any(box._pids_hierarchy(Path(root)) for root in box.CGROUP_ROOTS)


@pytest.mark.slow
@pytest.mark.skipif(not _processes_capped(), reason="root without a pids cgroup: the process count is not capped")
def test_a_fork_loop_is_stopped_by_the_process_cap_and_its_processes_end():
    started = time.monotonic()
    check = failing(grade_file(VECTOR_ADD, "box_vector_add_forks.py"))
    assert check.name == "load" and "fork refused after" in check.message
    assert time.monotonic() - started < 60
    left = subprocess.run(["pgrep", "-f", "box_vector_add_forks"], capture_output=True, text=True).stdout.split()
    assert left == []


@pytest.mark.slow
def test_a_10_gb_file_stops_at_the_file_size_cap(monkeypatch):
    monkeypatch.setenv("KCOURSE_BOX_FILE_SIZE", str(256 * 2**20))
    check = failing(grade_file(VECTOR_ADD, "box_vector_add_big_file.py"))
    assert check.name == "load" and "File too large" in check.message


@pytest.mark.slow
@pytest.mark.solutions
def test_in_grade_batch_a_learner_cannot_read_another_learners_file(tmp_path):
    submissions = tmp_path / "submissions"
    for learner, name in (
        ("alice", "vector_add.py"),
        ("bob", "vector_add.py"),
        ("mallory", "box_vector_add_reads_other_learner.py"),
    ):
        (submissions / learner).mkdir(parents=True)
        source = ROOT / "solutions" / "vector_add" / "vector_add.py" if learner != "mallory" else SUBMISSIONS / name
        shutil.copy(source, submissions / learner / "vector_add.py")
    out = tmp_path / "book"
    result = CliRunner().invoke(
        main,
        ["grade-batch", str(submissions), "--only", "vector_add", "--lang", "triton", "--out", str(out), "--seed", "5"],
    )
    assert result.exit_code == 0, result.output
    rows = {r["learner"]: r for r in json.loads((out / "gradebook.json").read_text())}
    assert (rows["alice"]["status"], rows["bob"]["status"], rows["mallory"]["status"]) == ("passed", "passed", "failed")
    assert "PermissionError" in rows["mallory"]["verdict"] or REFUSED in json.dumps(rows["mallory"]["result"])


@pytest.mark.slow
@pytest.mark.solutions
def test_grade_batch_and_validate_refuse_to_run_unboxed_unless_allowed(monkeypatch, tmp_path):
    monkeypatch.setattr(box, "available", lambda: (False, "this kernel has no Landlock"))
    for args in (["grade-batch", str(tmp_path)], ["validate", "--only", "vector_add"]):
        refused = CliRunner().invoke(main, args)
        assert refused.exit_code == 2 and "--allow-unisolated" in refused.output
    allowed = CliRunner().invoke(main, ["validate", "--only", "vector_add", "--lang", "triton", "--allow-unisolated"])
    assert allowed.exit_code == 0, allowed.output


@pytest.mark.gpu
@pytest.mark.solutions
def test_host_code_that_dlopens_the_cached_solution_finds_nothing_and_fails_numerics():
    check = failing(grade_file(VECTOR_ADD, "box_vector_add_dlopens_solution.cu", lang="cuda"))
    assert check.name == "numerics"


def test_the_box_costs_little_to_enter(tmp_path):
    """Measured in a fresh process: the policy, the limits, seccomp and Landlock (issue: <= 100 ms a grade)."""
    code = (
        "import time, pathlib; from grader.child import box; t = time.perf_counter(); "
        f"box.enter(box.policy(pathlib.Path({str(tmp_path)!r}), pathlib.Path('x.py'), pathlib.Path({str(ROOT)!r}))); "
        "print(time.perf_counter() - t)"
    )
    seconds = float(
        subprocess.run([os.sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    )
    assert seconds < 0.1


def test_grade_batch_refuses_a_kit_that_differs_from_git_and_names_the_files(monkeypatch, tmp_path):
    from grader.run import kit

    monkeypatch.delenv("KCOURSE_ALLOW_MODIFIED_KIT")
    monkeypatch.setattr(kit, "differs_from_git", lambda root=None: ["exercises/softmax/reference.py"])
    refused = CliRunner().invoke(main, ["grade-batch", str(tmp_path)])
    assert refused.exit_code == 2 and "exercises/softmax/reference.py" in refused.output
    assert "--allow-modified-kit" in refused.output


def test_a_trusted_file_changed_since_git_is_named_in_the_grade_header(tmp_path):
    """Git's blob ids of the working files against the index: an edited reference shows, a stub does not."""
    from grader.run import kit

    root = tmp_path / "kit"
    (root / "exercises" / "x").mkdir(parents=True)
    (root / "exercises" / "x" / "reference.py").write_text("def reference(a):\n    return a\n")
    (root / "exercises" / "x" / "x.py").write_text("# the learner's file\n")
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(["git", "add", "."], cwd=root, check=True)
    assert kit.differs_from_git(root) == []
    (root / "exercises" / "x" / "reference.py").write_text("def reference(a):\n    return a * 0\n")
    (root / "exercises" / "x" / "x.py").write_text("# edited\n")
    assert kit.differs_from_git(root) == ["exercises/x/reference.py"]
    assert kit.differs_from_git(tmp_path) is None  # no checkout
