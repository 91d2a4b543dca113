"""A fake of sandbox.Child for the judge's unit tests: it answers the judge's messages in this process, the
way grader/child/worker.py answers them, from a `kernel` and the evidence it is told to report (operators called, inputs
modified, stores outside, outputs missing), or crashes, hangs, forges and garbles as a learner's code can make it.
No child process and no learner code: the judge itself (inputs drawn, references, comparisons) runs for real."""

from __future__ import annotations

import os
import queue
import time
from types import SimpleNamespace
from typing import Any, Callable

from grader.checks.inputs import load_tensor, save_tensor
from grader.checks.speed import PROBE_BURSTS
from grader.core.job import Job
from grader.core.records import GradeResult
from grader.run.judge import Judge
from grader.run.sandbox import OUTPUT_LIMIT, ChildGone, ChildTimeout, trim

GONE = object()  # queued where the real child's event pipe would reach its end
Kernel = Callable[[dict, dict, Any], dict]


def add(inputs: dict, params: dict, k: Any) -> dict:
    return {"c": inputs["a"] + inputs["b"]}


class FakeChild:
    """sandbox.Child's side of the protocol, answered in this process the way worker.py answers it."""

    def __init__(
        self,
        spec,
        folder,
        kernel: Kernel = add,
        evidence: Callable[[Any], dict] | None = None,
        measured: dict | None = None,
        device: str = "cpu",
    ):
        self.spec, self.kernel, self.evidence = spec, kernel, evidence or (lambda k: {})
        self.device, self.visible_devices = device, None
        self.wrapped = False  # run under a tool (ncu): the grade, not the judge, ends it
        self.dir = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.ready = {"event": "ready", "device": {"type": device, "name": "fake"}, "pid": os.getpid()}
        self.started = time.monotonic()
        self.last_step = "starting"
        self.returncode: int | None = None
        self.proc = SimpleNamespace(pid=os.getpid(), wait=lambda timeout=None: self.returncode)
        self.pid = os.getpid()
        self.events: queue.Queue = queue.Queue()
        self.sent: list[dict] = []
        self.inputs: dict[Any, dict] = {}  # what each trial was handed
        self.after_job: list = [{"event": "loaded"}]  # what the child answers the job with
        self.borrowed: list[str] = []
        # k -> events sent instead of the trial's (GONE: the child dies there; none: it hangs there)
        self.at_trial: dict[Any, list] = {}
        self.die_with: int = -11
        self.hung = False
        # timing: the figures the child claims, and how long each probe burst of a contestant takes by the clock
        # (claims of a millisecond or more: the judge's clock sees bursts of microseconds here, and may be late by tens
        # of them on a busy host; 20 ms of claimed runs still fit in the moment the fake's timed phase takes)
        self.measured = measured or {
            "learner": {"median_ms": 1.0, "runs": 10},
            "solution": {"median_ms": 1.0, "runs": 10},
        }
        self.burst_s: dict[str, float] = {}
        self.peak_bytes: dict[str, int] = {}  # the peak memory beyond inputs and outputs each timed size reports
        self.timed: list[dict] = []
        self.compile_first = False  # the judge's Order.COMPILE_FIRST (gpu_lock on): a go of its own before the timing
        self.compiled_cases: list[int] | None = None  # the judge's Order.COMPILE_CASES, before the trials
        self.state = "numerics"
        self.bursts: list[str] = []
        self.printed = ""  # what the child wrote to its stdout/stderr (the judge reads it when the child dies)
        self.start_fails: Exception | None = None  # raised by wait_ready: the child never became ready

    # --- what the judge calls --------------------------------------------------------------------
    def wait_ready(self, limit_s: float = 0) -> dict:
        if self.start_fails is not None:  # as sandbox.Child: no ready event came, and what came instead is raised
            self.ready = None
            raise self.start_fails
        return self.ready

    def output(self, limit: int = OUTPUT_LIMIT) -> str:
        return trim(self.printed, limit)

    def kill(self) -> None:
        if self.returncode is None:
            self.returncode = -9
            self.events.put(GONE)

    def event(self, deadline: float) -> dict:
        left = deadline - time.monotonic()
        try:
            item = self.events.get(timeout=max(0.0, min(left, 10.0)))
        except queue.Empty:
            raise ChildTimeout from None
        if item is GONE:
            raise ChildGone
        if item["event"] == "step":
            self.last_step = item["text"]
        return item

    def send(self, message: dict) -> None:
        self.sent.append(message)
        if self.returncode is not None:
            return
        if "learner" in message:
            self._put(*self.after_job)
        elif "compile_cases" in message:  # worker._compile_for: the trials' kernels compiled, none launched
            self.compiled_cases = list(message["compile_cases"])
            self._put({"event": "step", "text": "compiling for the trials"}, {"event": "compiled"})
        elif "end_trials" in message:
            self._put({"event": "trials_done", "borrowed": self.borrowed})
        elif "inputs" in message:
            self._trial(message)
        elif "time" in message:
            self.timed, self.state = list(message["time"]), "timing"
            self.compile_first = bool(message.get("compile_first"))
        elif "go" in message:
            self._go()
        elif message.get("probe_again"):
            self._start_probe()

    # --- the worker's side ------------------------------------------------------------------------
    def _put(self, *events) -> None:
        for event in events:
            if event is GONE or event.get("event") == "done":  # the child exits (the worker says done first)
                self.returncode = self.die_with
            self.events.put(event)

    def _run(self, message: dict, params: dict) -> dict:
        inputs = {name: load_tensor(meta) for name, meta in message["inputs"].items()}
        self.inputs[message["k"]] = inputs
        outputs = self.kernel(inputs, params, message["k"])
        return {name: save_tensor(t, self.dir / f"out-{message['k']}-{name}.bin") for name, t in outputs.items()}

    def _trial(self, message: dict) -> None:
        k = message["k"]
        if self.hung:  # trials run one after another: nothing after a hang
            return
        self._put({"event": "step", "text": f"checking {message['label']}"})
        if k in self.at_trial:
            self._put(*self.at_trial[k])
            self.hung = not self.at_trial[k]
            return
        outputs = self._run(message, self.spec.cases[message["case"]].params)
        self._put(
            {"event": "trial", "k": k, "outputs": outputs, "ops": [], "modified": [], "outside": [], **self.evidence(k)}
        )

    def _go(self) -> None:
        if self.state == "timing" and self.compile_first and not self.timed[0].get("memory_only"):
            self.compile_first = False  # worker._compile_for: each timed size's kernels compiled, none launched
            self._put({"event": "step", "text": "compiling for the timed sizes"}, {"event": "compiled"})
        elif self.state == "timing":
            message = self.timed.pop(0)
            outputs = self._run(message, self.spec.performance.cases[message["case"]].params)
            memory_only = message.get("memory_only")  # worker._memory_only: one measured run, no timer
            measured, peaks = ({}, {"learner": self.peak_bytes.get("learner")}) if memory_only else (self.measured, {})
            self._put(
                {"event": "timing_start", "k": message["k"]},
                {"event": "timed", "k": message["k"], "measured": measured, "outputs": outputs, "memory": peaks},
            )
            if not self.timed:
                self.state = "probe" if message["probe"] else "done"
        elif self.state == "probe":
            self._start_probe()
        elif self.state == "burst":
            who = self.bursts.pop(0)
            time.sleep(self.burst_s.get(who, 0.0))  # the judge's clock runs from its go to our probe_end
            self._put({"event": "probe_end", "who": who})
            if self.bursts:
                self._put({"event": "probe_start", "who": self.bursts[0], "runs": 1})

    def _start_probe(self) -> None:
        contestants = ["baseline", "learner"] + (["solution"] if "solution" in self.measured else [])
        self.bursts = [who for who in contestants for _ in range(PROBE_BURSTS)]
        self.state = "burst"
        self._put({"event": "probe_start", "who": self.bursts[0], "runs": 1})


def grade(
    spec,
    child: FakeChild,
    *,
    timing: bool = False,
    timeout_s: float = 60.0,
    seed: int = 1,
    calibration: dict | None = None,
    may_pause: bool = False,
    **job,
) -> GradeResult:
    """The judge's verdict on `child`; `may_pause`: its shared hold of the GPU lock may be let go (grade.py: no
    compute-sanitizer on the GPU)."""
    result = GradeResult(exercise=spec.id, lang="triton", source="learner", seed=seed)
    judge = Judge(spec, spec.variant(None), child, result, seed, timeout_s, timing, calibration)
    judge.may_pause = lambda: may_pause
    judge.run(Job(learner="/x/toy.py", **job))
    return result


def verdicts(result: GradeResult) -> list[tuple[str, str, str | None]]:
    return [(c.name, c.status, c.details.get("code")) for c in result.checks]


def last(result: GradeResult):
    return result.checks[-1]
