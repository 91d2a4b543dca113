"""The judge's timing phase (grader/run/judge.py), on a fake child (fake_child.FakeChild) that claims figures and
answers the probe: the speed verdict it gives, and the claims it does not believe."""

from __future__ import annotations

import pytest

from grader.core import gpushare, hostload
from grader.core.job import Job
from grader.core.records import ERROR, FAILED, PASSED, SKIPPED, GradeResult
from grader.reports.console import format_timing
from grader.run.judge import Judge

from .fake_child import grade, last, verdicts


def test_timed_figures_the_judges_clock_agrees_with_give_the_speed_verdict(toy, toy_child):
    child = toy_child(measured={"learner": {"median_ms": 1.0, "runs": 10}, "solution": {"median_ms": 0.8, "runs": 10}})
    result = grade(toy, child, timing=True)
    speed = last(result)
    assert (speed.name, speed.status, speed.details["code"], speed.details["bar"]) == (
        "speed",
        PASSED,
        "ok",
        "live solution",
    )
    assert speed.details["ratio"] == pytest.approx(0.8)
    assert [t.case for t in result.timings] == ["n=64"]
    assert child.sent[-1] == {"probe_again": False}


def test_the_wait_for_the_timed_sizes_inputs_is_a_phase_of_its_own_before_the_timing(toy, toy_child):
    from grader.run.judge import Judge

    child = toy_child()
    judge = Judge(
        toy,
        toy.variant(None),
        child,
        GradeResult(exercise=toy.id, lang="triton", source="learner", seed=1),
        1,
        60.0,
        True,
        None,
    )
    judge.run(Job(learner="/x/toy.py"))
    phases = list(judge.phases)
    assert phases.index("numerics") < phases.index("timed_inputs") == phases.index("timing") - 1
    assert 0 <= judge.phases["timed_inputs"] < 5 and judge.phases["timing"] >= 0


def test_what_the_gpu_process_spent_on_the_timed_inputs_is_shown_beside_the_phases(toy, toy_child, monkeypatch):
    """An exercise whose references are the GPU process's (run/heavy.py): its seconds drawing inputs and computing
    references, and the grader's writing those inputs, go in the phases, shown alongside: not added to the total."""
    from grader.reports.console import format_phases
    from grader.run.input_feed import InputFeed
    from grader.run.judge import Judge

    spent = {"gpu_inputs": 3.5, "gpu_references": 2.25, "input_files": 1.0}
    monkeypatch.setattr(InputFeed, "gpu_seconds", lambda self: spent)
    result = GradeResult(exercise=toy.id, lang="triton", source="learner", seed=1)
    judge = Judge(toy, toy.variant(None), toy_child(), result, 1, 60.0, True, None)
    judge.run(Job(learner="/x/toy.py"))
    assert {name: judge.phases[name] for name in spent} == spent
    result.phases = judge.phases
    line = format_phases(result, total_s=10.0)
    added = line.split(" = total")[0]
    assert not any(name in added for name in spent)
    assert (
        "gpu_inputs 3.50 s (the GPU process drawing inputs), gpu_references 2.25 s" in line.split("alongside them:")[1]
    )
    assert "input_files 1.00 s (writing the GPU process's inputs for the child)" in line


@pytest.mark.parametrize("beside", ["0", "1"], ids=["in_turn", "beside_the_draws"])
def test_a_grade_whose_inputs_and_references_are_the_gpu_process_s_passes_with_what_it_spent(
    toy, toy_child, monkeypatch, beside
):
    """Every case of an exercise whose references are the GPU process's (run/heavy.py, here run in this process on
    the CPU): the child reads the inputs that process wrote, the judge compares with the references it computed of
    them, and the grade's phases say what it spent."""
    from concurrent.futures import Future

    from grader.checks.checking import narrowed, reference_outputs
    from grader.checks.inputs import generate
    from grader.run import heavy

    class InProcess:
        def submit(self, function, *args):
            future = Future()
            future.set_result(function(*args))
            return future

        def shutdown(self, **_):
            pass

    monkeypatch.setenv(heavy.BESIDE_ENV, beside)
    monkeypatch.setattr(heavy, "wanted", lambda spec: True)
    monkeypatch.setattr(heavy, "worth_it", lambda spec, variant, case: True)
    monkeypatch.setattr(heavy, "_start", lambda *_: (InProcess(), None))
    monkeypatch.setattr(heavy, "_generate", lambda spec, case, seed, trial: generate(spec, case, seed, trial))
    on_cpu = lambda reference, spec, inputs, params, narrow: narrowed(  # noqa: E731
        list(reference_outputs(reference, spec, inputs, params)), narrow
    )
    monkeypatch.setattr(heavy, "_on_the_gpu", on_cpu)
    child = toy_child(measured={"learner": {"median_ms": 1.0, "runs": 10}, "solution": {"median_ms": 1.0, "runs": 10}})
    result = GradeResult(exercise=toy.id, lang="triton", source="learner", seed=1)
    judge = Judge(toy, toy.variant(None), child, result, 1, 60.0, True, None)
    judge.run(Job(learner="/x/toy.py"))
    assert [(c.name, c.status) for c in result.checks][:3] == [
        ("load", PASSED),
        ("numerics", PASSED),
        ("integrity", PASSED),
    ]
    assert last(result).name == "speed" and last(result).status == PASSED, last(result).message
    assert {"gpu_inputs", "input_files", "gpu_references"} <= set(judge.phases) and not heavy._drawn


def test_a_failing_grade_still_has_the_phases_it_spent_its_time_in(toy, toy_child):
    from grader.run.judge import Judge

    def wrong(inputs, params, k):
        return {"c": inputs["a"] - inputs["b"]}

    result = GradeResult(exercise=toy.id, lang="triton", source="learner", seed=1)
    judge = Judge(toy, toy.variant(None), toy_child(kernel=wrong), result, 1, 60.0, True, None)
    judge.run(Job(learner="/x/toy.py"))
    assert result.checks[-1].details["code"] == "mismatch"
    assert list(judge.phases) == ["start", "load", "numerics"]  # the numerics that failed, timed all the same


def test_a_kernel_slower_than_the_bar_fails_speed(toy, toy_child):
    child = toy_child(measured={"learner": {"median_ms": 1.0, "runs": 10}, "solution": {"median_ms": 0.5, "runs": 10}})
    speed = last(grade(toy, child, timing=True))
    assert (speed.status, speed.details["code"], speed.details["ratio"]) == (FAILED, "slow", 0.5)


def test_without_a_solution_or_calibration_speed_is_skipped(toy, toy_child):
    child = toy_child(measured={"learner": {"median_ms": 1.0, "runs": 10}})
    assert verdicts(grade(toy, child, timing=True))[-1] == ("speed", SKIPPED, "no_solution")


def test_timing_without_the_learners_figures_is_forged(toy, toy_child):
    child = toy_child(measured={"solution": {"median_ms": 1.0, "runs": 10}})
    check = last(grade(toy, child, timing=True))
    assert (check.name, check.details["code"]) == ("integrity", "timing_forged")


def test_claimed_runs_longer_than_the_timed_phase_are_forged(toy, toy_child):
    child = toy_child(measured={"learner": {"median_ms": 100.0, "runs": 10}})  # 1 s claimed in a moment
    check = last(grade(toy, child, timing=True))
    assert check.details["code"] == "timing_forged" and "add up to 1.00 s" in check.message


def test_a_wrong_output_of_the_timed_run_fails_numerics(toy, toy_child):
    def wrong_when_timed(inputs, params, k):
        return {"c": inputs["a"] + inputs["b"] + (1.0 if str(k).startswith("t") else 0.0)}

    check = last(grade(toy, toy_child(kernel=wrong_when_timed), timing=True))
    assert (check.name, check.details["code"]) == ("numerics", "mismatch")
    assert check.message.endswith("(the output of your last timed run)")


def test_a_claim_the_probe_disagrees_with_twice_is_forged(toy, toy_child, monkeypatch):
    monkeypatch.setattr(gpushare, "other_gpu_processes", lambda *devices: [])  # on a GPU host, none shares it
    monkeypatch.setattr(hostload, "main_thread_times", lambda pid: (0.0, 0.0))  # and no wait for a CPU
    child = toy_child(measured={"learner": {"median_ms": 0.001, "runs": 10}})
    child.burst_s = {"learner": 0.02}  # 20 ms a burst of one run, against 1 µs claimed
    check = last(grade(toy, child, timing=True))
    assert (check.name, check.details["code"]) == ("integrity", "timing_forged")
    assert "the grader's own clock measured" in check.message
    assert {"probe_again": True} in child.sent  # probed twice before it counted


def test_watch_times_only_the_verdict_size(spec_of, toy_child):
    spec = spec_of(after="[[performance.cases]]\nn = 128\n")
    child = toy_child(spec)
    result = grade(spec, child, timing=True, timed_sizes="verdict")
    timed = next(m["time"] for m in child.sent if "time" in m)
    assert [m["case"] for m in timed] == [1] and [t.case for t in result.timings] == ["n=128"]
    assert timed[0]["anchor"] is False  # torch is not timed beside you in watch


def _memory_bar_spec(spec_of):
    """The toy with an O(1) memory bar (64 bytes of scratch) and a second, larger timed size: the verdict's."""
    return spec_of(performance='max_extra_bytes = "64"\n', after="[[performance.cases]]\nn = 128\n")


def test_a_memory_bar_runs_every_size_in_watch_but_times_only_the_verdicts(spec_of, toy_child):
    spec = _memory_bar_spec(spec_of)
    child = toy_child(spec)
    child.peak_bytes = {"learner": 32}
    result = grade(spec, child, timing=True, timed_sizes="verdict")
    timed = next(m["time"] for m in child.sent if "time" in m)
    assert [(m["case"], m["memory_only"]) for m in timed] == [(0, True), (1, False)]
    first, verdict = result.timings
    assert (first.case, first.learner_ms, first.solution_ms, first.extra_bytes_limit) == ("n=64", None, None, 64.0)
    assert first.learner_extra_bytes == 32.0
    assert verdict.learner_ms == 1.0 and verdict.solution_ms == 1.0
    assert [(c.name, c.status) for c in result.checks][-2:] == [("speed", PASSED), ("memory", PASSED)]
    assert (
        format_timing(first) == "n=64 (memory only, not timed: `--full` times it), extra memory: you 32 B (limit 64 B)"
    )


def test_memory_over_the_bar_at_a_size_that_is_not_timed_fails(spec_of, toy_child):
    spec = _memory_bar_spec(spec_of)
    child = toy_child(spec)
    child.peak_bytes = {"learner": 4096}
    check = last(grade(spec, child, timing=True, timed_sizes="verdict"))
    assert (check.name, check.status, check.details["code"]) == ("memory", FAILED, "too_much_memory")
    assert "at n=64" in check.message


def test_a_wrong_output_at_a_size_run_for_memory_alone_fails_numerics(spec_of, toy_child):
    def wrong_when_timed(inputs, params, k):
        return {"c": inputs["a"] + inputs["b"] + (1.0 if str(k).startswith("t") else 0.0)}

    spec = _memory_bar_spec(spec_of)
    check = last(grade(spec, toy_child(spec, kernel=wrong_when_timed), timing=True, timed_sizes="verdict"))
    assert (check.name, check.details["code"]) == ("numerics", "mismatch")
    assert "n=64" in check.message and check.message.endswith("(the output of your run at this size)")


def test_every_size_is_timed_when_all_are_asked_for(spec_of, toy_child):
    spec = _memory_bar_spec(spec_of)
    child = toy_child(spec)
    result = grade(spec, child, timing=True)
    timed = next(m["time"] for m in child.sent if "time" in m)
    assert [m["memory_only"] for m in timed] == [False, False]
    assert all(t.learner_ms == 1.0 for t in result.timings)


def test_a_claim_of_zero_milliseconds_is_a_forged_timing_not_a_grader_error(toy, toy_child):
    child = toy_child(measured={"learner": {"median_ms": 0.0, "runs": 10}, "solution": {"median_ms": 1.0, "runs": 10}})
    assert verdicts(grade(toy, child, timing=True))[-1] == ("integrity", FAILED, "timing_forged")


def test_a_disagreement_while_another_program_shares_the_gpu_is_not_judged(toy, toy_child, monkeypatch):
    monkeypatch.setattr(gpushare, "other_gpu_processes", lambda *devices: ["4242 python"])
    child = toy_child(measured={"learner": {"median_ms": 0.001, "runs": 10}})
    child.burst_s = {"learner": 0.02}
    check = last(grade(toy, child, timing=True))
    assert (check.name, check.status, check.details["code"]) == ("speed", ERROR, "gpu_shared")
    assert "another program used this GPU while your kernel was timed (4242 python)" in check.message


def test_a_disagreement_while_the_host_starved_the_learners_process_is_not_judged(toy, toy_child, monkeypatch):
    monkeypatch.setattr(gpushare, "other_gpu_processes", lambda *devices: [])
    readings = iter(range(1000))
    # each reading of the child's schedstat 15 ms more waiting for a CPU: most of every 20-ms burst
    monkeypatch.setattr(hostload, "main_thread_times", lambda pid: (0.0, 0.015 * next(readings)))
    child = toy_child(measured={"learner": {"median_ms": 0.001, "runs": 10}})
    child.burst_s = {"learner": 0.02}
    check = last(grade(toy, child, timing=True))
    assert (check.name, check.status, check.details["code"]) == ("speed", ERROR, "host_busy")
    assert "not judged: this machine's CPUs were too busy to check your timing" in check.message
    assert (
        "the grader's own clock measured" in check.message
        and "grade again when the machine is quieter" in check.message
    )
    assert {"probe_again": True} in child.sent  # probed twice before it counted


def test_the_child_times_with_the_gpu_lock_held_exclusively_and_checks_numerics_without_it(
    toy, toy_child, tmp_path, monkeypatch
):
    """Where grades share a GPU (KCOURSE_GPU_LOCK: parallel test workers), no other grade's work runs on it while this
    one times (grader/core/gpu_lock.py)."""
    import os

    from grader.core import gpu_lock

    monkeypatch.setenv(gpu_lock.ENV, str(tmp_path / "gpu.lock"))
    held = {}

    def kernel(inputs, params, k):
        held[str(k)[:1]] = os.environ.get(gpu_lock.HELD_ENV) == str(os.getpid())
        return {"c": inputs["a"] + inputs["b"]}

    child = toy_child(kernel=kernel, measured={"learner": {"median_ms": 1.0, "runs": 10}})
    assert last(grade(toy, child, timing=True)).name == "speed"
    assert held == {"t": True, **{k: False for k in held if k != "t"}} and len(held) > 1, held


@pytest.mark.parametrize("first", ["1", "0"], ids=["compile_first", "compile_first_off"])
def test_where_grades_share_the_gpu_the_child_compiles_before_its_trials_and_its_timing_with_the_lock_let_go(
    toy, toy_child, tmp_path, monkeypatch, first
):
    """compile_steps.compile_first: before the first trial (COMPILE_CASES: every case the trials use) and before the
    exclusive hold (a go of its own), the child compiles, launching nothing, answering "compiled"; the grade steps out
    of its shared hold meanwhile (a "stepped_out" line in the lock's log each time). KCOURSE_COMPILE_FIRST=0: none."""
    import json
    import os

    from grader.child import compile_steps
    from grader.core import gpu_lock

    log = tmp_path / "lock.jsonl"
    monkeypatch.setenv(gpu_lock.ENV, str(tmp_path / "gpu.lock"))
    monkeypatch.setenv(gpu_lock.LOG_ENV, str(log))
    monkeypatch.setenv(compile_steps.COMPILE_FIRST_ENV, first)
    runs = []

    def kernel(inputs, params, k):
        if str(k).startswith("t"):
            runs.append(os.environ.get(gpu_lock.HELD_ENV) == str(os.getpid()))
        return {"c": inputs["a"] + inputs["b"]}

    child = toy_child(kernel=kernel, measured={"learner": {"median_ms": 1.0, "runs": 10}}, device="cuda")
    with gpu_lock.shared():  # as grade.py holds it around the judge's run
        assert last(grade(toy, child, timing=True, may_pause=True)).name == "speed"
    time_message = next(m for m in child.sent if "time" in m)
    assert time_message["compile_first"] is (first == "1")
    assert child.compiled_cases == (list(range(len(toy.cases))) if first == "1" else None)
    assert runs == [True]  # the compile passes launch nothing; the timing alone
    modes = [json.loads(line)["mode"] for line in log.read_text().splitlines()]
    assert modes.count("stepped_out") == (2 if first == "1" else 0), modes


def test_a_grade_whose_sanitizer_is_on_the_gpu_compiles_first_without_letting_its_hold_go(
    toy, toy_child, tmp_path, monkeypatch
):
    from grader.core import gpu_lock

    monkeypatch.setenv(gpu_lock.ENV, str(tmp_path / "gpu.lock"))
    monkeypatch.setenv(gpu_lock.LOG_ENV, str(tmp_path / "lock.jsonl"))
    child = toy_child(measured={"learner": {"median_ms": 1.0, "runs": 10}}, device="cuda")
    with gpu_lock.shared():
        assert last(grade(toy, child, timing=True, may_pause=False)).name == "speed"
    assert child.compiled_cases is not None and "stepped_out" not in (tmp_path / "lock.jsonl").read_text()


def test_a_learners_one_grade_on_a_gpu_compiles_first_too(toy, toy_child, monkeypatch):
    """No lock (a learner's grade): the compile passes still come first, every kernel compiled side by side before
    the trials and the timing need them."""
    from grader.core import gpu_lock

    monkeypatch.delenv(gpu_lock.ENV, raising=False)
    child = toy_child(measured={"learner": {"median_ms": 1.0, "runs": 10}}, device="cuda")
    assert last(grade(toy, child, timing=True, may_pause=True)).name == "speed"
    assert child.compiled_cases == list(range(len(toy.cases)))
    assert next(m for m in child.sent if "time" in m)["compile_first"] is True


def test_on_the_cpu_the_child_compiles_nothing_first(toy, toy_child, tmp_path, monkeypatch):
    from grader.core import gpu_lock

    monkeypatch.setenv(gpu_lock.ENV, str(tmp_path / "gpu.lock"))
    child = toy_child(measured={"learner": {"median_ms": 1.0, "runs": 10}})
    assert last(grade(toy, child, timing=True, may_pause=True)).name == "speed"
    assert child.compiled_cases is None and not next(m for m in child.sent if "time" in m)["compile_first"]


def test_a_size_run_for_its_memory_alone_does_not_wait_for_the_gpu_to_itself(spec_of, toy_child, tmp_path, monkeypatch):
    """Only timing needs the GPU alone: a memory bar's other sizes (a peak of the learner's own allocations) run
    beside other grades' numerics, so they do not lengthen the time other grades' timers wait."""
    import os

    from grader.core import gpu_lock

    monkeypatch.setenv(gpu_lock.ENV, str(tmp_path / "gpu.lock"))
    held = {}

    def kernel(inputs, params, k):
        held[str(k)] = os.environ.get(gpu_lock.HELD_ENV) == str(os.getpid())
        return {"c": inputs["a"] + inputs["b"]}

    spec = _memory_bar_spec(spec_of)
    child = toy_child(spec, kernel=kernel)
    child.peak_bytes = {"learner": 32}
    grade(spec, child, timing=True, timed_sizes="verdict")
    assert (held["t0"], held["t1"]) == (False, True), held
