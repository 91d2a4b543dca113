"""kcourse watch: a grade per save, recorded once, and compute-sanitizer's verdict after the rest
(it runs once timing is done, so the learner reads the numerics and speed verdict without waiting)."""

from __future__ import annotations

import shutil
import threading
import time

import pytest
import torch
from conftest import HAS_GPU, ROOT

from grader.checks.inputs import generate
from grader.commands.watch import watch
from grader.core import store
from grader.core.discovery import resolve
from grader.core.job import Job
from grader.core.records import FAILED, PASSED, SKIPPED, Check, GradeResult
from grader.run.grade import PENDING, settle_sanitizer


class FakeSanitizer:
    """Stands in for sanitize.Sanitizer: finishes after `polls` polls with `verdict`."""

    def __init__(self, verdict: Check, polls: int = 2):
        self.verdict, self.polls, self.stopped = verdict, polls, False

    def finished(self) -> bool:
        self.polls -= 1
        return self.polls < 0

    def stop(self) -> None:
        self.stopped = True

    def collect(self) -> Check:
        return self.verdict


def _pending_result(fake) -> GradeResult:
    result = GradeResult(exercise="reduction", lang="cuda", source="learner", seed=1)
    result.add(Check("numerics", PASSED, "all cases"))
    result.add(Check("sanitizer", SKIPPED, "still running", {"code": PENDING}))
    result.pending_sanitizer = fake
    return result.finish()


def test_a_race_found_after_the_verdict_turns_the_grade_into_a_failure_with_its_hint():
    spec = resolve(["reduction"]).spec
    race = Check("sanitizer", FAILED, "racecheck: Race reported in kernel `k` at r.cu:13", {"code": "race"})
    result = _pending_result(FakeSanitizer(race))
    assert result.status == PASSED  # what the learner saw first
    assert settle_sanitizer(result, spec, superseded=lambda: False)
    assert result.status == FAILED and "racecheck" in result.verdict
    assert [c.name for c in result.checks] == ["numerics", "sanitizer"]
    assert result.checks[-1].details.get("hint")


def test_a_new_save_stops_the_tools_and_says_so():
    fake = FakeSanitizer(Check("sanitizer", PASSED, "clean"), polls=1000)
    result = _pending_result(fake)
    assert settle_sanitizer(result, resolve(["reduction"]).spec, superseded=lambda: True)
    assert fake.stopped
    assert result.checks[-1].details["code"] == "sanitizer_superseded" and result.status == PASSED


def test_nothing_pending_changes_nothing():
    result = GradeResult(exercise="reduction", lang="cuda", source="learner", seed=1)
    assert not settle_sanitizer(result, resolve(["reduction"]).spec, superseded=lambda: False)


def _watch_two_saves(tmp_path, before_the_save=lambda deadline: None, lang="triton") -> list[GradeResult]:
    """Watch a copy of the vector_add solution (quick grades): its first grade, then `before_the_save(deadline)`,
    then a save and the second grade. The grades, as shown."""
    target = resolve(["vector_add"], lang=lang)
    path = tmp_path / f"vector_add{target.variant.kind_of.suffixes[0]}"
    shutil.copy(ROOT / "solutions" / "vector_add" / path.name, path)
    seen = []
    thread = threading.Thread(
        target=watch, args=(target, "learner", path, seen.append), kwargs={"quick": True, "max_grades": 2}, daemon=True
    )
    thread.start()
    deadline = time.monotonic() + 120
    while not seen and time.monotonic() < deadline:
        time.sleep(0.1)
    before_the_save(deadline)
    with open(path, "a") as f:
        f.write("\n// saved again\n" if path.suffix == ".cu" else "\n# saved again\n")
    thread.join(120)
    return seen


@pytest.mark.slow
@pytest.mark.solutions
def test_watch_grades_each_save_once_and_records_each_grade(tmp_path):
    seen = _watch_two_saves(tmp_path)
    assert [r.status for r in seen] == [PASSED, PASSED], [r.verdict for r in seen]
    assert len([r for r in store.read_all() if r.get("exercise") == "vector_add"]) == 2


@pytest.mark.slow
@pytest.mark.solutions
@pytest.mark.emulator
@pytest.mark.skipif(HAS_GPU, reason="checks the no-GPU path: the CUDA emulator's warm worker")
def test_without_a_gpu_watch_grades_each_save_of_a_cuda_file_on_the_emulator(tmp_path):
    seen = _watch_two_saves(tmp_path, lang="cuda")
    assert [r.status for r in seen] == [PASSED, PASSED], [r.verdict for r in seen]
    assert all("emulat" in r.device.get("name", "") for r in seen), seen[0].device


@pytest.mark.slow
def test_a_torch_operator_worker_pays_the_profilers_start_up_before_its_job(monkeypatch):
    from grader.child import worker
    from grader.run import sandbox

    assert sandbox.prewarm_env("torch_op") == {"KCOURSE_CHILD_PREWARM": "profiler"}
    assert sandbox.prewarm_env("cuda") == {} and sandbox.prewarm_env("triton") == {"KCOURSE_CHILD_PREWARM": "triton"}
    seen = []
    monkeypatch.setenv("KCOURSE_CHILD_PREWARM", "profiler")
    monkeypatch.setattr(worker.integrity, "ops_called", lambda fn, op_library: seen.append(op_library) or (fn(), set()))
    worker.warm_up("cpu")
    assert seen == [True]


@pytest.mark.slow
def test_a_triton_worker_imports_triton_before_its_job():
    import os
    import subprocess
    import sys

    code = "import sys; from grader.child import worker; worker.warm_up('cpu'); print('triton.language' in sys.modules)"
    env = {"KCOURSE_CHILD_PREWARM": "triton", "TRITON_INTERPRET": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env}, timeout=120
    )
    assert done.stdout.strip() == "True", done.stderr[-2000:]


def test_watch_times_only_the_verdicts_size_unless_a_memory_bar_needs_every_size(monkeypatch):
    from types import SimpleNamespace

    from grader.commands import watch as watch_module
    from grader.run.judge import Judge

    calls = []

    def grade(*args, **kw):  # stands in for the grade, which closes the child it is given
        calls.append(kw)
        kw["child"].close()
        return _pending_result(None)

    monkeypatch.setattr(watch_module, "grade", grade)
    monkeypatch.setattr(watch_module, "_settle", lambda *a: None)
    target = resolve(["vector_add"], lang="triton")
    watch(target, "stubs", None, lambda r: None, max_grades=1)  # the stub: a learner's kit has no solutions
    assert calls[0]["timed_sizes"] == "verdict"

    def timed(exercise, lang, sizes):
        spec = resolve([exercise], lang=lang).spec
        return [case.label() for _, case in Judge._timed_cases(SimpleNamespace(spec=spec), Job(timed_sizes=sizes))]

    every = [c.label() for c in target.spec.performance.cases]
    assert len(every) > 1 and timed("vector_add", "triton", "verdict") == every[-1:]  # the speed verdict's size
    assert timed("vector_add", "triton", "all") == every
    flash = resolve(["flash_attention_v2"], lang="triton").spec
    assert flash.performance.max_extra_bytes  # O(N) memory: the long, thin size must be measured too
    assert len(timed("flash_attention_v2", "triton", "verdict")) == len(flash.performance.cases)


class RecordingChild:
    """Stands in for sandbox.Child where only the messages and the work folder matter."""

    def __init__(self, folder):
        self.dir, self.sent, self.visible_devices, self.device = folder, [], None, "cpu"
        self.ready = None  # not started yet, as while nvcc builds

    def send(self, message):
        self.sent.append(message)


def test_large_trials_and_the_timed_sizes_are_drawn_ahead_while_the_build_runs(tmp_path, monkeypatch):
    """Judge.prefetch, called before nvcc builds, draws the large trials' inputs (1 GB at reduction's 2^28)
    and the timed sizes' on a thread of its own: written for the child, the reference computed. Here the
    1,000,003-value case stands in for a large one, and two small sizes for the timed ones."""
    from grader.run import input_feed
    from grader.run.judge import Judge

    monkeypatch.setattr(input_feed, "PREFETCH_BYTES", 2**20)
    target = resolve(["reduction"], lang="cuda")
    judge = Judge(
        target.spec,
        target.variant,
        RecordingChild(tmp_path),
        GradeResult(exercise="reduction", lang="cuda", source="x", seed=5),
        seed=5,
        timeout_s=10,
        timing=True,
        calibration=None,
    )
    small = [c for c in target.spec.cases if not c.gpu_only][2:4]
    judge._timed_cases = lambda job: list(enumerate(small))
    try:
        judge.prefetch(Job(timed_sizes="all"))
        large = [k for k, (_, case, _, _) in enumerate(judge._trials()) if case.params["n"] == 1_000_003]
        assert len(large) == 2 and sorted(judge.feed.drawn, key=str) == sorted(large + ["t0", "t1"], key=str)
        metas, inputs = judge.feed.take("t1", small[1], 0, 0)
        assert metas["x"]["shape"] == [small[1].params["n"]] and "t1" not in judge.feed.drawn
        assert inputs == {}  # written for the child; the judge needs them no more, so they are not held
        assert (tmp_path / "in-t1-x.bin").stat().st_size == 4 * small[1].params["n"]
        drawn = generate(target.spec, small[1], judge._timed_seed(1))["x"]
        assert torch.equal(
            torch.from_file(str(tmp_path / "in-t1-x.bin"), size=drawn.numel(), dtype=torch.float32), drawn
        )
        assert judge.feed.expected("t1")[0].item() == pytest.approx(drawn.double().sum().item())
        metas, _ = judge.feed.take(large[0], None, 0, 0)  # drawn already: case and seed are not needed
        assert (tmp_path / f"in-{large[0]}-x.bin").exists()
    finally:
        judge.close()


def test_what_is_drawn_ahead_stays_within_its_budget(tmp_path, monkeypatch):
    """Past PREFETCH_BUDGET bytes, a large trial is drawn when its turn comes (AHEAD bounds that)."""
    from grader.run import input_feed
    from grader.run.input_feed import input_bytes
    from grader.run.judge import Judge

    target = resolve(["reduction"], lang="cuda")
    big = [c for c in target.spec.cases if not c.gpu_only][3]  # n = 1,000,003: 4 MB a trial, two trials
    monkeypatch.setattr(input_feed, "PREFETCH_BYTES", 2**20)
    monkeypatch.setattr(input_feed, "PREFETCH_BUDGET", input_bytes(target.spec, big) + 1)
    judge = Judge(
        target.spec,
        target.variant,
        RecordingChild(tmp_path),
        GradeResult(exercise="reduction", lang="cuda", source="x", seed=5),
        seed=5,
        timeout_s=10,
        timing=False,
        calibration=None,
    )
    try:
        judge.prefetch(Job())
        assert len(judge.feed.drawn) == 1
    finally:
        judge.close()


def test_watch_does_not_time_pytorch_beside_you_and_a_grade_does():
    """The verdict compares you with the solution (or its calibrated figure): under watch the PyTorch anchor's
    runs are left out, a third of the timing phase with three contestants."""
    from types import SimpleNamespace

    from grader.run.judge import Judge

    spec = resolve(["vector_add"], lang="triton").spec
    judge = SimpleNamespace(
        spec=spec, feed=SimpleNamespace(take=lambda *a: ({}, None)), _timed_seed=lambda index: index
    )
    timed = list(enumerate(spec.performance.cases))
    watched = Judge._timing_messages(judge, Job(timed_sizes="verdict"), timed[-1:])
    graded = Judge._timing_messages(judge, Job(timed_sizes="all"), timed)
    one_shot = Judge._timing_messages(judge, Job(timed_sizes="verdict", torch_anchor=True), timed[-1:])
    assert [m["anchor"] for m in watched] == [False] and all(m["anchor"] for m in graded)
    assert [m["anchor"] for m in one_shot] == [True]  # kcourse grade times PyTorch beside you at the verdict size
    assert graded[-1]["probe"] and not graded[0]["probe"]  # the probe runs at the verdict's size only


@pytest.mark.slow
@pytest.mark.solutions
def test_the_next_grades_inputs_are_drawn_while_the_learner_edits_and_that_grade_uses_them(tmp_path, monkeypatch):
    """After a grade, watch makes the next one's judge (its child and seed chosen): its large inputs and
    their references are drawn before the save, and the grade that follows runs with that judge."""
    from grader.commands import watch as watch_module
    from grader.run import input_feed
    from grader.run.judge import Judge

    monkeypatch.setattr(input_feed, "PREFETCH_BYTES", 0)  # every trial counts as large here
    made, ran = [], []
    real_ahead, real_run = watch_module.judge_ahead, Judge.run
    monkeypatch.setattr(watch_module, "judge_ahead", lambda *a, **k: made.append(real_ahead(*a, **k)) or made[-1])
    monkeypatch.setattr(Judge, "run", lambda self, job: ran.append(self) or real_run(self, job))
    drawn_before_the_save = []

    def look(deadline):  # the second grade's inputs, waiting in its child's folder before the save
        while (len(made) < 2 or not drawn_before_the_save) and time.monotonic() < deadline:
            drawn_before_the_save.extend(made[1].child.dir.glob("in-*.bin") if len(made) > 1 else [])
            time.sleep(0.05)

    seen = _watch_two_saves(tmp_path, look)
    assert [r.status for r in seen] == [PASSED, PASSED], [r.verdict for r in seen]
    assert drawn_before_the_save
    assert ran == made[:2]  # each grade ran with the judge made before its save
    assert made[1].result is seen[1] and made[1].seed == seen[1].seed


@pytest.mark.slow
@pytest.mark.solutions
def test_a_judge_made_ahead_for_another_seed_is_not_used_and_is_closed(tmp_path):
    from grader.commands.watch import _fresh_child
    from grader.run import grade as grade_module

    target = resolve(["vector_add"], lang="triton")
    child = _fresh_child(target)
    ahead = grade_module.judge_ahead(target, child, seed=11, quick=True, timed_sizes="verdict")
    result = grade_module.grade(target, source="solutions", quick=True, child=child, seed=12, record=False, ahead=ahead)
    assert result.status == PASSED, result.verdict
    assert ahead.result is not result and ahead.feed.stop.is_set()  # its draws were for seed 11: closed, not used


@pytest.mark.slow
def test_a_grading_child_keeps_triton_autotuning_results_on_disk(monkeypatch):
    """Every grade is a fresh child: without Triton's on-disk autotuning cache each one re-benchmarks every
    config of every tuning key (most of an FA v2 grade). A learner's own setting is left alone."""
    from grader.run.sandbox import child_env

    monkeypatch.delenv("TRITON_CACHE_AUTOTUNING", raising=False)
    assert child_env("cuda")["TRITON_CACHE_AUTOTUNING"] == "1"
    monkeypatch.setenv("TRITON_CACHE_AUTOTUNING", "0")
    assert child_env("cuda")["TRITON_CACHE_AUTOTUNING"] == "0"


def test_the_watch_command_shows_each_verdict_then_the_sanitizers_and_stops_on_ctrl_c(monkeypatch):
    """The command's own wiring: each grade printed with its phases and the line that it is watching, the
    sanitizer's verdict printed when it comes, and Ctrl-C a plain goodbye, not a traceback."""
    from click.testing import CliRunner

    from grader.cli import main
    from grader.commands import watch as watch_module

    def fake_watch(target, source, submission, show, quick, sanitize_code, show_later):
        assert (target.spec.id, quick, sanitize_code) == ("softmax", True, True)
        result = GradeResult(exercise="softmax", lang="triton", source="learner", seed=1)
        result.add(Check("numerics", PASSED, "every case within tolerance"))
        show(result.finish())
        result.add(Check("sanitizer", FAILED, "racecheck: Race reported in kernel `k`", {"code": "race"}))
        result.verdict = ""  # as settle_sanitizer leaves it: the verdict taken again with the sanitizer's check
        show_later(result.finish())
        raise KeyboardInterrupt

    monkeypatch.setattr(watch_module, "watch", fake_watch)
    out = CliRunner().invoke(main, ["watch", "softmax", "--quick"])
    assert out.exit_code == 0, out.output
    lines = out.output
    assert "every case within tolerance" in lines and "watching for changes (Ctrl-C to stop)" in lines
    assert lines.index("watching for changes") < lines.index("racecheck: Race reported")
    assert "=> FAILED: racecheck: Race reported" in lines  # the verdict printed again, now a failure
    assert lines.rstrip().endswith("stopped watching")
