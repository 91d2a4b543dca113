"""Honest records (issue 41, items 5, 7 and 8): what a machine could not do is never shown as done.

A pass whose speed was not checked (a CPU's grade) is "numerics passed, speed not checked" in `kcourse progress`,
the reports and the portfolio; a CPU's `tune` times nothing and says so, a CPU's `profile` does not show the
learner's kernel and says so, and neither meets a plan's requirement; a grade's phases add up to its total;
the batch progress line counts a running grade once; grade-batch grades only the exercises submitted unless
--all; env-check's training run is short; the day-4 notebook holds no absolute path and its grade names it;
one rule picks an exercise's version and the grade's header names it. Records are built here, not graded."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import nbformat
import pytest
from click.testing import CliRunner

from grader.cli import main
from grader.commands import batch, envcheck, tools
from grader.commands.batch_progress import Progress
from grader.core import store
from grader.core.discovery import ResolveError, resolve
from grader.core.paths import course_root
from grader.core.records import Check, GradeResult, Timing
from grader.reports import console, portfolio, progress, reporting
from grader.toolchain.notebook import extract_submission, write_notebook

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the kit depends on tomli there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
H100 = {"name": "NVIDIA H100 80GB HBM3"}


def grade(exercise="softmax", lang="triton", speed="no_gpu", source="learner", file="exercises/softmax/softmax.py"):
    """A passed grade: speed timed and passed on a GPU (speed=None), or skipped for the code given."""
    result = GradeResult(exercise=exercise, lang=lang, source=source, seed=1, file=file)
    result.add(Check("numerics", "passed", "13 case(s) matched"))
    if speed is None:
        result.device = dict(H100)
        result.add(Check("speed", "passed", "1.1× the solution's", {"code": "ok"}))
        result.timings.append(Timing(case="M=4096 N=4096", learner_ms=0.05, solution_ms=0.055, ratio=1.1, unit="GB/s"))
    else:
        result.device = {"name": "CPU (Triton interpreter)"}
        result.add(
            Check(
                "speed",
                "skipped",
                "no GPU found: timing skipped; numerics ran under the Triton interpreter",
                {"code": speed},
            )
        )
    return result.finish()


def append(result: GradeResult) -> dict:
    record = result.to_dict()
    store.append(record)
    return record


def progress_line(key: str, plan: str = "triton-5-day") -> str:
    result = CliRunner().invoke(main, ["progress", "--plan", plan])
    assert result.exit_code == 0, result.output
    return next(line for line in result.output.splitlines() if f"  {key} " in line)


# --- a pass whose speed was skipped -------------------------------------------------------------------------


def test_a_cpu_pass_is_numerics_passed_speed_not_checked_never_done():
    cpu = grade()
    assert cpu.status == "passed"  # the grade's own verdict is unchanged: what ran passed
    assert progress.honest_status(cpu) == progress.SPEED_NOT_CHECKED
    assert progress.honest_status_text(cpu.to_dict()) == "numerics passed, speed not checked (no GPU)"
    assert progress.honest_status_text(grade(speed="quick")) == "numerics passed, speed not checked (--quick)"
    assert progress.honest_status(grade(speed="no_timed_sizes")) == "passed"  # nothing to time: a whole pass
    assert progress.honest_status(grade(speed=None)) == "passed"
    append(cpu)
    line = progress_line("day4")
    assert line.startswith("[~]") and "softmax (triton): numerics passed, speed not checked (no GPU)" in line
    output = CliRunner().invoke(main, ["progress", "--plan", "triton-5-day"]).output
    assert "1 exercise(s) passed numerics, speed not checked (softmax (triton)): grade them on a GPU" in output


def test_a_gpu_pass_stays_the_best_grade_after_a_later_cpu_pass():
    append(grade(speed=None))
    append(grade(source="/home/me/try.py", file="/home/me/try.py"))
    best = progress.best_grades()["softmax:triton"]
    assert best["device"] == H100
    assert progress.grade_statuses()["softmax:triton"] == (
        "passed (latest: numerics passed, speed not checked (no GPU), try.py)"
    )


def test_reports_and_the_portfolio_do_not_count_a_cpu_pass_as_passed(isolated_state):
    append(grade())
    append(grade("vector_add", speed=None, file="exercises/vector_add/vector_add.py"))
    final = reporting.render("final").read_text()
    assert "| softmax | triton | numerics passed, speed not checked (no GPU) |" in final
    assert "| vector_add | triton | passed |" in final
    text = portfolio.render().read_text()
    assert "- 1 exercise version passed (1 triton)." in text
    assert "- 1 more passed numerics, speed not checked (softmax (triton)): not passed until graded on a GPU." in text
    assert "- softmax (triton): numerics passed, speed not checked (no GPU) — " in text  # under "not passed yet"
    assert "| softmax (triton) | not timed |" not in text  # not in the table of passed kernels


# --- tune and profile say what this machine could not do ------------------------------------------------------

CPU_TUNE = {
    "kind": "tune",
    "exercise": "softmax",
    "lang": "triton",
    "device": "CPU",
    "case": "M=4096 N=4096",
    "unit": "GB/s",
    "best": None,
    "speedup": None,
    "rows": [
        {"config": f"num_warps={w}", "ms": None, "rate": None, "roofline_pct": None, "correct": True, "error": ""}
        for w in (1, 2, 4, 8)
    ],
}
GPU_TUNE = {
    **CPU_TUNE,
    "device": H100["name"],
    "best": {"config": "num_warps=4", "ms": 0.05},
    "speedup": 1.4,
    "rows": [{**row, "ms": 0.05 + 0.01 * i} for i, row in enumerate(CPU_TUNE["rows"])],
}
CPU_PROFILE = {
    "kind": "profile",
    "exercise": "softmax",
    "lang": "triton",
    "device": "CPU",
    "case": "M=130 N=2000",
    "calls": 5,
    "trace": "t.json",
    "ncu": [],
    "top": [
        {"name": "aten::set_", "calls": 10, "device_us": 0.0, "cpu_us": 90.0},
        {"name": "aten::copy_", "calls": 10, "device_us": 0.0, "cpu_us": 40.0},
    ],
}
GPU_PROFILE = {
    **CPU_PROFILE,
    "device": H100["name"],
    "top": [
        {"name": "softmax_kernel", "calls": 5, "device_us": 250.0, "cpu_us": 0.0},
        {"name": "Memcpy HtoD (Pageable -> Device)", "calls": 1, "device_us": 80.0, "cpu_us": 0.0},
        {"name": "aten::empty", "calls": 5, "device_us": 0.0, "cpu_us": 12.0},
    ],
}


def test_a_cpu_tune_says_it_timed_nothing_and_does_not_finish_day5(isolated_state):
    text = tools.format_tune({**CPU_TUNE, "timed": False})
    assert "timed at" not in text.splitlines()[0]
    assert text.startswith("softmax (triton) on CPU: NOTHING TIMED — no GPU here, so each configuration was checked")
    assert "does not count as the plan's tuning" in text and "configuration at M=4096 N=4096" in text
    assert tools.format_tune(GPU_TUNE).startswith(f"softmax (triton) on {H100['name']}, timed at M=4096 N=4096")
    store.append(CPU_TUNE)
    line = progress_line("day5")
    assert line.startswith("[~]") and "tuning (any exercise): recorded, but nothing was timed" in line
    day5 = reporting.render("day5").read_text()
    assert "### softmax (triton) on CPU: not timed" in day5 and "does not count for the day" in day5
    store.append(GPU_TUNE)
    assert "tuning (any exercise): recorded" in progress_line("day5") and "nothing was timed" not in progress_line(
        "day5"
    )


def test_a_profile_without_the_learners_kernel_says_so_and_does_not_finish_day4(isolated_state):
    assert progress.profile_kernels(CPU_PROFILE) == [] and not progress.profile_shows_kernel(CPU_PROFILE)
    assert progress.profile_kernels(GPU_PROFILE) == ["softmax_kernel"] and progress.profile_shows_kernel(GPU_PROFILE)
    assert progress.profile_shows_kernel({"kind": "profile", "exercise": "x"})  # an older kit's: nothing to judge
    assert "your kernel is NOT in this profile (no GPU here" in tools.format_profile(CPU_PROFILE)
    assert "NOT in this profile" not in tools.format_profile({**GPU_PROFILE, "learner_kernels": ["softmax_kernel"]})
    store.append({**CPU_PROFILE, "learner_kernels": []})
    assert "profile (any exercise): recorded, but it does not show your kernel" in progress_line("day4")
    assert "**Your kernel is not in this profile**" in reporting.render("day4").read_text()
    store.append({**GPU_PROFILE, "learner_kernels": ["softmax_kernel"]})
    assert "profile (any exercise): recorded" in progress_line("day4") and "does not show" not in progress_line("day4")
    assert "Your kernel in this profile: softmax_kernel." in reporting.render("day4").read_text()


def test_profiling_a_cuda_exercise_without_a_gpu_says_there_is_nothing_to_run(monkeypatch, tmp_path):
    monkeypatch.setattr(tools, "cuda_available", lambda: False)
    with pytest.raises(tools.ToolError, match="no GPU here: reduction \\(cuda\\) is CUDA code"):
        tools.run_profile(resolve(("reduction",), lang="cuda"), tmp_path)


# --- phases that add up, progress lines that count once ------------------------------------------------------


def test_phases_add_up_to_the_total_and_the_childs_start_is_shown_alongside():
    result = GradeResult(exercise="softmax", lang="triton", source="learner", seed=1, duration_s=0.46)
    result.phases = {"python": 0.1, "imports": 2.26, "start": 2.35, "load": 0.05, "numerics": 0.3, "record": 0.01}
    line = console.format_phases(result, total_s=2.86)
    serial = line.split(" = total")[0].removeprefix("phases: ").split(" + ")
    seconds = [float(part.split()[1]) for part in serial]
    assert "start" not in line.split(" = total")[0] and serial[-1].startswith("other 0.14 s")
    assert abs(sum(seconds) - 2.86) < 0.01 and "total 2.86 s (the command's wall time)" in line
    assert "alongside them: start 2.35 s" in line and "not added to the total" in line
    watched = GradeResult(exercise="softmax", lang="triton", source="learner", seed=1, duration_s=2.99)
    watched.phases = {"start": 5.44, "load": 0.1, "numerics": 2.5}
    line = console.format_phases(watched, warm=True)
    assert "total 2.99 s (this grade's wall time)" in line and "other 0.39 s" in line
    assert "launched 5.44 s before this grade used it" in line
    watched.phases["timing"] = 1.0  # more than the total: said, not hidden
    assert "the phases overlap by 0.61 s" in console.format_phases(watched, warm=True)


def test_a_running_grade_is_not_also_remaining():
    progress_ = Progress(stream=io.StringIO(), interval_s=0, clock=lambda: 0.0)
    progress_.begin(2, already=0)
    progress_.started("ada vector_add:triton")
    assert progress_.line().startswith("graded 0/2 (0 failed), 1 running, 1 waiting;")


# --- grade-batch: the exercises submitted, unless --all ------------------------------------------------------


class FakeRunner:
    def __init__(self, workers=None):
        pass

    def describe(self):
        return "a fake runner"

    def run(self, work, seed, timeout_s, progress_):
        for job, target in work:
            result = GradeResult(exercise=target.spec.id, lang=target.variant.lang, source=str(job.path), seed=1)
            result.add(Check("numerics", "passed", "ok"))
            yield job, batch.result_row(job.learner, target, result.finish(), "ok")


def test_grade_batch_grades_only_the_exercises_submitted_unless_all(tmp_path, monkeypatch):
    monkeypatch.setattr(batch, "LocalRunner", FakeRunner)
    subs = tmp_path / "subs"
    for learner in ("ada", "bo", "cy"):
        (subs / learner).mkdir(parents=True)
    (subs / "ada" / "vector_add.py").write_text("# ada's\n")
    (subs / "bo" / "vector_add.py").write_text("# bo's\n")
    args = ["grade-batch", str(subs), "--allow-unisolated", "--out"]
    result = CliRunner().invoke(main, args + [str(tmp_path / "book")])
    assert result.exit_code == 0, result.output
    rows = json.loads((tmp_path / "book" / "gradebook.json").read_text())
    assert sorted((r["learner"], r["exercise"], r["lang"], r["status"]) for r in rows) == [
        ("ada", "vector_add", "triton", "passed"),
        ("bo", "vector_add", "triton", "passed"),
        ("cy", "vector_add", "triton", "missing"),
    ]
    assert "grading the 1 exercise(s) the submissions hold (vector_add:triton)" in result.output
    every = CliRunner().invoke(main, args + [str(tmp_path / "all"), "--all"])
    assert every.exit_code == 0, every.output
    assert len(json.loads((tmp_path / "all" / "gradebook.json").read_text())) > 3 * 20  # every exercise, `missing`
    empty = tmp_path / "empty"
    (empty / "di").mkdir(parents=True)
    nothing = CliRunner().invoke(main, ["grade-batch", str(empty), "--allow-unisolated", "--out", str(tmp_path / "x")])
    assert nothing.exit_code == 2 and "holds a file of the" in nothing.output and "--all" in nothing.output


# --- the quick start: env-check, the notebook, the language rule ----------------------------------------------


def test_env_checks_training_run_is_short_and_the_day1_report_reads_it(isolated_state):
    assert envcheck.BUDGET_S <= 2 and envcheck.WARMUP_STEPS <= 2  # the CPU stops once its budget is spent
    started = time.perf_counter()
    training = envcheck.training_comparison(gpu=False, budget_s=0.001)  # spent after the first step, however fast
    assert time.perf_counter() - started < 10  # loose: a loaded 2-core machine; the budget line below is the proof
    run = training["runs"][0]
    assert run["device"] == "cpu" and run["steps"] >= 1 and run["per_epoch_s"] > 0 and training["speedup"] is None
    assert training["epochs"] < envcheck.EPOCHS and "stopped at its 0.001-s budget" in training["description"]
    store.append(
        {
            "kind": "env",
            "python": "3.11",
            "platform": "Linux",
            "torch": "2.9",
            "triton": "3.5",
            "ready": True,
            "triton_interpreter": True,
            "gpu": None,
            "can_do": [],
            "training": training,
        }
    )
    text = reporting.render("day1").read_text()
    assert f"| time for {training['epochs']} epochs |" in text and "| cpu |" in text
    assert "No GPU here: only the CPU was timed." in text


def test_the_notebook_has_no_absolute_path_and_its_grade_names_it(tmp_path):
    path = write_notebook(resolve(("softmax",)), tmp_path / "my_op.ipynb")
    text = path.read_text()
    assert str(course_root()) not in text and str(tmp_path) not in text
    assert "pathlib.Path('exercises', 'softmax', 'reference.py')" in text
    assert "--file my_op.ipynb" in text  # the grade command names the file written
    nb = nbformat.read(str(path), as_version=4)
    extracted = extract_submission(path, resolve(("softmax",)))
    assert extracted.name == "my_op.ipynb.py"  # so the grade's load line says `my_op.ipynb.py: ... loaded`
    assert "# --- my_op.ipynb, cell 3 ---" in extracted.read_text() and len(nb.cells) == 6


def test_generated_files_are_ignored_and_the_notebook_extra_installs_jupyter():
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert "/replace_op.ipynb" in ignored and "replace_op_trace.json" in ignored and ".ipynb_checkpoints/" in ignored
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(req.startswith("jupyter") for req in extras["notebook"])
    assert any(req.startswith("notebook") for req in extras["notebook"])
    assert "pip install -e '.[notebook]'" in (ROOT / "README.md").read_text()


def test_one_rule_picks_the_version_and_the_header_names_it():
    softmax = resolve(("softmax",))
    assert (
        softmax.variant.lang == "triton"
        and "default_lang" in softmax.lang_choice
        and "--lang cuda" in softmax.lang_choice
    )
    assert resolve(("softmax",), lang="cuda").lang_choice == ""  # --lang: nothing to explain
    assert resolve(("vector_add",), lang="triton").lang_choice == ""
    with pytest.raises(ResolveError, match="add --lang cuda\\|triton .*names no default_lang"):
        resolve(("vector_add",))
    week = resolve(("week4", "vector_add"))  # the plan's week lists one version
    assert week.lang_choice.startswith("the version week4 lists")
    result = grade()
    result.lang_choice = softmax.lang_choice
    assert (
        console.format_grade(result)
        .splitlines()[0]
        .startswith("softmax (triton; picked by its spec's default_lang; --lang cuda for the other) — source: learner")
    )
    usage = CliRunner().invoke(main, ["grade", "vector_add"])
    assert usage.exit_code == 2 and "default_lang" in usage.output
