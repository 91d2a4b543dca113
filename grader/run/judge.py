"""The parent's side of one grade: it feeds the child trials and decides every verdict.

The learner's code runs only in the child (sandbox.Child, worker.py). This process, which never runs
it, draws each trial's inputs, computes the float64 reference from its own copy of them, compares the
outputs the child hands back, turns the child's evidence (operators called, inputs changed, solution
files opened) into integrity verdicts, and believes the child's timings only as far as its own clock
agrees (speed.py). Inputs for the next trial are drawn while the child runs this one; the large trials'
and the timed sizes' inputs are drawn from the start (`prefetch`, while nvcc builds and the child starts)."""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from grader import cuda_cpu
from grader.checks import integrity, memory, op_checks, speed
from grader.checks.checking import judge_output, load_reference, looks_cached, reference_outputs
from grader.checks.inputs import dtype_of, element_size, generate, load_tensor, save_tensor, shape_of
from grader.child.timing import BUDGET_S
from grader.core import gpushare, hostload
from grader.core.records import ERROR, FAILED, PASSED, Check, GradeResult
from grader.core.spec import Case, ExerciseSpec, Variant
from grader.run import heavy, waiting
from grader.run.sandbox import Child, ChildGone, ChildTimeout, Death, death_message

AHEAD = 2  # trials drawn ahead of the child: enough to hide drawing, little memory held
# A trial whose inputs are this large (reduction's 1 GB at 2^28) is drawn from the start of the grade on a
# thread of its own: drawing and writing it takes about a second, which the build and the first trials hide.
# What is drawn ahead waits on disk (and in memory, where the judge needs the inputs again): at most
# PREFETCH_BUDGET bytes of it, the rest drawn when its turn comes.
PREFETCH_BYTES = 64 * 2**20
PREFETCH_BUDGET = 3 * 2**30


class Finished(Exception):
    """The grade has its verdict (a failure); stop talking to the child."""


class Judge:
    def __init__(self, spec: ExerciseSpec, variant: Variant, child: Child, result: GradeResult, seed: int,
                 timeout_s: float, timing: bool, calibration: dict | None):
        self.spec, self.variant, self.child, self.result = spec, variant, child, result
        self.seed, self.timeout_s, self.timing, self.calibration = seed, timeout_s, timing, calibration
        hostload.limit_threads()  # references and draws in one GPU's share of the CPUs
        self.reference = load_reference(spec.folder / "reference.py", variant.reference)
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="kcourse-reference")
        # float64 references on the GPU: the child's own
        self.child_ready = threading.Event()  # the GPU process's work waits for it (heavy.GpuCompute's gate)
        if child.ready is not None:
            self.child_ready.set()
        self.gpu = heavy.GpuCompute(spec, variant.reference, child.visible_devices, self.child_ready) \
            if heavy.wanted(spec) else None
        self.stop = threading.Event()
        self.slots = threading.Semaphore(AHEAD)
        self.refs: dict[Any, Future] = {}
        # a trial's inputs, kept until it is judged only where an output is judged by a property check
        self.checked_inputs: dict[Any, dict] = {}
        self.keep_inputs = any(t.check for t in spec.outputs)
        self.op_refs: dict[Any, Future] = {}  # the reference's gradients for the trials running [checks] (op_checks.py)
        self.op_judged: list[dict[str, Check]] = []
        self.phases: dict[str, float] = {}
        self.deadline = float("inf")
        self.loading = False  # waiting for the learner's file to load (a timeout then is a hang at import)
        self.job_learner = ""
        self.waited_from = time.monotonic()  # "still running" lines count from the job (_next_event)
        self.line_due = self.waited_from + waiting.STILL_RUNNING_S
        self.quiet = False
        self.drawer = ThreadPoolExecutor(1, thread_name_prefix="kcourse-draw")
        self.drawn: dict[Any, Future] = {}  # trial k or "t{index}" -> (file metadata, inputs), drawn ahead
        self.producer_error: tuple[BaseException, str] | None = None  # (error, traceback) of the producer thread
        self.before_timing: Callable[[], None] = lambda: None
        self.staged_solution: dict[Path, Path] = {}  # the solution's files -> their place in the child's folder

    # --- the whole grade -------------------------------------------------------------------------
    def run(self, job: dict[str, Any]) -> None:
        ready = self.child.wait_ready()
        self.child_ready.set()
        self.result.device = cuda_cpu.DEVICE if job.get("emulated") else ready.get("device", {})
        started = time.monotonic()
        self.phases["start"] = round(started - self.child.started, 3)
        self.deadline = started + self.timeout_s
        self.waited_from, self.line_due = started, started + waiting.STILL_RUNNING_S
        self.job_learner = str(job.get("learner", ""))
        self.child.send({**job, "work_dir": str(self.child.dir)})
        try:
            self._load(job, started)
            if self._numerics() and self.timing:
                self.before_timing()  # e.g. the sanitizer's processes end: nothing else on the GPU while timing
                self._timing(job)
            else:
                self.child.send({"stop": True})
                self._add_if(memory.not_measured(self.spec, on_gpu=self.child.device == "cuda"))
        except Finished:
            pass
        except (ChildTimeout, ChildGone) as exc:
            if self.producer_error is not None:  # the child waited for a trial that never came: not its fault
                self._grader_error(*self.producer_error)
            else:
                self._died(timed_out=isinstance(exc, ChildTimeout))
        except Exception as exc:  # a grader bug (or a broken reference): say so, never a traceback
            self.child.kill()
            self._grader_error(exc, traceback.format_exc())
        finally:
            self.close()

    def close(self, wait_for_draws: bool = False) -> None:
        """End the threads and the GPU process (also for a grade that ends before run(): a failed build).
        `wait_for_draws`: until a draw under way has written its files (another judge will write the same
        names in this child's folder)."""
        self.stop.set()
        self.child_ready.set()  # a draw waiting to use the GPU process goes on, and finds it shut down
        for _ in range(AHEAD):
            self.slots.release()  # a producer waiting for a slot sees `stop` and ends
        self.drawer.shutdown(wait=wait_for_draws, cancel_futures=True)  # a failure's verdict does not wait for a draw
        self.pool.shutdown(wait=True, cancel_futures=True)
        if self.gpu is not None:
            self.gpu.shutdown()

    def _load(self, job: dict[str, Any], started: float) -> None:
        """The learner's file imported within load_limit_s of the job (the whole run's limit counts it too)."""
        whole, self.deadline = self.deadline, min(self.deadline, started + self.load_limit_s())
        self.loading = True
        self._expect("loaded")
        self.loading, self.deadline = False, whole
        self._mark("load", started)
        self.result.add(Check("load", PASSED, f"{Path(job['learner']).name}: `{self.variant.entry}` loaded"))

    def load_limit_s(self) -> float:
        """Loading runs no interpreted kernel, so it gets the spec's own timeout_s, not the interpreter's multiple
        of it (grade.INTERPRETER_TIMEOUT_FACTOR): a hang at import is stopped at the limit the spec states."""
        return min(self.timeout_s, self.variant.timeout_s or self.timeout_s)

    def _mark(self, phase: str, since: float) -> float:
        now = time.monotonic()
        self.phases[phase] = round(now - since, 3)
        return now

    def _grader_error(self, exc: BaseException, trace: str) -> None:
        self.result.add(Check("grader", ERROR, f"internal grader error: {type(exc).__name__}: {exc} — please report "
                              "it to your instructor with this output", {"traceback": trace[-4000:]}))

    def _died(self, timed_out: bool) -> None:
        self.child.kill()
        code = self.child.proc.wait()
        if timed_out and self.loading and Path(self.job_learner).suffix == ".py":
            self.result.add(Check("run", FAILED, self._load_timeout_message(), {"code": "load_timeout"}))
            return
        kind, message = death_message(Death(timed_out, code, self.child.last_step), self.timeout_s)
        explained = None if timed_out else cuda_cpu.explain(self.child.output())
        if explained is not None:  # the CPU emulator stopped a kernel: the verdict a GPU's CUDA error gets
            self.result.add(Check("numerics", FAILED, f"{explained[1]} (while {self.child.last_step})",
                                  {"code": "cuda_error", "emulator": explained[0]}))
            return
        self.result.add(Check("run", FAILED, message, {"code": kind}))

    def _load_timeout_message(self) -> str:
        return (f"importing {Path(self.job_learner).name} ran past the {self.load_limit_s():g} s limit and was stopped: "
                "its module-level code runs when the grader loads it — a loop there that never ends, or a test call "
                "left at the top level? Put test code under `if __name__ == \"__main__\":` and grade again")

    def _fail(self, name: str, message: str, **details: Any) -> None:
        self.result.add(Check(name, FAILED, message, details))
        self.stop.set()
        self.child.kill()
        raise Finished

    def _expect(self, kind: str) -> dict[str, Any]:
        """The child's next event of `kind`; a failure it reports (its own code's) ends the grade."""
        while True:
            event = self._next_event()
            if event["event"] == kind:
                return event
            if event["event"] == "check":
                self._child_failure(event.get("check"))
            if event["event"] == "done":
                raise ChildGone
            if event["event"] == "garbled":
                self._fail("integrity", f"the grading process sent an unreadable message ({event['text']!r}): does your "
                           "code write to file descriptors it did not open?", code="garbled")

    def _next_event(self) -> dict[str, Any]:
        """The child's next event; at a terminal, while the grade goes on, a "still running" line every
        waiting.STILL_RUNNING_S (not during the probe, whose bursts this process's clock times)."""
        if self.quiet or not waiting.waiting_lines_wanted():
            return self.child.event(self.deadline)
        while True:
            now = time.monotonic()
            if now >= self.line_due:
                print(waiting.still_running(now - self.waited_from, self.deadline - self.waited_from,
                                            self.child.last_step), file=sys.stderr, flush=True)
                self.line_due = now + waiting.STILL_RUNNING_S
            try:
                return self.child.event(min(self.deadline, self.line_due))
            except ChildTimeout:
                if time.monotonic() >= self.deadline:
                    raise

    def _child_failure(self, check: dict) -> None:
        """The child reports failures of the learner's code; a "passed" from it is a forgery."""
        try:
            reported = Check(**check)
        except TypeError:  # not a check's fields (or no check at all): a forgery too
            reported = Check("integrity", "passed", "")
        if reported.status not in (FAILED, ERROR):
            self._fail("integrity", f"the grading process reported its own verdict ({reported.name}: {reported.status}): "
                       "verdicts are the grader's — does your code write to the grader's pipe?", code="forged_verdict")
        self.result.add(reported)
        self.child.kill()
        raise Finished

    # --- numerics ----------------------------------------------------------------------------------
    def _trials(self) -> list[tuple[int, Case, int, int]]:
        """(case index, case, trial, trial seed) for every trial this machine runs."""
        gpu = self.child.device == "cuda"
        return [(index, case, trial, self.seed + 1000 * index + trial)
                for index, case in enumerate(self.spec.cases)
                if (gpu or not case.gpu_only) and self.variant.accepts(case)
                for trial in range(self.spec.trials_for(case))]

    def _numerics(self) -> bool:
        started = time.monotonic()
        trials = self._trials()
        producer = threading.Thread(target=self._produce, args=(trials,), daemon=True)
        producer.start()
        for k, (index, case, trial, trial_seed) in enumerate(trials):
            event = self._expect("trial")
            self.slots.release()
            self._judge_trial(event, case, trial, k, trials)
        event = self._expect("trials_done")
        self._mark("numerics", started)
        if event.get("borrowed"):
            self._fail("integrity", f"your code loaded the instructor's solution ({', '.join(event['borrowed'])}): "
                       "the kernel must be your own", code="solution_loaded")
        skipped = sum(1 for c in self.spec.cases if c.gpu_only and self.variant.accepts(c)) if self.child.device != "cuda" else 0
        note = f"; {skipped} GPU-only case(s) skipped (no GPU)" if skipped else ""
        note += _other_dtypes_note(self.spec, self.variant)
        ran = len({index for index, *_ in trials})
        self.result.add(Check("numerics", PASSED, f"{ran} case(s), {len(trials)} trials matched the float64 reference"
                              f"{note}", {"cases": ran, "trials": len(trials), "skipped_cases": skipped}))
        self.result.add(Check("integrity", PASSED, "no torch compute operators called, inputs untouched, no cached results"))
        return self._add_op_checks()

    def _add_op_checks(self) -> bool:
        """The registered operator's checks ([checks] in spec.toml), once numerics passed; False if one failed."""
        if self.spec.checks is None:
            return True
        checks = op_checks.verdicts(self.spec, self.op_judged)
        for check in checks:
            self.result.add(check)
        return not any(c.status == FAILED for c in checks)

    def _produce(self, trials) -> None:
        """_produce_all on its thread. A grading that ended early stops it (its errors then mean nothing);
        any other error is the grader's: kept for run() to report, and the child stopped, so the judge is
        not left waiting for a trial that was never sent (which would read as the learner's hang)."""
        try:
            self._produce_all(trials)
        except Exception as exc:
            if not self.stop.is_set():
                self.producer_error = (exc, traceback.format_exc())
                self.child.kill()

    def _produce_all(self, trials) -> None:
        """Draw, write and send each trial; its reference is computed on the reference thread."""
        for k, (index, case, trial, trial_seed) in enumerate(trials):
            self.slots.acquire()
            if self.stop.is_set():
                return
            metas, inputs = self._drawn(k, case, trial_seed, trial)
            self.child.send({"case": index, "k": k, "label": self._label(case, trial), "inputs": metas,
                             "watch_ops": trial == 0, **self._op_checks_request(k, case, trial, trial_seed, inputs)})
        self.child.send({"end_trials": True})

    # --- drawing inputs ------------------------------------------------------------------------------
    def prefetch(self, job: dict[str, Any]) -> None:
        """Start drawing, before the build: the trials of PREFETCH_BYTES or more and those whose reference
        is the GPU process's (a GFLOP or more: the one wait numerics would otherwise have), then the timed
        sizes, as far as PREFETCH_BUDGET goes."""
        wanted = [(k, case, seed, trial) for k, (_, case, trial, seed) in enumerate(self._trials())
                  if input_bytes(self.spec, case) >= PREFETCH_BYTES or self._on_gpu(case)]
        if self.timing:
            wanted += [(f"t{index}", case, self._timed_seed(index), 0) for index, case in self._timed_cases(job)]
        budget = PREFETCH_BUDGET
        for k, case, seed, trial in wanted:
            size = input_bytes(self.spec, case)
            if size <= budget:
                budget -= size
                if k not in self.drawn:  # a judge made ahead (grade.judge_ahead) has drawn it already
                    self.drawn[k] = self.drawer.submit(self._draw, case, seed, trial, k, True)

    def _drawn(self, k: Any, case: Case, seed: int, trial: int) -> tuple[dict, dict]:
        """(file metadata, inputs) of trial k: the prefetched draw, or drawn now."""
        future = self.drawn.pop(k, None)
        metas, inputs = future.result() if future is not None else self._draw(case, seed, trial, k)
        if self.keep_inputs:
            self.checked_inputs[k] = inputs
        return metas, inputs

    def _draw(self, case: Case, seed: int, trial: int, k: Any, ahead: bool = False) -> tuple[dict, dict]:
        """Draw a trial's inputs, write them for the child and start its reference. Ahead of time the
        reference is computed on this thread, not queued before the small trials' on the reference thread."""
        inputs = self._generate(case, seed, trial)
        metas = {name: save_tensor(t, self.child.dir / f"in-{k}-{name}.bin") for name, t in inputs.items()}
        if not ahead:
            self.refs[k] = self._reference_of(inputs, case)
            return metas, inputs
        self.refs[k] = self._reference_of(inputs, case) if self._on_gpu(case) else \
            _done(lambda: reference_outputs(self.reference, self.spec, inputs, case.params))
        needed = self.keep_inputs or op_checks.wanted(self.spec, case, trial)  # else not held while it waits
        return metas, inputs if needed else {}

    def _timed_seed(self, index: int) -> int:
        return self.seed + 10**6 + index

    def _op_checks_request(self, k: int, case: Case, trial: int, seed: int, inputs: dict) -> dict:
        """For a trial that runs the operator checks: the gradients fed backward (their reference's on the way)."""
        if not op_checks.wanted(self.spec, case, trial):
            return {}
        grads = op_checks.draw_grad_outputs(self.spec, case, seed)
        self.op_refs[k] = self.pool.submit(op_checks.reference_gradients, self.reference, self.spec, inputs, grads,
                                           case.params)
        return {"op_checks": {"grad_outputs": [save_tensor(g, self.child.dir / f"in-{k}-grad{i}.bin")
                                               for i, g in enumerate(grads)]}}

    def _on_gpu(self, case: Case) -> bool:
        """A heavy case of an exercise whose spec asks for references on the GPU (heavy.py); the small
        ones stay on the CPU, so the first trials do not wait for the GPU process to start."""
        return self.gpu is not None and heavy.worth_it(self.spec, self.variant, case)

    def _generate(self, case: Case, seed: int, trial: int = 0) -> dict:
        if self._on_gpu(case):
            return self.gpu.generate(case, seed, trial)
        return generate(self.spec, case, seed, trial)

    def _reference_of(self, inputs: dict, case: Case) -> Future:
        if self._on_gpu(case):
            return self.gpu.reference(inputs, case.params)
        return self.pool.submit(reference_outputs, self.reference, self.spec, inputs, case.params)

    def _label(self, case: Case, trial: int) -> str:
        return f"{case.label()}, trial {trial + 1}"

    def _outputs(self, event: dict, case: Case) -> list:
        got = []
        for spec_out in self.spec.outputs:
            meta = event.get("outputs", {}).get(spec_out.name)
            try:
                tensor = load_tensor(meta, expected_numel=_numel(shape_of(spec_out, case)))
            except (TypeError, KeyError, ValueError, OSError) as exc:
                self._fail("numerics", f"{case.label()}: output {spec_out.name} did not come back from your run ({exc})",
                           code="bad_return")
            got.append(tensor.reshape(shape_of(spec_out, case)) if self.variant.returns_outputs else tensor)
            Path(meta["path"]).unlink(missing_ok=True)
        return got

    def _judge_output(self, spec_out, out, ref, tol, label: str, k: Any, case: Case):
        """compare(), or the exercise's property check for an output whose answer is not unique."""
        return judge_output(self.spec, spec_out, out, ref, tol, label, inputs=self.checked_inputs.get(k),
                            params=case.params, device=self.result.device)

    @staticmethod
    def _outside_message(label: str, case: Case, names: list[str]) -> str:
        """A store outside an output: past its end, or (an output that is a row slice) into the gaps between rows."""
        sliced = [n for n in names if case.outputs.get(n, {}).get("layout") == "row_slice"]
        if sliced:  # the classic cause there is a row stride taken to be the row's width
            return (f"{label}: your code wrote outside {', '.join(names)}: {', '.join(sliced)} is a row slice of a "
                    "wider matrix here, and a store landed past its end or in the gap after one of its rows — step "
                    "from row to row by the row stride (leading dimension) you are given, not by the number of "
                    "columns, and check the index before every store")
        return (f"{label}: your code wrote past the end of {', '.join(names)} (into the poisoned guard after it): "
                "threads past the last element stored anyway — check the index before every store (if (i < n); in "
                "2-D if (row < rows && col < cols); in Triton mask= on tl.store)")

    def _judge_trial(self, event: dict, case: Case, trial: int, k: int, trials) -> None:
        label = self._label(case, trial)
        bad_ops = integrity.forbidden_ops(set(event.get("ops", [])))
        if bad_ops:
            self._fail("integrity", f"{label}: your code called torch's {', '.join(bad_ops[:5])}: the result must come "
                       "from your own kernel, not from PyTorch (allowed: allocation, views, copies)",
                       code="torch_compute", ops=bad_ops)
        if event.get("modified"):
            self._fail("integrity", f"{label}: your code modified its input {', '.join(event['modified'])} in place; "
                       "inputs are read-only — write only to the outputs", code="input_modified")
        if event.get("outside"):
            self._fail("numerics", self._outside_message(label, case, event["outside"]), code="out_of_bounds",
                       case=case.params, trial=trial + 1, outputs=event["outside"])
        got = self._outputs(event, case)
        refs = self.refs[k].result()
        previous = self.refs[k - 1].result() if trial > 0 else None
        for i, (spec_out, out, ref) in enumerate(zip(self.spec.outputs, got, refs)):
            tol = self.spec.tolerance_of(case, spec_out)
            comparison = self._judge_output(spec_out, out, ref, tol, label, k, case)
            if comparison.ok:
                continue
            if previous is not None and spec_out.check is None and looks_cached(out, previous[i], ref, tol):
                self._fail("integrity", f"{label}: {spec_out.name} equals the answer for the previous trial's inputs "
                           "— is your code caching results between calls?", code="cached_result")
            self._fail("numerics", comparison.message, code=comparison.code, case=case.params, trial=trial + 1,
                       **comparison.details)
        self.checked_inputs.pop(k, None)
        if k in self.op_refs:
            self.op_judged.append(op_checks.judge_trial(self.spec, self.variant, case, label, event, refs,
                                                        self.op_refs.pop(k).result(), self.spec.tolerance_of(case)))

    # --- timing -------------------------------------------------------------------------------------
    def _timed_cases(self, job: dict[str, Any]) -> list[tuple[int, Case]]:
        """(index in [performance.cases], case) of the sizes to time: all of them, or with job["timed_sizes"] =
        "verdict" (kcourse watch) only the last, the size the speed verdict is taken at, with the same budget:
        the verdict is as trustworthy, and the other sizes' inputs, references and runs (~2 s) are saved.
        An exercise with a memory bar times every size anyway: its O(N) check needs the long, thin ones."""
        indexed = list(enumerate(self.spec.performance.cases))
        verdict_only = job.get("timed_sizes") == "verdict" and self.spec.performance.max_extra_bytes is None
        return indexed[-1:] if verdict_only else indexed

    def _timing(self, job: dict[str, Any]) -> None:
        started = time.monotonic()
        timed = self._timed_cases(job)
        messages = self._timing_messages(job, timed)
        self.deadline = max(self.deadline, time.monotonic() + self.timeout_s)
        if self.gpu is not None:  # nothing of ours on the GPU while the child times
            for index, _ in timed:
                self.refs[f"t{index}"].result()
        self._stage_solution()
        self.child.send({"time": messages})
        records = [self._one_timed_case(index, case) for index, case in timed]
        self.result.timings = records
        check = speed.verdict(self.spec, self.variant, records[-1] if records else None, self.calibration,
                              self.result.device)
        if records and messages[-1]["probe"]:
            check = self._cross_check_probe(records[-1]) or check
        self.result.add(check)
        self._add_if(memory.verdict(self.spec, records))
        self._mark("timing", started)

    def _stage_solution(self) -> None:
        """The solution, copied where the boxed child can read it, now that no trial remains (grade._box_the_child)."""
        for real, staged in self.staged_solution.items():
            staged.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(real, staged)

    def _timing_messages(self, job: dict[str, Any], timed: list[tuple[int, Case]]) -> list[dict[str, Any]]:
        """What the child is told to time, a message per size."""
        messages = []
        for index, case in timed:
            metas, _ = self._drawn(f"t{index}", case, self._timed_seed(index), 0)
            last = index == len(self.spec.performance.cases) - 1
            messages.append({"case": index, "k": f"t{index}", "inputs": metas, "probe": last,
                             "budget_s": BUDGET_S if last else BUDGET_S / 3,  # the verdict size gets most runs
                             # kcourse watch: PyTorch is not timed beside you (the verdict does not use it):
                             # two contestants take two thirds of three's time
                             "anchor": job.get("timed_sizes") != "verdict"})
        return messages

    def _add_if(self, check: Check | None) -> None:
        if check is not None:
            self.result.add(check)

    def _one_timed_case(self, index: int, case: Case):
        self.child.send({"go": True})  # the child waits for it: events are read as they happen, not buffered
        self._expect("timing_start")
        begun = time.monotonic()
        event = self._expect("timed")
        wall = time.monotonic() - begun
        measured = event.get("measured", {})
        if "learner" not in measured:
            self._fail("integrity", "the timing of your run came back without your kernel's figures", code="timing_forged")
        claim = speed.implausible_claim(measured, wall)
        if claim:
            self._fail("integrity", claim + ": was the timer patched?", code="timing_forged")
        got = self._outputs(event, case)
        for spec_out, out, ref in zip(self.spec.outputs, got, self.refs[f"t{index}"].result()):
            tol = self.spec.tolerance_of(case, spec_out)
            comparison = self._judge_output(spec_out, out, ref, tol, f"timed size {case.label()}", f"t{index}", case)
            if not comparison.ok:
                self._fail("numerics", comparison.message + " (the output of your last timed run)", code=comparison.code)
        self.checked_inputs.pop(f"t{index}", None)
        record = speed.timing_record(self.spec, self.variant, case, measured, self.result.device)
        return memory.annotate(record, self.spec, case, event.get("memory"), element_size(case.dtype))

    def _cross_check_probe(self, record) -> Check | None:
        """Fails the grade where the grader's own clock disagrees with the child's timing; where another
        program shares the GPU, returns the speed check that says so instead (gpushare.py).

        A disagreement is probed once more before it counts: a moment when the whole GPU runs slow (baseline,
        solution and learner alike) passes the second look; a patched timer disagrees again."""
        pid = int((self.child.ready or {}).get("pid") or self.child.proc.pid)  # sent before learner code ran
        self.child.send({"go": True})
        self.quiet = True  # no terminal writes while this process's clock times the bursts
        disagreement = self._probe_round(record, pid)
        if disagreement:
            self.child.send({"probe_again": True})
            disagreement = self._probe_round(record, pid)
        self.quiet = False
        if not disagreement:
            self.child.send({"probe_again": False})  # the child ends as after any grade
            return None
        sharers = gpushare.other_gpu_processes(*gpushare.nvidia_smi_ids(self.child.visible_devices,
                                                                            (self.result.device or {}).get("uuid")))
        if sharers:
            return Check("speed", ERROR, f"not judged: another program used this GPU while your kernel was timed "
                         f"({', '.join(sharers[:3])}), and the grader's clock and your timing disagree ({disagreement}); "
                         "grade again when `nvidia-smi` shows the GPU free", {"code": "gpu_shared"})
        self._fail("integrity", disagreement + ": was the timer patched? If not, your Python code spends that long "
                   "on the host each call while the GPU waits (a device-properties query, an allocation, a compile or "
                   "a .item() in every call): do such work once and keep it", code="timing_forged")
        return None

    def _probe_round(self, record, pid: int) -> str | None:
        """One probe: each contestant's bursts timed by this process's clock (the child has its go); what
        speed.probe_disagrees says of them."""
        bursts, traced, trace = [], [], _probe_trace()
        contestants = 3 if record.solution_source == "live solution" else 2
        for _ in range(contestants * speed.PROBE_BURSTS):
            start = self._expect("probe_start")
            # the trace's /proc reads come before the clock starts: a grade that is not traced pays nothing for them
            before = (hostload.main_thread_times(pid), hostload.own_thread_times()) if trace else (None, None)
            begun = time.monotonic()
            # the child waits for this go: a burst cannot run before the clock that times it has started (were
            # it sent before, a grader slow to wake, say under a learner's CPU burners, would see it shorter)
            self.child.send({"go": True})
            end = self._expect("probe_end")
            wall = time.monotonic() - begun
            who, runs = str(start.get("who")), int(start.get("runs", 1))
            bursts.append((who, wall, runs))
            if trace:
                traced.append(hostload.burst_trace(who, runs, wall, before[0], hostload.main_thread_times(pid),
                                                   before[1], hostload.own_thread_times(), end))
        disagreement = speed.probe_disagrees(record, speed.fastest_bursts(bursts))
        if trace:
            hostload.write_trace(trace, {"exercise": self.spec.id, "lang": self.variant.lang,
                                         "claimed_ms": record.learner_ms, "verdict": disagreement or "agrees",
                                         "bursts": traced})
        return disagreement


def _probe_trace() -> str | None:
    """KCOURSE_PROBE_TRACE=FILE: every probe's bursts, with the host's accounting, appended to FILE as JSON lines
    (a diagnostic for instructors grading on a busy host; verdicts are unchanged)."""
    return os.environ.get("KCOURSE_PROBE_TRACE") or None


def _other_dtypes_note(spec: ExerciseSpec, variant: Variant) -> str:
    """The cases this version does not take (their dtype is another version's), said rather than hidden."""
    others = sorted({c.dtype for c in spec.cases if not variant.accepts(c)})
    if not others:
        return ""
    count = sum(1 for c in spec.cases if not variant.accepts(c))
    return f"; {count} {'/'.join(others)} case(s) are for the other version(s), this one takes {'/'.join(variant.dtypes)}"


def input_bytes(spec: ExerciseSpec, case: Case) -> int:
    """Bytes of one trial's inputs at `case`."""
    return sum(_numel(shape_of(t, case)) * element_size(dtype_of(t, case)) for t in spec.inputs)


def _done(compute: Callable[[], Any]) -> Future:
    """A future holding compute()'s answer (or its exception), computed now."""
    future: Future = Future()
    try:
        future.set_result(compute())
    except Exception as exc:  # raised again where the reference is read, as the reference thread's would be
        future.set_exception(exc)
    return future


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
