"""Profile, tune, notebooks and progress on the CPU (Triton interpreter)."""

import json
import os
import re
import subprocess
import sys

import pytest
from click.testing import CliRunner
from conftest import ROOT

from grader.cli import main
from grader.commands import tools
from grader.core import store
from grader.core.discovery import resolve
from grader.run.grade import grade

nbformat = pytest.importorskip("nbformat")  # a dependency; absent only on bare GPU images

from grader.toolchain.notebook import NotebookError, extract_submission, write_notebook  # noqa: E402


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.mark.slow
@pytest.mark.solutions
def test_tune_checks_every_configuration_and_records_them():
    record = tools.run_tune(resolve(("softmax",)), source="solutions")
    assert [r["config"] for r in record["rows"]] == [f"num_warps={w}" for w in (2, 4, 8, 16)]
    assert all(r["correct"] for r in record["rows"])
    assert store.latest("tune")["exercise"] == "softmax"
    assert (
        record["device"] == "CPU (Triton interpreter)"
    )  # the worker's own name for where it timed (a GPU's model there)


def test_tune_of_a_version_without_tunables_says_so_and_names_the_version_that_has_them():
    with pytest.raises(
        tools.ToolError,
        match=r"exposes no tunable parameters.*\[tuning.cuda\].*`kcourse tune reduction --lang triton`",
    ):
        tools.run_tune(resolve(("reduction",), lang="cuda"))


@pytest.mark.slow
def test_tune_of_a_stub_gives_the_graders_verdict():
    result = run("tune", "softmax")
    assert result.exit_code == 1 and "not implemented yet" in result.output


@pytest.mark.slow
@pytest.mark.solutions
def test_profile_writes_a_trace_and_a_top_table(tmp_path):
    record = tools.run_profile(resolve(("softmax",)), tmp_path, source="solutions")
    assert json.loads((tmp_path / "trace_softmax_triton.json").read_text())
    assert record["top"] and {"name", "calls", "device_us", "cpu_us"} <= set(record["top"][0])
    assert store.latest("profile")["trace"] == record["trace"]


def test_ncu_csv_is_reduced_to_the_learners_kernels():
    csv_text = (
        '"ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"\n'
        '"0","void at::native::fill_kernel","SpeedOfLight","Duration","us","3.1"\n'
        '"1","softmax_kernel","SpeedOfLight","Duration","us","48.2"\n'
        '"1","softmax_kernel","SpeedOfLight","DRAM Throughput","%","91.5"\n'
        '"1","softmax_kernel","SpeedOfLight","L1/TEX Cache Throughput","%","20.0"\n'
    )
    rows = tools.parse_ncu("==PROF== noise\n" + csv_text)
    assert rows == [
        {"kernel": "softmax_kernel", "metric": "Duration", "value": "48.2", "unit": "us"},
        {"kernel": "softmax_kernel", "metric": "DRAM Throughput", "value": "91.5", "unit": "%"},
    ]


@pytest.mark.slow
@pytest.mark.solutions
def test_a_wrapped_child_may_finish_after_the_worker(tmp_path):
    """A wrapper (Nsight Compute) writes its report once the worker has exited: the grade waits for that
    instead of killing the process group on the tool's result, which lost every `profile --ncu` report."""
    report = tmp_path / "report.txt"
    wrapper = ["sh", "-c", f'"$@"; sleep 1; echo written > {report}', "wrapper"]
    result = grade(
        resolve(("softmax",)), source="solutions", mode="counters", record=False, job_extra={"wrapper": wrapper}
    )
    assert "counters" in result.extra, result.verdict
    assert report.read_text() == "written\n"


def test_an_empty_nsight_compute_run_says_why():
    """`profile --ncu` once came back with no rows and no word (ncu spent its launch count on the child's
    start-up kernels): an empty run now names its cause, ncu's own error first."""
    ran = type("Result", (), {"extra": {"counters": {}}, "checks": [], "verdict": "passed"})()
    failed = type("Result", (), {"extra": {}, "checks": [], "verdict": "failed: load"})()
    assert "ERR_NVGPUCTRPERM" in tools._ncu_silence("==ERROR== ERR_NVGPUCTRPERM - no permission\n", ran)
    assert "did not finish: failed: load" in tools._ncu_silence("", failed)
    clocks = "==WARNING== Note: Running with unmodified GPU clocks.\n"  # said on every run: not a cause
    assert "launches its own kernel" in tools._ncu_silence(clocks, ran)
    assert "launches its own kernel" in tools._ncu_silence('"ID","Kernel Name"\n', ran)
    text = tools.format_profile(
        {
            "exercise": "scan",
            "lang": "cuda",
            "case": "n=8",
            "calls": 5,
            "device": "GPU",
            "top": [],
            "trace": "t.json",
            "ncu": [],
            "ncu_note": "Nsight Compute said: x",
        }
    )
    assert "Nsight Compute: nothing recorded. Nsight Compute said: x" in text


def test_notebook_has_a_baseline_a_tagged_cell_and_profiling(tmp_path):
    path = write_notebook(resolve(("softmax",)), tmp_path / "replace_op.ipynb")
    nb = nbformat.read(str(path), as_version=4)
    nbformat.validate(nb)
    tagged = [c for c in nb.cells if "kcourse" in c.metadata.get("tags", [])]
    assert len(tagged) == 1 and "def softmax(" in tagged[0].source
    assert any("torch.profiler" in c.source for c in nb.cells)
    with pytest.raises(NotebookError, match="exists"):
        write_notebook(resolve(("softmax",)), path)


def test_the_notebook_command_says_what_to_do_next_and_keeps_an_existing_notebook(tmp_path):
    from click.testing import CliRunner

    from grader.cli import main

    path = tmp_path / "mine.ipynb"
    first = CliRunner().invoke(main, ["notebook", "day4", "--out", str(path)])
    assert first.exit_code == 0 and f"kcourse grade softmax --file {path}" in first.output
    path.write_text("my work")
    again = CliRunner().invoke(main, ["notebook", "day4", "--out", str(path)])
    assert again.exit_code == 2 and "--force" in again.output and path.read_text() == "my work"
    forced = CliRunner().invoke(main, ["notebook", "day4", "--out", str(path), "--force"])
    assert forced.exit_code == 0 and nbformat.read(str(path), as_version=4).cells


def notebook_with_solution(path):
    path = write_notebook(resolve(("softmax",)), path)
    nb = nbformat.read(str(path), as_version=4)
    for cell in nb.cells:
        if "kcourse" in cell.metadata.get("tags", []):
            cell.source = (ROOT / "solutions/softmax/softmax.py").read_text()
    nbformat.write(nb, str(path))
    return path


# Runs a notebook's code cells in order in one namespace, as Jupyter would; the cells' text goes to
# linecache as IPython puts it there, because @triton.jit reads its function's source.
RUN_CELLS = """
import linecache, sys
import nbformat
namespace = {"__name__": "__main__"}
for number, cell in enumerate(nbformat.read(sys.argv[1], as_version=4).cells, 1):
    if cell.cell_type == "code":
        name = f"<cell {number}>"
        linecache.cache[name] = (len(cell.source), None, cell.source.splitlines(True), name)
        exec(compile(cell.source, name, "exec"), namespace)
"""


def run_cells_without_a_gpu(path):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")  # no GPU, even on a machine that has one
    env.pop("TRITON_INTERPRET", None)  # the notebook must switch the interpreter on itself
    return subprocess.run(
        [sys.executable, "-c", RUN_CELLS, str(path)],
        cwd=path.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.solutions
@pytest.mark.slow
def test_the_day4_notebook_runs_top_to_bottom_without_a_gpu_under_the_interpreter(tmp_path):
    proc = run_cells_without_a_gpu(notebook_with_solution(tmp_path / "replace_op.ipynb"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "matches the baseline" in proc.stdout
    assert (
        proc.stdout.count("no GPU: timing skipped (the Triton interpreter runs on the CPU") == 2
    )  # baseline and yours
    assert re.search(r"^ *yours .* 5 *$", proc.stdout, re.M) and "torch baseline" in proc.stdout  # the profiler's table
    assert (tmp_path / "replace_op_trace.json").exists()


@pytest.mark.slow
def test_the_day4_notebooks_stub_stops_at_the_learners_todo_not_at_a_missing_gpu(tmp_path):
    proc = run_cells_without_a_gpu(write_notebook(resolve(("softmax",)), tmp_path / "replace_op.ipynb"))
    assert "no GPU: timing skipped" in proc.stdout  # the baseline cell ran
    assert proc.returncode == 1 and "0 active drivers" not in proc.stderr
    assert proc.stderr.rstrip().endswith("NotImplementedError: write softmax_kernel and launch it in softmax()")


@pytest.mark.slow
@pytest.mark.solutions
def test_a_notebook_is_graded_by_its_tagged_cells(tmp_path):
    path = notebook_with_solution(tmp_path / "replace_op.ipynb")
    result = grade(resolve(("softmax",)), submission=path, seed=3)
    assert result.status == "passed" and result.source.endswith("replace_op.ipynb")
    stub_result = run("grade", "softmax", "--file", str(write_notebook(resolve(("softmax",)), tmp_path / "b.ipynb")))
    assert stub_result.exit_code == 1 and "not implemented yet" in stub_result.output


def test_a_notebook_without_a_tagged_cell_says_what_to_tag(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("print(1)")]
    path = tmp_path / "x.ipynb"
    nbformat.write(nb, str(path))
    with pytest.raises(NotebookError, match="no code cell tagged `kcourse`"):
        extract_submission(path, resolve(("softmax",)))


def test_progress_is_a_checklist_from_recorded_results():
    store.append({"kind": "env"})
    store.append({"kind": "grade", "exercise": "vector_add", "lang": "triton", "source": "learner", "status": "passed"})
    store.append({"kind": "grade", "exercise": "softmax", "lang": "triton", "source": "learner", "status": "failed"})
    output = run("progress", "--plan", "triton-5-day").output
    assert "[x]  day1" in output and "[~]  day2" in output and "softmax (triton): failed" in output
    assert "1 of 5 done" in output
    hundred = run("progress", "--plan", "challenge-100-day").output
    assert "day100" in hundred and "kcourse report portfolio" in hundred  # day 100: the portfolio's notes


@pytest.mark.slow
@pytest.mark.nvcc
def test_tune_of_a_cuda_exercise_rebuilds_each_block_size_and_reports_the_compiler(monkeypatch):
    from conftest import HAS_GPU, submission

    if HAS_GPU:
        pytest.skip("the GPU path is covered in test_gpu.py")
    record = tools.run_tune(resolve(("matmul",)), submission=submission("matmul_tiled.cu"))
    assert [r["config"] for r in record["rows"]] == ["TILE=8", "TILE=16", "TILE=32"]
    assert all(r["correct"] is None for r in record["rows"])  # compiled, not run: never "yes"
    smem = [r["resources"] for r in record["rows"]]
    assert "512 B shared memory" in smem[0] and "8192 B shared memory" in smem[2]
    assert "not run" in tools.format_tune(record)


def test_grading_a_notebook_without_a_tagged_cell_is_a_verdict_not_a_traceback(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("print(1)")]
    path = tmp_path / "untagged.ipynb"
    nbformat.write(nb, str(path))
    result = run("grade", "softmax", "--file", str(path))
    assert result.exit_code == 1 and "no code cell tagged `kcourse`" in result.output
