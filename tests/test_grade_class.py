"""Grading a class: the append-only gradebook (only what is new is graded, nothing is recorded twice), the
progress line, the leaderboard, Gradescope's leaderboard field, batch job scripts, and grading through a
local Dask cluster of processes, a worker killed mid-task included. Dask tests skip without the extra."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from grader.cli import main
from grader.commands import batch
from grader.commands.batch_progress import Progress
from grader.core.discovery import resolve
from grader.core.records import Check, GradeResult, Timing
from grader.reports import exports, leaderboard
from grader.reports.gradebook import Gradebook, row_key

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "submissions"
REDUCTION = ROOT / "solutions" / "reduction" / "reduction.cu"
VECTOR_ADD = ROOT / "solutions" / "vector_add" / "vector_add.py"
needs_solutions = pytest.mark.skipif(not REDUCTION.exists(), reason="needs the instructor's solutions/ folder")


def make_class(folder: Path, learners: dict[str, dict[str, Path]]) -> Path:
    for learner, files in learners.items():
        (folder / learner).mkdir(parents=True)
        for name, source in files.items():
            shutil.copy(source, folder / learner / name)
    return folder


class FakeRunner:
    """Grades instantly (status from the file's first line); `stop_after` rows, then Ctrl-C."""

    def __init__(self, stop_after: int | None = None):
        self.graded: list[str] = []
        self.stop_after = stop_after

    def run(self, work, seed, timeout_s, progress):
        for job, target in work:
            if self.stop_after is not None and len(self.graded) == self.stop_after:
                raise KeyboardInterrupt
            progress.started(job.name)
            self.graded.append(job.name)
            result = GradeResult(exercise=target.spec.id, lang=target.variant.lang, source="x", seed=1)
            result.add(Check("numerics", job.path.read_text().split()[0], "fake verdict"))
            result.finish()
            yield job, batch.result_row(job.learner, target, result, result.verdict)


@pytest.fixture(scope="module")
def targets():
    return [resolve(("reduction",)), resolve(("vector_add",), lang="triton")]


def fake_class(tmp_path: Path) -> Path:
    subs = tmp_path / "subs"
    for learner in ("ada", "bo", "cy"):
        (subs / learner).mkdir(parents=True)
        (subs / learner / "reduction.cu").write_text(f"passed {learner}")
        (subs / learner / "vector_add.py").write_text(f"failed {learner}")
    return subs


def test_a_rerun_grades_only_new_submissions_and_never_records_one_twice(tmp_path, targets):
    subs, book = fake_class(tmp_path), tmp_path / "book"
    rows = batch.grade_batch(subs, targets, out_dir=book, runner=FakeRunner())
    assert [r["status"] for r in rows] == ["passed", "failed"] * 3
    again = FakeRunner()
    assert batch.grade_batch(subs, targets, out_dir=book, runner=again) == rows and again.graded == []
    (subs / "bo" / "reduction.cu").write_text("failed late fix")  # a late, changed submission
    later = FakeRunner()
    rows = batch.grade_batch(subs, targets, out_dir=book, runner=later)
    assert later.graded == ["bo reduction:cuda"] and rows[2]["status"] == "failed"
    ledger = [json.loads(line) for line in (book / "gradebook.jsonl").read_text().splitlines()]
    assert len(ledger) == 7 and len({row_key(r) for r in ledger}) == 7


def test_an_interrupted_batch_keeps_what_it_graded_and_the_rerun_grades_the_rest(tmp_path, targets):
    subs, book = fake_class(tmp_path), tmp_path / "book"
    with pytest.raises(KeyboardInterrupt):
        batch.grade_batch(subs, targets, out_dir=book, runner=FakeRunner(stop_after=4))
    assert len(Gradebook(book).rows()) == 4
    rest = FakeRunner()
    rows = batch.grade_batch(subs, targets, out_dir=book, runner=rest)
    assert len(rest.graded) == 2 and len(rows) == 6
    assert len((book / "gradebook.jsonl").read_text().splitlines()) == 6


def test_the_progress_line_counts_done_running_failed_and_remaining():
    now = [0.0]
    stream = io.StringIO()
    progress = Progress(stream=stream, interval_s=0, clock=lambda: now[0])
    progress.begin(4, already=2)
    progress.started("ada reduction:cuda")
    progress.started("bo reduction:cuda")
    now[0] = 30.0
    progress.finished("ada reduction:cuda", {"status": "failed", "attempts": 2})
    # a running grade is not also waiting: 1 done + 1 running + 2 waiting = 4; the time left is for the 3 unfinished
    assert progress.line() == "graded 1/4 (1 failed), 1 running, 2 waiting; 2.0/min, about 1m30s left"
    summary = progress.summary([{"status": "failed"}, {"status": "passed"}, {"status": "passed"}])
    assert summary.startswith(
        "3 grades (2 passed, 1 failed): 1 graded now in 30s (2.0/min), 2 already in the gradebook"
    )
    assert "1 retried after their worker died" in summary and stream.getvalue().count("\n") == 3


def board_rows() -> list[dict]:
    def row(learner, ratio, gpu="NVIDIA H100", status="passed"):
        return {
            "learner": learner,
            "exercise": "reduction",
            "lang": "cuda",
            "status": status,
            "ratio": ratio,
            "learner_ms": 0.5 / ratio if ratio else None,
            "gpu": gpu,
            "bar": "calibration for NVIDIA H100",
        }

    return [
        row("ada", 0.8),
        row("bo", 1.1),
        row("cy", 0.9, status="failed"),
        row("di", None),
        row("ed", 0.7, gpu="NVIDIA H200"),
    ]


def test_the_leaderboard_ranks_passing_submissions_per_gpu_model_by_pseudonym(tmp_path):
    subs = tmp_path / "subs"
    for learner in ("ada", "bo", "cy", "di", "ed"):
        (subs / learner).mkdir(parents=True)
    (subs / "bo" / "pseudonym").write_text("Warp <b>Speed</b> | 9\nsecond line ignored\n")
    md_path, html_path = leaderboard.write(board_rows(), subs, tmp_path / "book")
    md = md_path.read_text()
    h100 = md[md.index("on NVIDIA H100") : md.index("on NVIDIA H200")]
    assert h100.index("Warp &lt;b&gt;Speed&lt;/b&gt; \\| 9") < h100.index("anon-")  # 1.10 before 0.80
    assert "| 1 | Warp" in h100 and "| 1.10 |" in h100 and "ada" not in md and "cy" not in md
    anon = leaderboard.anonymous_id("ada", leaderboard.class_salt(tmp_path / "book"))
    assert f"| 2 | {anon} | 0.80 |" in h100  # stable across runs: the salt is kept beside the gradebook
    html = html_path.read_text()
    assert "Warp &lt;b&gt;Speed&lt;/b&gt; | 9" in html and "<b>Speed" not in html
    assert "NVIDIA H200" in html and html.count("<tr>") == 2 + 3


def test_gradescope_results_carry_the_leaderboard_field_for_a_timed_pass():
    result = GradeResult(exercise="reduction", lang="cuda", source="x", seed=1, scoring={"numerics": 6.0})
    for name in ("numerics", "integrity"):
        result.add(Check(name, "passed", ""))
    result.timings.append(Timing(case="n=2**28", learner_ms=1.0, solution_ms=0.9, ratio=0.9))
    data = exports.gradescope_json([result.finish()])
    assert data["leaderboard"] == [{"name": "reduction (cuda) × solution speed", "value": 0.9, "order": "desc"}]
    result.timings.clear()
    assert "leaderboard" not in exports.gradescope_json([result])


def test_each_grade_goes_to_a_gpu_this_process_was_given_never_to_its_index(monkeypatch):
    """A grader given GPU 3 (CUDA_VISIBLE_DEVICES=3: one of several graders on a host, or a batch system's
    choice) sees one GPU; its children must be given "3", not "0", which is another grader's GPU (all four
    lanes of a 4-GPU host once graded on GPU 0, and the probe called honest kernels forged)."""
    monkeypatch.setattr(batch, "gpu_count", lambda: 1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert batch.LocalRunner().devices == ["3"]
    monkeypatch.setattr(batch, "gpu_count", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-5f1c,GPU-77aa")
    assert batch.LocalRunner(workers=3).devices == ["GPU-5f1c", "GPU-77aa", "GPU-5f1c"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert batch.LocalRunner().devices == ["0", "1"]
    monkeypatch.setattr(batch, "gpu_count", lambda: 0)
    assert batch.LocalRunner().devices == [None]


def test_cluster_options_without_dask_say_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)
    (tmp_path / "ada").mkdir()
    result = CliRunner().invoke(main, ["grade-batch", str(tmp_path), "--cluster", "local", "--only", "reduction"])
    assert result.exit_code == 2 and 'pip install "kernel-course[cluster]"' in result.output


@pytest.mark.parametrize(
    "system, lines",
    [
        (
            "slurm",
            [
                "#SBATCH --gres=gpu:2",
                "#SBATCH -p gpu",
                "#SBATCH -A cs101",
                "#SBATCH -t 02:00:00",
                "#SBATCH --cpus-per-task=8",
            ],
        ),
        (
            "pbs",
            ["#PBS -l select=1:ncpus=8:ngpus=2:mem=64GB", "#PBS -q gpu", "#PBS -A cs101", "#PBS -l walltime=02:00:00"],
        ),
        ("sge", ["#$ -l gpu=2", "#$ -q gpu", "#$ -P cs101", "#$ -l h_rt=02:00:00"]),
        ("lsf", ['#BSUB -gpu "num=2"', "#BSUB -q gpu", '#BSUB -P "cs101"', "#BSUB -W 02:00"]),
    ],
)
def test_dry_run_prints_a_job_script_with_the_batch_systems_resource_lines(tmp_path, system, lines):
    pytest.importorskip("dask_jobqueue")
    (tmp_path / "ada").mkdir()
    result = CliRunner().invoke(
        main,
        [
            "grade-batch",
            str(tmp_path),
            "--cluster",
            system,
            "--dry-run",
            "--queue",
            "gpu",
            "--account",
            "cs101",
            "--walltime",
            "02:00:00",
            "--gpus-per-job",
            "2",
            "--out",
            str(tmp_path / "book"),
        ],
    )
    assert result.exit_code == 0, result.output
    script = result.output.splitlines()
    assert all(line in script for line in lines), result.output
    assert any("--nworkers 2" in line and "--resources GPU=1" in line for line in script)  # one worker per GPU
    assert f"cd {ROOT}" in script and not (tmp_path / "book").exists()  # nothing submitted, nothing graded


def test_dry_run_without_a_batch_system_is_a_usage_error(tmp_path):
    result = CliRunner().invoke(main, ["grade-batch", str(tmp_path), "--cluster", "local", "--dry-run"])
    assert result.exit_code == 2 and "--cluster slurm|pbs|sge|lsf" in result.output


@pytest.fixture(scope="module")
def two_workers():
    """A local Dask cluster of two worker processes, as `dask scheduler` + 2 × `dask worker` would make."""
    distributed = pytest.importorskip("distributed")
    import logging

    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=logging.CRITICAL
    )
    client = distributed.Client(cluster)
    yield client
    client.close()
    cluster.close()


@pytest.mark.emulator  # the cluster's worker processes keep the environment they started with
@pytest.mark.slow
@needs_solutions
def test_a_class_is_graded_through_a_dask_scheduler_on_worker_processes(tmp_path, two_workers):
    subs = make_class(
        tmp_path / "subs",
        {
            "ada": {"reduction.cu": REDUCTION, "vector_add.py": VECTOR_ADD},
            "bo": {"reduction.cu": REDUCTION, "vector_add.py": FIXTURES / "vector_add_segfault.py"},
            "cy": {"reduction.cu": FIXTURES / "reduction_broken.cu"},
        },
    )
    book = tmp_path / "book"
    args = [
        "grade-batch",
        str(subs),
        "--only",
        "reduction",
        "--only",
        "vector_add",
        "--out",
        str(book),
        "--scheduler",
        two_workers.scheduler.address,
    ]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert f"grading on the Dask cluster at {two_workers.scheduler.address} (2 CPU worker(s))" in result.output
    rows = {(r["learner"], r["exercise"], r["lang"]): r for r in json.loads((book / "gradebook.json").read_text())}
    # the exercises some learner submitted (reduction:cuda, vector_add:triton), not every version: --all would add them
    assert len(rows) == 6 and {r["worker"] for r in rows.values() if r["status"] != "missing"} <= {"0", "1"}
    checks = {c["name"]: c["status"] for c in rows["ada", "vector_add", "triton"]["result"]["checks"]}
    assert checks["numerics"] == "passed"  # under the Triton interpreter, shipped to the worker as bytes
    assert "SIGSEGV" in rows["bo", "vector_add", "triton"]["verdict"]  # a crash costs that task only
    assert rows["ada", "reduction", "cuda"]["status"] == "passed"  # compiled, then run on the CPU emulator
    assert rows["cy", "reduction", "cuda"]["status"] == "failed"  # its compile error
    assert rows["cy", "vector_add", "triton"]["status"] == "missing"
    assert "6 grades" in result.output and "5 graded now" in result.output
    rerun = CliRunner().invoke(main, args)
    assert "0 graded now" in rerun.output and "5 already in the gradebook" in rerun.output
    assert len((book / "gradebook.jsonl").read_text().splitlines()) == 5


def kill_worker_and_its_children(pid: int) -> None:
    """What a node failure or the OOM killer does to a worker: it and the grading child it started vanish."""
    import psutil

    os.kill(pid, signal.SIGSTOP)  # no new child between listing and killing
    for child in psutil.Process(pid).children(recursive=True):
        child.kill()
    os.kill(pid, signal.SIGKILL)


class KillOnStart(Progress):
    """Kills the worker that starts `victim`'s first attempt."""

    def __init__(self, victim: str, pids: dict[str, int]):
        super().__init__()
        self.victim, self.pids, self.killed = victim, pids, []

    def started(self, name: str, worker: str = "") -> None:
        super().started(name, worker)
        if name == self.victim and not self.killed:
            self.killed.append(name)
            kill_worker_and_its_children(self.pids[worker])


@pytest.mark.slow
@needs_solutions
def test_a_worker_killed_mid_task_has_it_regraded_elsewhere_and_the_rerun_adds_nothing(tmp_path, two_workers, targets):
    from grader.commands.cluster import DaskRunner

    subs = make_class(
        tmp_path / "subs",
        {
            "ada": {"vector_add.py": FIXTURES / "vector_add_hangs.py", "reduction.cu": REDUCTION},
            "bo": {"vector_add.py": FIXTURES / "vector_add_hangs.py", "reduction.cu": REDUCTION},
            "cy": {"reduction.cu": REDUCTION},
        },
    )
    client, book = two_workers, tmp_path / "book"
    pids = client.run(os.getpid)
    names = {str(w["name"]): address for address, w in client.scheduler_info()["workers"].items()}
    killer = KillOnStart("ada vector_add:triton", {name: pids[address] for name, address in names.items()})
    rows = batch.grade_batch(subs, targets, timeout_s=3, out_dir=book, runner=DaskRunner(client), progress=killer)
    assert killer.killed == ["ada vector_add:triton"]
    by = {(r["learner"], r["exercise"]): r for r in rows}
    assert by["ada", "vector_add"]["attempts"] == 2 and len(by["ada", "vector_add"]["workers"]) == 2
    assert by["ada", "vector_add"]["status"] == "failed" and "3 s limit" in by["ada", "vector_add"]["verdict"]
    assert by["bo", "vector_add"]["attempts"] == 1 and by["cy", "vector_add"]["status"] == "missing"
    again = batch.grade_batch(subs, targets, timeout_s=3, out_dir=book, runner=DaskRunner(client))
    assert again == rows
    ledger = [json.loads(line) for line in (book / "gradebook.jsonl").read_text().splitlines()]
    assert len(ledger) == 5 and len({row_key(r) for r in ledger}) == 5
