"""The grading child's timing loop (grader/child/worker.py `time_cases`), on the CPU with the timer faked: a timed
size runs every contestant and reports their figures; a memory-only size (judge.memory_only) runs the learner's
kernel alone, twice (the first compiles), times nothing, and still hands back the output of its last run."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from grader.child import timing, worker
from grader.core.vocabulary import Event


class Events:
    def __init__(self):
        self.sent = []

    def send(self, event, **data):
        self.sent.append((event, data))


def fake_child(spec, tmp_path, monkeypatch):
    """The attributes time_cases reads, the inputs a + b handed to every size, the parent's go always given."""
    child = worker.Worker.__new__(worker.Worker)
    child.spec, child.variant = spec, spec.variant(None)
    child.job = SimpleNamespace(solution=None, work_dir=str(tmp_path))
    child.device = child.tensor_device = "cpu"
    child.pinned, child.events = False, Events()
    child._reference = lambda a, b: a + b
    child.read_message = lambda: {"go": True}
    inputs = {"a": torch.ones(64), "b": torch.full((64,), 2.0)}
    child._tensors = lambda case, message: (inputs, {"c": torch.full((64,), float("nan"))})
    monkeypatch.setattr(
        timing,
        "time_alternating",
        lambda functions, budget_s: {who: (fn(), {"median_ms": 1.0, "runs": 15})[1] for who, fn in functions.items()},
    )
    return child


def adder(calls):
    def learner(tensors, params):
        calls.append(params["n"])
        tensors["c"].copy_(tensors["a"] + tensors["b"])

    return learner


def message(memory_only: bool, anchor: bool = True) -> dict:
    return {"case": 0, "k": "t0", "inputs": {}, "probe": False, "budget_s": 1.0, "anchor": anchor,
            "memory_only": memory_only}  # fmt: skip


def timed_event(child):
    return next(data for event, data in child.events.sent if event == Event.TIMED)


def test_a_timed_size_times_the_learner_beside_pytorch(toy, tmp_path, monkeypatch):
    child, calls = fake_child(toy, tmp_path, monkeypatch), []
    child.time_cases(adder(calls), [message(memory_only=False)])
    timed = timed_event(child)
    assert set(timed["measured"]) == {"learner", "torch"}
    assert torch.equal(_read(timed, "c"), torch.full((64,), 3.0))
    assert calls == [64]  # the faked timer runs each contestant once; peak memory is measured on a GPU only


def test_a_memory_only_size_runs_the_learner_alone_and_times_nothing(toy, tmp_path, monkeypatch):
    child, calls = fake_child(toy, tmp_path, monkeypatch), []

    def no_pytorch(a, b):
        raise AssertionError("PyTorch ran at a memory-only size")

    child._reference = no_pytorch
    child.time_cases(adder(calls), [message(memory_only=True)])
    timed = timed_event(child)
    assert timed["measured"] == {} and timed["memory"] == {}  # peak memory is measured on a GPU only
    assert calls == [64, 64]  # once to compile, once measured
    assert torch.equal(_read(timed, "c"), torch.full((64,), 3.0))
    steps = [data["text"] for event, data in child.events.sent if event == Event.STEP]
    assert steps == ["peak memory at n=64"]


def test_compile_first_calls_the_learners_code_once_per_timed_size_on_stand_ins_after_the_memory_sizes(
    toy, tmp_path, monkeypatch
):
    """Order.COMPILE_FIRST: a go of its own once the sizes run for their memory alone are done; the learner's code is
    called once at each timed size (its Triton kernels compiled, none launched) on stand-ins of the size's tensors,
    not its inputs (their files are for the timed run) and without PyTorch (which compiles nothing); then COMPILED,
    then the timing."""
    child, calls, handed = fake_child(toy, tmp_path, monkeypatch), [], []
    tensors, reference = child._tensors, child._reference
    child._tensors = lambda case, message: handed.append(message["k"]) or tensors(case, message)
    child._reference = lambda a, b: calls.append("torch") or reference(a, b)
    child.time_cases(adder(calls), [message(memory_only=True), message(memory_only=False)], compile_first=True)
    events = [event for event, _ in child.events.sent]
    assert events.index(Event.TIMED) < events.index(Event.COMPILED) < events.index(Event.TIMING_START, 2)
    steps = [data["text"] for event, data in child.events.sent if event == Event.STEP]
    assert steps == ["peak memory at n=64", "compiling for n=64", "timing n=64"]
    assert calls == [64, 64, 64, 64, "torch"]  # memory size twice, compile pass once, timed once beside PyTorch
    assert handed == ["t0", "t0"]  # the inputs read once per size run, none for the compile pass


def test_before_the_trials_the_child_compiles_for_the_cases_it_is_told_and_says_compiled(toy, tmp_path, monkeypatch):
    from grader.core.vocabulary import Order

    child, calls = fake_child(toy, tmp_path, monkeypatch), []
    orders = iter([{Order.COMPILE_CASES: [0, 1]}, {Order.END_TRIALS: True}])
    child.read_message = lambda: next(orders)
    child.solution_watch = SimpleNamespace(active=True, seen=set())
    child.run_trials(adder(calls))
    assert [e for e, _ in child.events.sent if e != Event.STEP] == [Event.COMPILED, Event.TRIALS_DONE]
    assert calls == [toy.cases[0].params["n"], toy.cases[1].params["n"]]


def test_a_failure_in_the_compile_pass_ends_it_unreported_and_the_timing_still_runs(toy, tmp_path, monkeypatch):
    child, calls = fake_child(toy, tmp_path, monkeypatch), []
    learner = adder(calls)

    def fails_first(tensors, params):
        if not calls:
            calls.append("failed")
            raise RuntimeError("out of resources")
        learner(tensors, params)

    child.time_cases(fails_first, [message(memory_only=False)], compile_first=True)
    assert [e for e, _ in child.events.sent if e in (Event.COMPILED, Event.TIMED)] == [Event.COMPILED, Event.TIMED]
    assert calls == ["failed", 64]


def _read(timed: dict, name: str) -> torch.Tensor:
    from grader.checks.inputs import load_tensor

    return load_tensor(timed["outputs"][name])
