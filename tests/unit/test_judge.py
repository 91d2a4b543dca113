"""The judge's verdicts (grader/run/judge.py) on numerics and integrity, from the evidence a fake child gives
(fake_child.FakeChild): the judge draws the inputs and computes the float64 reference as in a real grade; the fake
hands back outputs and evidence, or crashes, hangs, forges and garbles as a learner's code can make it."""

from __future__ import annotations

import re
import threading
import time
from contextlib import contextmanager

import pytest
import torch

from grader.checks.inputs import generate, make_outputs
from grader.core.job import Job
from grader.core.paths import course_root
from grader.core.records import ERROR, FAILED, PASSED, GradeResult
from grader.run.input_feed import input_bytes
from grader.run.judge import Judge
from grader.run.sandbox import ChildGone, ChildTimeout

from .conftest import TOY_REFERENCE
from .fake_child import GONE, grade, last, verdicts

LOADED = ("load", PASSED, None)


def test_the_fake_sends_only_events_and_fields_the_real_worker_sends():
    """A guard against the fake drifting from grader/child/worker.py, whose events these tests stand in for."""
    worker = (course_root() / "grader" / "child" / "worker.py").read_text()  # read, not imported
    for event in (
        "step",
        "loaded",
        "trial",
        "trials_done",
        "timing_start",
        "timed",
        "probe_start",
        "probe_end",
        "check",
        "done",
    ):
        assert re.search(rf"send\(\s*Event\.{event.upper()}\b", worker), event
    for field in ('"outputs"', '"ops"', '"modified"', '"outside"', "borrowed=", "measured=", "who=who", "runs=runs"):
        assert field in worker, field


# --- numerics and integrity from the trials' evidence ---------------------------------------------


def test_a_right_kernel_passes_load_numerics_and_integrity_and_the_child_is_stopped(toy, toy_child):
    child = toy_child()
    result = grade(toy, child)
    assert verdicts(result) == [LOADED, ("numerics", PASSED, None), ("integrity", PASSED, None)]
    assert result.checks[1].message == "2 case(s), 4 trials matched the float64 reference"
    assert result.checks[1].details == {"cases": 2, "trials": 4, "skipped_cases": 0}
    assert child.sent[-1] == {"stop": True} and child.returncode == -9  # stopped, then ended by the judge


def test_each_trial_gets_inputs_drawn_from_its_own_seed(toy, toy_child):
    child = toy_child()
    grade(toy, child, seed=5)
    for k, (case, trial) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):
        drawn = generate(toy, toy.cases[case], 5 + 1000 * case + trial, trial)
        assert all(torch.equal(child.inputs[k][name], drawn[name]) for name in drawn)


def test_nan_in_the_output_is_a_mismatch_that_counts_them(toy, toy_child):
    def nan_at_3(inputs, params, k):
        out = inputs["a"] + inputs["b"]
        out[3] = float("nan")
        return {"c": out}

    result = grade(toy, toy_child(kernel=nan_at_3))
    check = last(result)
    assert verdicts(result)[-1] == ("numerics", FAILED, "mismatch")
    assert (check.details["nan"], check.details["first_index"], check.details["case"], check.details["trial"]) == (
        1,
        3,
        {"n": 5},
        1,
    )
    assert check.message.startswith("n=5, trial 1: 1 of 5 elements of c wrong: 1 NaN (first at index 3")


def test_a_value_off_in_a_later_trial_fails_that_trial(toy, toy_child):
    def off_in_trial_3(inputs, params, k):
        return {"c": inputs["a"] + inputs["b"] + (1e-3 if k == 3 else 0.0)}

    check = last(grade(toy, toy_child(kernel=off_in_trial_3)))
    assert (check.name, check.status, check.details["code"]) == ("numerics", FAILED, "mismatch")
    assert (check.details["case"], check.details["trial"], check.details["wrong"]) == ({"n": 37}, 2, 37)


def test_outputs_left_poisoned_are_not_written(toy, toy_child):
    def nothing(inputs, params, k):
        return make_outputs(toy, toy.cases[0] if params["n"] == 5 else toy.cases[1], "cpu")

    check = last(grade(toy, toy_child(kernel=nothing)))
    assert (check.name, check.details["code"]) == ("numerics", "not_written")
    assert "no element of c was written" in check.message


def test_a_missing_tail_is_a_partial_write_from_its_first_index(toy, toy_child):
    def no_tail(inputs, params, k):
        out = make_outputs(toy, toy.cases[0], "cpu")["c"] if params["n"] == 5 else None
        if out is None:
            return {"c": inputs["a"] + inputs["b"]}
        out[:4] = (inputs["a"] + inputs["b"])[:4]
        return {"c": out}

    check = last(grade(toy, toy_child(kernel=no_tail)))
    assert (check.details["code"], check.details["unwritten"], check.details["first_index"]) == ("partial_write", 1, 4)


def test_torch_compute_in_the_trial_is_an_integrity_failure_naming_the_ops(toy, toy_child):
    child = toy_child(evidence=lambda k: {"ops": ["aten::add.Tensor", "aten::empty_like"]})
    result = grade(toy, child)
    assert verdicts(result) == [LOADED, ("integrity", FAILED, "torch_compute")]
    assert last(result).details["ops"] == ["aten::add.Tensor"]
    assert "your code called torch's aten::add.Tensor" in last(result).message
    assert child.returncode == -9  # the grade ends: the child is killed


def test_allocation_and_views_are_allowed_ops(toy, toy_child):
    result = grade(toy, toy_child(evidence=lambda k: {"ops": ["aten::empty_like", "aten::view", "prim::something"]}))
    assert verdicts(result) == [LOADED, ("numerics", PASSED, None), ("integrity", PASSED, None)], last(result).details


def test_a_modified_input_is_an_integrity_failure(toy, toy_child):
    check = last(grade(toy, toy_child(evidence=lambda k: {"modified": ["a"]} if k == 1 else {})))
    assert (check.name, check.details["code"]) == ("integrity", "input_modified")
    assert check.message.startswith("n=5, trial 2: your code modified its input a in place")


def test_a_store_past_the_end_is_out_of_bounds_even_with_right_values(toy, toy_child):
    check = last(grade(toy, toy_child(evidence=lambda k: {"outside": ["c"]})))
    assert (check.name, check.details["code"], check.details["outputs"]) == ("numerics", "out_of_bounds", ["c"])
    assert "past the end of c (into the poisoned guard after it)" in check.message


def test_a_store_outside_a_row_slice_is_told_to_step_by_the_row_stride(spec_of, toy_child):
    spec = spec_of(case_5='outputs = { c = { layout = "row_slice" } }')
    check = last(grade(spec, toy_child(spec, evidence=lambda k: {"outside": ["c"]})))
    assert check.details["code"] == "out_of_bounds" and "c is a row slice of a wider matrix here" in check.message


def test_the_previous_trials_answer_is_a_cached_result(toy, toy_child):
    answers: dict[int, torch.Tensor] = {}

    def cached(inputs, params, k):
        return {"c": answers.setdefault(params["n"], inputs["a"] + inputs["b"])}

    check = last(grade(toy, toy_child(kernel=cached)))
    assert (check.name, check.details["code"]) == ("integrity", "cached_result")
    assert "equals the answer for the previous trial's inputs" in check.message


def test_a_solution_file_opened_during_the_trials_fails_after_them(toy, toy_child):
    child = toy_child()
    child.borrowed = ["solutions/toy/toy.py"]
    result = grade(toy, child)
    assert verdicts(result) == [LOADED, ("integrity", FAILED, "solution_loaded")]
    assert "(solutions/toy/toy.py)" in last(result).message


def test_an_output_that_does_not_come_back_is_a_bad_return(toy, toy_child):
    check = last(grade(toy, toy_child(kernel=lambda inputs, params, k: {})))
    assert (check.name, check.details["code"]) == ("numerics", "bad_return")
    assert check.message.startswith("n=5: output c did not come back from your run")


def test_an_output_of_the_wrong_size_is_a_bad_return(toy, toy_child):
    check = last(grade(toy, toy_child(kernel=lambda inputs, params, k: {"c": torch.ones(4)})))
    assert check.details["code"] == "bad_return" and "holds 4 elements, expected 5" in check.message


# --- what the child itself reports ----------------------------------------------------------------


def test_a_failure_the_child_reports_is_the_verdict(toy, toy_child):
    child = toy_child()
    reported = {
        "name": "numerics",
        "status": FAILED,
        "message": "not implemented yet",
        "details": {"code": "not_implemented"},
    }
    child.at_trial[0] = [{"event": "check", "check": reported}]
    result = grade(toy, child)
    assert verdicts(result) == [LOADED, ("numerics", FAILED, "not_implemented")]
    assert last(result).message == "not implemented yet" and child.returncode == -9


@pytest.mark.parametrize(
    "reported",
    [{"name": "numerics", "status": PASSED, "message": "all good"}, {"name": "numerics", "verdict": "passed"}],
    ids=["a passed check", "a malformed check"],
)
def test_a_verdict_other_than_a_failure_from_the_child_is_a_forgery(toy, toy_child, reported):
    child = toy_child()
    child.at_trial[0] = [{"event": "check", "check": reported}]
    assert verdicts(grade(toy, child))[-1] == ("integrity", FAILED, "forged_verdict")


def test_a_load_failure_ends_the_grade_before_any_trial(toy, toy_child):
    child = toy_child()
    child.after_job = [
        {
            "event": "check",
            "check": {"name": "load", "status": FAILED, "message": "no toy()", "details": {"code": "missing_entry"}},
        }
    ]
    result = grade(toy, child)
    assert verdicts(result) == [("load", FAILED, "missing_entry")]
    assert not [m for m in child.sent if "inputs" in m]  # no trial is sent to code that did not load


def test_an_unreadable_message_from_the_child_is_an_integrity_failure(toy, toy_child):
    child = toy_child()
    child.at_trial[0] = [{"event": "garbled", "text": "hello"}]
    check = last(grade(toy, child))
    assert (check.name, check.details["code"]) == ("integrity", "garbled")
    assert "unreadable message ('hello')" in check.message


def test_numerics_pause_for_other_grades_timers_with_the_child_idle_and_its_deadline_moved(toy, toy_child, monkeypatch):
    """Where grades share a GPU (gpu_lock), a batch of timers waiting for this grade's shared hold goes first at a
    pause between trials: only once every trial sent came back, and the pause (longer than the grade's whole limit
    here) is no time of the learner's."""
    from grader.core import gpu_lock

    child, paused = toy_child(), []
    monkeypatch.setattr(gpu_lock, "timers_waiting", lambda: judge.feed.judged >= 1 and not paused)
    pause = lambda: paused.append((len(child.inputs), judge.feed.judged)) or time.sleep(1.5)  # noqa: E731
    monkeypatch.setattr(gpu_lock, "let_timers_go", pause)
    result = GradeResult(exercise=toy.id, lang="triton", source="learner", seed=1)
    judge = Judge(toy, toy.variant(None), child, result, 1, 1.0, False, None)
    judge.may_pause = lambda: True
    judge.run(Job(learner="/x/toy.py"))
    assert verdicts(result) == [LOADED, ("numerics", PASSED, None), ("integrity", PASSED, None)]
    (sent, judged), *more = paused
    assert sent == judged >= 1 and not more  # once, with every trial sent ahead come back: the child idle


def test_a_grade_that_ends_while_its_numerics_wait_to_pause_leaves_no_producer_waiting(toy, toy_child, monkeypatch):
    from grader.core import gpu_lock

    child = toy_child()
    child.at_trial[0] = []  # the first trial hangs: the pause before the next never comes
    asked = []
    monkeypatch.setattr(gpu_lock, "timers_waiting", lambda: asked.append(1) or len(asked) > 1)  # after trial 0 is out
    monkeypatch.setattr(gpu_lock, "let_timers_go", lambda: pytest.fail("paused after the grade ended"))
    result = GradeResult(exercise=toy.id, lang="triton", source="learner", seed=1)
    judge = Judge(toy, toy.variant(None), child, result, 1, 1.0, False, None)
    judge.may_pause = lambda: True
    before = {t.ident for t in threading.enumerate()}
    judge.run(Job(learner="/x/toy.py"))
    assert verdicts(result)[-1] == ("run", FAILED, "timeout")
    assert _soon(lambda: not [t for t in threading.enumerate() if t.ident not in before and t.is_alive()])


def _soon(condition, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    return condition()


def test_numerics_never_pause_where_the_grade_says_they_may_not(toy, toy_child, monkeypatch):
    from grader.core import gpu_lock

    monkeypatch.setattr(gpu_lock, "timers_waiting", lambda: True)
    monkeypatch.setattr(gpu_lock, "let_timers_go", lambda: pytest.fail("paused while the sanitizer ran"))
    assert verdicts(grade(toy, toy_child()))[1] == ("numerics", PASSED, None)  # may_pause: False by default


# --- a child that dies or hangs -------------------------------------------------------------------


def test_a_crash_is_a_run_failure_naming_the_signal_and_the_trial(toy, toy_child):
    child = toy_child()
    child.at_trial[2] = [GONE]
    result = grade(toy, child)
    assert verdicts(result) == [LOADED, ("run", FAILED, "crash")]
    assert last(result).message.startswith("your code crashed with SIGSEGV while checking n=37, trial 1")


def test_a_child_that_says_done_before_loading_ended_unexpectedly(toy, toy_child):
    child = toy_child()
    child.after_job, child.die_with = [{"event": "done"}], 0
    result = grade(toy, child)
    assert verdicts(result) == [("run", FAILED, "crash")]
    assert "ended unexpectedly (exit status 0) while starting" in last(result).message


def test_a_hang_is_a_timeout_at_the_judges_limit(toy, toy_child):
    child = toy_child()
    child.at_trial[1] = []  # the trial never answers
    begun = time.monotonic()
    result = grade(toy, child, timeout_s=1.0)  # long enough for trial 1 on a loaded 2-core machine
    assert verdicts(result) == [LOADED, ("run", FAILED, "timeout")]
    assert last(result).message.startswith("your code ran past the 1 s limit while checking n=5, trial 2")
    assert time.monotonic() - begun < 5


def test_an_emulator_fault_report_longer_than_the_shown_output_still_gives_the_memory_verdict(toy, toy_child):
    """AddressSanitizer's report on the CPU emulator starts with what the access was and then runs on for pages of
    stack frames: the verdict reads it whole, not only the last 4,000 characters a learner is shown."""
    child = toy_child()
    child.at_trial[2], child.die_with = [GONE], 1
    child.printed = (
        "==7==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x6 at pc 0x7 bp 0x8 sp 0x9\n"
        "READ of size 2 at 0x6 thread T0\n    #0 0x1 in rows(float*) /tmp/x/toy.cu:12\n"
        + "    #9 0x2 in fiber_main /k/grader/cuda_cpu/include/kcourse_cuda_cpu.h:262\n"
        * 200
    )
    check = last(grade(toy, child))
    assert (check.name, check.details["code"], check.details["emulator"]) == ("numerics", "cuda_error", "memory_error")
    assert "toy.cu:12" in check.message and "(read of 2 bytes)" in check.message


@pytest.mark.parametrize(
    "fails, said",
    [
        (ChildGone({"message": "internal grader error: OutOfMemoryError: CUDA out of memory"}), "it reported: Out"),
        (ChildTimeout(), "it was not ready within 180 s"),
        (ChildGone(), "it ended before it was ready (exit status -9)"),
    ],
)
def test_a_child_that_never_became_ready_is_the_graders_error_before_any_learner_code(toy, toy_child, fails, said):
    """Twelve workers of the GPU tier on one host once left two children unready: a verdict, never a traceback."""
    child = toy_child()
    child.start_fails, child.returncode = fails, -9
    result = grade(toy, child)
    assert verdicts(result) == [("grader", ERROR, "child_start")]
    assert last(result).message.startswith(f"the grading process could not start, before your code ran: {said}")
    assert child.sent == []  # no job was sent: no learner code ran


def test_a_crash_by_an_unnamed_signal_is_still_a_verdict(toy, toy_child):
    child = toy_child()
    child.at_trial[0], child.die_with = [GONE], -35
    assert verdicts(grade(toy, child))[-1] == ("run", FAILED, "crash")


# --- the grader's own failures ----------------------------------------------------------------------


def test_a_broken_reference_is_the_graders_error_not_the_learners(spec_of, toy_child):
    spec = spec_of(reference="def reference(a, b):\n    raise RuntimeError('reference broke')\n")
    result = grade(spec, toy_child(spec))
    assert verdicts(result) == [LOADED, ("grader", ERROR, None)]
    assert last(result).message.startswith("internal grader error: RuntimeError: reference broke")
    assert "Traceback" in last(result).details["traceback"]


def test_a_full_gpu_in_the_graders_own_work_says_so_and_what_to_do_not_internal_error(spec_of, toy_child):
    """torch's out-of-memory error in this process (a reference on a GPU that other processes filled: a parallel test
    run on an H100 met it) is no grader bug: the verdict names the full GPU and what to do, without a traceback."""
    import torch

    spec = spec_of(
        reference="import torch\ndef reference(a, b):\n    raise torch.OutOfMemoryError('CUDA out of memory. Tried to "
        "allocate 66.00 MiB')\n"
    )
    assert issubclass(torch.OutOfMemoryError, RuntimeError)
    result = grade(spec, toy_child(spec))
    assert verdicts(result) == [LOADED, ("grader", ERROR, "gpu_full")]
    message = last(result).message
    assert message.startswith("not judged: the GPU ran out of memory in the grader's own work")
    assert "`nvidia-smi` lists them" in message and message.endswith("Free the GPU and grade again")
    assert "internal grader error" not in message and "traceback" not in last(result).details


def test_a_failure_drawing_inputs_is_the_graders_error_not_a_hang(spec_of, toy_child):
    """The producer thread fails on the second case's draw: the child is stopped and the grade says whose fault."""
    boom = "def boom(x, *, n):\n    if n == 37:\n        raise KeyError('no')\n    return x\n"
    spec = spec_of(reference=TOY_REFERENCE + boom, input_a='transform = "boom"')
    result = grade(spec, toy_child(spec))
    assert verdicts(result)[-1] == ("grader", ERROR, None)
    assert "KeyError" in last(result).message


# --- what the numerics check says it skipped ----------------------------------------------------------


def test_gpu_only_cases_are_skipped_on_the_cpu_and_said_to_be(spec_of, toy_child):
    spec = spec_of(after="[[cases]]\nn = 1000\ngpu_only = true\n")
    check = grade(spec, toy_child(spec)).checks[1]
    assert check.details == {"cases": 2, "trials": 4, "skipped_cases": 1}, check.details.get("traceback")
    assert check.message.endswith("; 1 GPU-only case(s) skipped (no GPU)")


def test_cases_of_another_versions_dtype_are_said_to_be_for_it(spec_of, toy_child):
    spec = spec_of(
        variant='dtypes = ["float32"]',
        after='[[cases]]\nn = 8\ndtype = "float16"\n[tolerance.float16]\natol = 1e-3\nrtol = 1e-3\n',
    )
    check = grade(spec, toy_child(spec)).checks[1]
    assert check.status == PASSED
    assert check.message.endswith("; 1 float16 case(s) are for the other version(s), this one takes float32")


def test_input_bytes_counts_every_input_at_its_dtype(toy):
    from grader.core.spec import Case

    assert input_bytes(toy, Case({"n": 10})) == 80 and input_bytes(toy, Case({"n": 10, "dtype": "float16"})) == 40


def test_a_check_event_without_its_check_is_an_integrity_failure(toy, toy_child):
    child = toy_child()
    child.at_trial[0] = [{"event": "check"}]
    assert verdicts(grade(toy, child))[-1][:2] == ("integrity", FAILED)


def test_the_gpu_hold_a_grade_gives_is_taken_once_the_code_is_loaded_and_kept_to_the_end(toy, toy_child):
    """A torch operator's child builds it at load (tens of seconds cold, no GPU): the grade hands the judge the GPU
    lock's shared hold (grade._child_and_tools), taken from then on, so that build keeps no timer waiting."""
    result = GradeResult(exercise=toy.id, lang="triton", source="learner", seed=1)
    seen = []

    @contextmanager
    def hold():
        seen.append([c.name for c in result.checks])
        yield
        seen.append([c.name for c in result.checks])

    judge = Judge(toy, toy.variant(None), toy_child(), result, 1, 60.0, False, None)
    judge.gpu_hold = hold
    judge.run(Job(learner="/x/toy.py"))
    assert seen == [["load"], ["load", "numerics", "integrity"]]


@pytest.mark.parametrize("kernel_fails", [False, True])
def test_the_child_is_ended_and_reaped_before_the_gpu_hold_is_let_go(toy, toy_child, kernel_fails):
    """A child's CUDA context torn down stalls other processes' kernels: it goes while the grade holds the GPU, after a
    verdict reached (numerics passed) or a check failed (Finished), not after the hold, where another grade times."""
    result = GradeResult(exercise=toy.id, lang="triton", source="learner", seed=1)
    wrong = {"kernel": lambda inputs, params, k: {"c": inputs["a"] - inputs["b"]}} if kernel_fails else {}
    child = toy_child(**wrong)
    ended_in_the_hold = []

    @contextmanager
    def hold():
        try:
            yield
        finally:  # the hold let go, by the grade's end or by Finished
            ended_in_the_hold.append(child.returncode)

    judge = Judge(toy, toy.variant(None), child, result, 1, 60.0, False, None)
    judge.gpu_hold = hold
    judge.run(Job(learner="/x/toy.py"))
    assert ended_in_the_hold == [-9]
    assert result.checks[1].status == (FAILED if kernel_fails else PASSED)


# --- the child's compile steps, timed --------------------------------------------------------------------------
def test_compile_steps_are_timed_to_the_next_event_and_those_with_the_gpu_held_alone_apart(monkeypatch):
    """A STEP "compiling ..." lasts until the child's next event, whatever it is; another step is not a compile; a
    compile begun while this process holds the GPU lock exclusively (the parallel tests' timing) counts apart too."""
    from grader.core import gpu_lock
    from grader.core.vocabulary import COMPILING
    from grader.run.child_link import CompileClock

    alone = [False]
    monkeypatch.setattr(gpu_lock, "held_alone", lambda: alone[0])
    clock = CompileClock()
    assert clock.phases() == {}
    clock.seen({"event": "step", "text": f"{COMPILING}your Triton kernel k"}, 1.0)
    clock.seen({"event": "step", "text": f"{COMPILING}the solution's Triton kernels"}, 2.5)  # the next compile
    clock.seen({"event": "trial"}, 4.0)
    clock.seen({"event": "step", "text": "checking n=1"}, 5.0)
    alone[0] = True
    clock.seen({"event": "step", "text": f"{COMPILING}your Triton kernel k"}, 6.0)
    clock.seen({"event": "timed"}, 8.0)
    assert clock.phases() == {"compiling": 5.0, "compiling_alone": 2.0}


def test_a_grades_phases_say_how_long_the_child_compiled(toy, toy_child):
    """The judge reads the child's compile steps as they come: the seconds until the next event are the grade's
    `compiling`, shown beside its phases (not added to them)."""
    from grader.core.vocabulary import COMPILING
    from grader.reports.console import format_phases

    child = toy_child()
    child.after_job = [{"event": "step", "text": f"{COMPILING}your Triton kernel toy"}, {"event": "loaded"}]
    answer = child.event

    def slow_to_load(deadline):
        event = answer(deadline)
        if event.get("event") == "loaded":
            time.sleep(0.2)  # the kernel compiling, before the child says it loaded
        return event

    child.event = slow_to_load
    result = GradeResult(exercise=toy.id, lang="triton", source="learner", seed=1)
    judge = Judge(toy, toy.variant(None), child, result, 1, 60.0, False, None)
    judge.run(Job(learner="/x/toy.py"))
    assert verdicts(result)[:2] == [LOADED, ("numerics", PASSED, None)]
    assert 0.2 <= judge.phases["compiling"] < 5 and "compiling_alone" not in judge.phases
    result.phases = judge.phases
    line = format_phases(result, total_s=10.0)
    assert "compiling" not in line.split(" = total")[0] and "compiling " in line.split("alongside them:")[1]
