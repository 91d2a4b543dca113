"""The parent's side of one grade: it feeds the child trials and decides every verdict.

The learner's code runs only in the child (sandbox.Child, worker.py). This process, which never runs
it, draws each trial's inputs and computes the float64 reference from its own copy of them (input_feed.py),
compares the outputs the child hands back, turns the child's evidence (operators called, inputs changed,
solution files opened) into integrity verdicts, and believes the child's timings only as far as its own clock
agrees (probe.py). What the child may send and how its death reads is child_link.py's."""

from __future__ import annotations

import contextlib
import math
import shutil
import time
import traceback
from pathlib import Path
from typing import Any, Callable, ContextManager

from grader import cuda_cpu
from grader.checks import integrity, memory, op_checks, speed
from grader.checks.checking import judge_output, load_reference, looks_cached
from grader.checks.inputs import element_size, load_tensor, shape_of
from grader.child import compile_steps
from grader.child.timing import BUDGET_S
from grader.core import gpu_lock, gpushare, hostload
from grader.core.job import Job
from grader.core.records import ERROR, FAILED, PASSED, Check, GradeResult, Timing
from grader.core.spec import Case, ExerciseSpec, Variant
from grader.core.vocabulary import CheckName, Code, Event, Order
from grader.run import probe
from grader.run.child_link import ChildLink, Finished, not_started
from grader.run.input_feed import InputFeed, Trial
from grader.run.sandbox import Child, ChildGone, ChildTimeout

__all__ = ["Finished", "Judge"]


class Judge:
    """One grade's verdicts: the child's load, every numerics trial, the timed sizes and the probe, in order."""

    def __init__(
        self,
        spec: ExerciseSpec,
        variant: Variant,
        child: Child,
        result: GradeResult,
        seed: int,
        timeout_s: float,
        timing: bool,
        calibration: dict | None,
    ):
        self.spec, self.variant, self.child = spec, variant, child
        self.seed, self.timeout_s, self.timing, self.calibration = seed, timeout_s, timing, calibration
        hostload.limit_threads()  # references and draws in one GPU's share of the CPUs
        self.feed = InputFeed(spec, variant, child, load_reference(spec.folder / "reference.py", variant.reference))
        self.link = ChildLink(child, result, timeout_s, self.load_limit_s(), on_fail=self.feed.stop.set)
        # where grades share the GPU (gpu_lock): whether the numerics may pause for other grades' timers (grade.py:
        # not while the grade's compute-sanitizer runs), the child's deadline stopped meanwhile
        self.may_pause: Callable[[], bool] = lambda: False
        self.feed.may_pause, self.feed.pausing = lambda: self.may_pause(), self.link.paused
        self.op_judged: list[dict[str, Check]] = []
        self.phases: dict[str, float] = {}
        self.before_timing: Callable[[], None] = lambda: None
        # held from the learner's code loaded to the end (grade.py: where the child builds an operator first)
        self.gpu_hold: Callable[[], ContextManager] = contextlib.nullcontext
        self.staged_solution: dict[Path, Path] = {}  # the solution's files -> their place in the child's folder

    @property
    def result(self) -> GradeResult:
        return self.link.result

    @result.setter
    def result(self, result: GradeResult) -> None:  # a judge made ahead (grade.judge_ahead) gets its grade's
        self.link.result = result

    # --- the whole grade -------------------------------------------------------------------------
    def run(self, job: Job) -> None:
        try:
            started = self._start(job)
            self._load(job, started)
            with self.gpu_hold():
                try:
                    self._numerics_and_timing(job)
                except Finished:
                    self._end_gpu_processes()
                    raise
                self._end_gpu_processes()
        except Finished:
            pass
        except (ChildTimeout, ChildGone) as exc:
            self._stopped(exc)
        except Exception as exc:  # a grader bug (or a broken reference): say so, never a traceback
            self.child.kill()
            self._grader_error(exc, traceback.format_exc())
        finally:
            self.phases.update(self.link.compiles.phases())
            self.close()

    def _end_gpu_processes(self) -> None:
        """Once the grade is decided (its verdict in, or a check failed: Finished), its child and its reference process
        end here, and are reaped, while the grade still holds the GPU (gpu_lock): tearing down a CUDA context stalls
        the other processes' kernels for a moment, and the next grade to time would time through it. A child that
        stopped answering is left to `_stopped`, which reads how it ended; a wrapped one (ncu) to the grade, which
        lets the wrapper write its report."""
        self.close()
        if self.child.wrapped:
            return
        self.child.kill()
        self.child.proc.wait()

    def _start(self, job: Job) -> float:
        """Wait for the child to be ready, then send it the job; returns when the job was sent."""
        ready = self.child.wait_ready()
        self.feed.child_ready.set()
        self.result.device = cuda_cpu.DEVICE if job.emulated else ready.get("device", {})
        started = time.monotonic()
        self.phases["start"] = round(started - self.child.started, 3)
        self.link.start(job, started)
        return started

    def _stopped(self, exc: ChildTimeout | ChildGone) -> None:
        """The child stopped answering: a start that failed, a trial that never came, or the learner's code."""
        if self.child.ready is None:  # it never became ready: no learner code had run
            self.result.add(not_started(self.child, exc))  # its output: the result's
        elif self.feed.producer_error is not None:  # the child waited for a trial that never came: not its fault
            self._grader_error(*self.feed.producer_error)
        else:
            self.link.died(timed_out=isinstance(exc, ChildTimeout))

    def _numerics_and_timing(self, job: Job) -> None:
        if self._numerics() and self.timing:
            self.before_timing()  # e.g. the sanitizer's processes end: nothing else on the GPU while timing
            self._timing(job)
        else:
            self.child.send({Order.STOP: True})
            self._add_if(memory.not_measured(self.spec, on_gpu=self.child.device == "cuda"))

    def prefetch(self, job: Job) -> None:
        """Start drawing the large trials and the timed sizes, before the build (input_feed.InputFeed.prefetch)."""
        timed = (
            [(f"t{index}", case, self._timed_seed(index)) for index, case in self._timed_cases(job)]
            if self.timing
            else []
        )
        self.feed.prefetch(self._trials(), timed)

    def close(self, wait_for_draws: bool = False) -> None:
        """End the threads and the GPU process (also for a grade that ends before run(): a failed build)."""
        self.feed.close(wait_for_draws)

    def _load(self, job: Job, started: float) -> None:
        try:
            self.link.expect_loaded(started)
        finally:  # a file that fails to load spent its seconds loading too
            self._mark("load", started)
        self.result.add(Check(CheckName.LOAD, PASSED, f"{Path(job.learner).name}: `{self.variant.entry}` loaded"))

    def load_limit_s(self) -> float:
        """Loading runs no interpreted kernel, so it gets the spec's own timeout_s, not the interpreter's multiple
        of it (grade.INTERPRETER_TIMEOUT_FACTOR): a hang at import is stopped at the limit the spec states."""
        return min(self.timeout_s, self.variant.timeout_s or self.timeout_s)

    def _mark(self, phase: str, since: float) -> None:
        self.phases[phase] = round(time.monotonic() - since, 3)

    @contextlib.contextmanager
    def _phase(self, phase: str):
        """The seconds of the block as `phase`, however it ends (a failed check ends a grade by raising Finished):
        a failing grade's phases add up to its wall time as a passing one's do."""
        started = time.monotonic()
        try:
            yield
        finally:
            self._mark(phase, started)

    def _grader_error(self, exc: BaseException, trace: str) -> None:
        self.result.add(
            gpushare.full_check(exc)
            or Check(
                CheckName.GRADER,
                ERROR,
                f"internal grader error: {type(exc).__name__}: {exc} — please "
                "report it to your instructor with this output",
                {"traceback": trace[-4000:]},
            )
        )

    def _add_if(self, check: Check | None) -> None:
        if check is not None:
            self.result.add(check)

    # --- numerics ----------------------------------------------------------------------------------
    def _trials(self) -> list[Trial]:
        """(case index, case, trial, trial seed) for every trial this machine runs."""
        gpu = self.child.device == "cuda"
        return [
            (index, case, trial, self.seed + 1000 * index + trial)
            for index, case in enumerate(self.spec.cases)
            if (gpu or not case.gpu_only) and self.variant.accepts(case)
            for trial in range(self.spec.trials_for(case))
        ]

    def _numerics(self) -> bool:
        with self._phase("numerics"):  # a failing trial ends the phase too: its seconds are still the grade's
            trials = self._trials()
            if self._compiles_first():
                self.child.send({Order.COMPILE_CASES: sorted({index for index, *_ in trials})})
                self._while_compiling()
            self.feed.start(trials, self._label)
            for k, (index, case, trial, trial_seed) in enumerate(trials):
                event = self.link.expect(Event.TRIAL)
                self.feed.next_slot()
                self._judge_trial(event, case, trial, k)
            event = self.link.expect(Event.TRIALS_DONE)
        if event.get("borrowed"):
            self.link.fail(
                CheckName.INTEGRITY,
                "your code loaded the instructor's solution "
                f"({', '.join(event['borrowed'])}): the kernel must be your own",
                code=Code.SOLUTION_LOADED,
            )
        self.result.add(self._numerics_passed(trials))
        self.result.add(
            Check(CheckName.INTEGRITY, PASSED, "no torch compute operators called, inputs untouched, no cached results")
        )
        return self._add_op_checks()

    def _numerics_passed(self, trials: list[Trial]) -> Check:
        gpu = self.child.device == "cuda"
        skipped = 0 if gpu else sum(1 for c in self.spec.cases if c.gpu_only and self.variant.accepts(c))
        note = f"; {skipped} GPU-only case(s) skipped (no GPU)" if skipped else ""
        note += _other_dtypes_note(self.spec, self.variant)
        ran = len({index for index, *_ in trials})
        return Check(
            CheckName.NUMERICS,
            PASSED,
            f"{ran} case(s), {len(trials)} trials matched the float64 reference{note}",
            {"cases": ran, "trials": len(trials), "skipped_cases": skipped},
        )

    def _add_op_checks(self) -> bool:
        """The registered operator's checks ([checks] in spec.toml), once numerics passed; False if one failed."""
        if self.spec.checks is None:
            return True
        checks = op_checks.verdicts(self.spec, self.op_judged)
        for check in checks:
            self.result.add(check)
        return not any(c.status == FAILED for c in checks)

    def _timed_seed(self, index: int) -> int:
        return self.seed + 10**6 + index

    def _label(self, case: Case, trial: int) -> str:
        return f"{case.label()}, trial {trial + 1}"

    def _outputs(self, event: dict, case: Case) -> list:
        got = []
        for spec_out in self.spec.outputs:
            meta = event.get("outputs", {}).get(spec_out.name)
            try:
                tensor = load_tensor(meta, expected_numel=math.prod(shape_of(spec_out, case)))
            except (TypeError, KeyError, ValueError, OSError) as exc:
                self.link.fail(
                    CheckName.NUMERICS,
                    f"{case.label()}: output {spec_out.name} did not come back from your run ({exc})",
                    code=Code.BAD_RETURN,
                )
            got.append(tensor.reshape(shape_of(spec_out, case)) if self.variant.returns_outputs else tensor)
            Path(meta["path"]).unlink(missing_ok=True)
        return got

    def _judge_output(self, spec_out, out, ref, tol, label: str, k: Any, case: Case):
        """compare(), or the exercise's property check for an output whose answer is not unique."""
        return judge_output(
            self.spec,
            spec_out,
            out,
            ref,
            tol,
            label,
            inputs=self.feed.inputs_of(k),
            params=case.params,
            device=self.result.device,
        )

    @staticmethod
    def _outside_message(label: str, case: Case, names: list[str]) -> str:
        """A store outside an output: past its end, or (an output that is a row slice) into the gaps between rows."""
        sliced = [n for n in names if case.outputs.get(n, {}).get("layout") == "row_slice"]
        if sliced:  # the classic cause there is a row stride taken to be the row's width
            return (
                f"{label}: your code wrote outside {', '.join(names)}: {', '.join(sliced)} is a row slice of a "
                "wider matrix here, and a store landed past its end or in the gap after one of its rows — step "
                "from row to row by the row stride (leading dimension) you are given, not by the number of "
                "columns, and check the index before every store"
            )
        return (
            f"{label}: your code wrote past the end of {', '.join(names)} (into the poisoned guard after it): "
            "threads past the last element stored anyway — check the index before every store (if (i < n); in "
            "2-D if (row < rows && col < cols); in Triton mask= on tl.store)"
        )

    def _judge_evidence(self, event: dict, case: Case, trial: int, label: str) -> None:
        """The child's integrity evidence of one trial: torch computing, inputs changed, stores outside."""
        bad_ops = integrity.forbidden_ops(set(event.get("ops", [])))
        if bad_ops:
            self.link.fail(
                CheckName.INTEGRITY,
                f"{label}: your code called torch's {', '.join(bad_ops[:5])}: the result "
                "must come from your own kernel, not from PyTorch (allowed: allocation, views, copies)",
                code=Code.TORCH_COMPUTE,
                ops=bad_ops,
            )
        if event.get("modified"):
            self.link.fail(
                CheckName.INTEGRITY,
                f"{label}: your code modified its input "
                f"{', '.join(event['modified'])} in place; inputs are read-only — write only to the outputs",
                code=Code.INPUT_MODIFIED,
            )
        if event.get("outside"):
            self.link.fail(
                CheckName.NUMERICS,
                self._outside_message(label, case, event["outside"]),
                code=Code.OUT_OF_BOUNDS,
                case=case.params,
                trial=trial + 1,
                outputs=event["outside"],
            )

    def _judge_trial(self, event: dict, case: Case, trial: int, k: int) -> None:
        label = self._label(case, trial)
        self._judge_evidence(event, case, trial, label)
        got = self._outputs(event, case)
        refs = self.feed.expected(k)
        previous = self.feed.expected(k - 1) if trial > 0 else None
        for i, (spec_out, out, ref) in enumerate(zip(self.spec.outputs, got, refs)):
            tol = self.spec.tolerance_of(case, spec_out)
            comparison = self._judge_output(spec_out, out, ref, tol, label, k, case)
            if comparison.ok:
                continue
            if previous is not None and spec_out.check is None and looks_cached(out, previous[i], ref, tol):
                self.link.fail(
                    CheckName.INTEGRITY,
                    f"{label}: {spec_out.name} equals the answer for the previous "
                    "trial's inputs — is your code caching results between calls?",
                    code=Code.CACHED_RESULT,
                )
            self.link.fail(
                CheckName.NUMERICS,
                comparison.message,
                code=comparison.code,
                case=case.params,
                trial=trial + 1,
                **comparison.details,
            )
        self.feed.forget(k)
        if k in self.feed.op_refs:
            self.op_judged.append(
                op_checks.judge_trial(
                    self.spec,
                    self.variant,
                    case,
                    label,
                    event,
                    refs,
                    self.feed.op_refs.pop(k).result(),
                    self.spec.tolerance_of(case),
                )
            )

    # --- timing -------------------------------------------------------------------------------------
    def _timed_cases(self, job: Job) -> list[tuple[int, Case]]:
        """(index in [performance.cases], case) of the sizes to run: all of them, or with job.timed_sizes =
        "verdict" (kcourse grade without --full, kcourse watch) only the last, the size the speed verdict is taken
        at, with the same budget: the verdict is as trustworthy, and the other sizes' inputs, references and runs
        are saved. An exercise with a memory bar runs every size (its O(N) check needs the long, thin ones),
        but times only the last in that mode (`memory_only`)."""
        indexed = list(enumerate(self.spec.performance.cases))
        verdict_only = job.timed_sizes == "verdict" and self.spec.performance.max_extra_bytes is None
        return indexed[-1:] if verdict_only else indexed

    def _timing(self, job: Job) -> None:
        """The timed sizes: their inputs and references first (phase "timed_inputs": what is left of drawing them
        after the numerics, and, for an exercise whose references are the GPU process's, computing those), then
        the child's runs, the probe and the memory checks (phase "timing")."""
        with self._phase("timed_inputs"):
            timed = self._timed_cases(job)
            messages = self._timing_messages(job, timed)
            self.link.deadline = max(self.link.deadline, time.monotonic() + self.timeout_s)
            self.feed.wait_for_timed([f"t{index}" for index, _ in timed])
        self.phases.update(self.feed.gpu_seconds())  # what that wait was made of (shown beside the phases)
        with self._phase("timing"):
            self._time_sizes(timed, messages)

    def _time_sizes(self, timed: list[tuple[int, Case]], messages: list[dict[str, Any]]) -> None:
        self._stage_solution()
        first = sum(1 for m in messages if m["memory_only"])  # the sizes run for their memory alone come first
        compile_first = self._compiles_first() and first < len(messages)
        self.child.send({Order.TIME: messages, Order.COMPILE_FIRST: compile_first})
        records = [self._one_timed_case(index, case, untimed=True) for index, case in timed[:first]]
        if compile_first:
            self.child.send({Order.GO: True})
            self._while_compiling()
        with gpu_lock.exclusive(self.child.pid):  # timing: no other grade's work on the GPU, the CPU first
            self.link.deadline = max(self.link.deadline, time.monotonic() + self.timeout_s)  # the lock's wait is ours
            records += [self._one_timed_case(index, case) for index, case in timed[first:]]
            self.result.timings = records
            check = speed.verdict(
                self.spec, self.variant, records[-1] if records else None, self.calibration, self.result.device
            )
            if records and messages[-1]["probe"]:
                check = self._cross_check_probe(records[-1]) or check
        self.result.add(check)
        self._add_if(memory.verdict(self.spec, records))

    def _compiles_first(self) -> bool:
        """Whether the child compiles before its trials and before its timed sizes, launching nothing
        (child/compile_steps.py): where its code compiles when it first runs (Triton), on a GPU."""
        return compile_steps.compile_first() and self.variant.kind_of.compiles_when_run and self.child.device == "cuda"

    def _while_compiling(self) -> None:
        """The child's compile pass (Order.COMPILE_CASES or COMPILE_FIRST sent) awaited with this grade's shared hold
        let go (gpu_lock.step_out): other grades' timers need not wait for CPU work. Kept while its compute-sanitizer
        runs on the GPU. The hold is taken again after, the child's deadline stopped while that waits."""
        rejoin = gpu_lock.step_out() if self.may_pause() else lambda failed=None: None
        compiled: dict[str, Any] = {}
        try:
            compiled = self.link.expect(Event.COMPILED)
        finally:
            with self.link.paused():
                rejoin(compiled.get("failed"))  # what ended the compiles early: the lock's log says (gpu_lock_report)

    def _cross_check_probe(self, record) -> Check | None:
        return probe.cross_check(self.link, self.spec, self.variant, self.result, record)

    def _stage_solution(self) -> None:
        """The solution, copied where the boxed child can read it, now that no trial remains (grade._box_the_child)."""
        for real, staged in self.staged_solution.items():
            staged.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(real, staged)

    def _timing_messages(self, job: Job, timed: list[tuple[int, Case]]) -> list[dict[str, Any]]:
        """What the child is told to time, a message per size."""
        messages = []
        for index, case in timed:
            metas, _ = self.feed.take(f"t{index}", case, self._timed_seed(index), 0)
            last = index == len(self.spec.performance.cases) - 1
            messages.append(
                {
                    "case": index,
                    "k": f"t{index}",
                    "inputs": metas,
                    "probe": last,
                    "budget_s": BUDGET_S if last else BUDGET_S / 3,  # the verdict size gets most runs
                    # kcourse watch: PyTorch is not timed beside you (the verdict does not use it):
                    # two contestants take two thirds of three's time; a one-shot grade asks for it
                    "anchor": job.anchor,
                    "memory_only": memory_only(self.spec, job, index),
                }
            )
        return messages

    def _one_timed_case(self, index: int, case: Case, untimed: bool = False):
        """The record of one [performance] size; `untimed`: run for its memory alone (`memory_only`)."""
        self.child.send({Order.GO: True})  # the child waits for it: events are read as they happen, not buffered
        self.link.expect(Event.TIMING_START)
        begun = time.monotonic()
        event = self.link.expect(Event.TIMED)
        measured = event.get("measured", {})
        if not untimed:
            self._check_claim(measured, time.monotonic() - begun)
        got = self._outputs(event, case)
        which = "your run at this size" if untimed else "your last timed run"
        for spec_out, out, ref in zip(self.spec.outputs, got, self.feed.expected(f"t{index}")):
            tol = self.spec.tolerance_of(case, spec_out)
            comparison = self._judge_output(spec_out, out, ref, tol, f"timed size {case.label()}", f"t{index}", case)
            if not comparison.ok:
                self.link.fail(
                    CheckName.NUMERICS, f"{comparison.message} (the output of {which})", code=comparison.code
                )
        self.feed.forget(f"t{index}")
        if untimed:
            record = Timing(case=case.label())
        else:
            record = speed.timing_record(self.spec, self.variant, case, measured, self.result.device)
        return memory.annotate(record, self.spec, case, event.get("memory"), element_size(case.dtype))

    def _check_claim(self, measured: dict, wall: float) -> None:
        """The child's figures are there and could have happened in the time the parent saw go by."""
        if "learner" not in measured:
            self.link.fail(
                CheckName.INTEGRITY,
                "the timing of your run came back without your kernel's figures",
                code=Code.TIMING_FORGED,
            )
        claim = speed.implausible_claim(measured, wall)
        if claim:
            self.link.fail(CheckName.INTEGRITY, claim + ": was the timer patched?", code=Code.TIMING_FORGED)


def memory_only(spec: ExerciseSpec, job: Job, index: int) -> bool:
    """Whether timed size `index` is run for the memory check alone: the learner's kernel once to compile, once
    measured, its outputs checked; no solution, no PyTorch, no timer. So are the sizes before the last of an
    exercise with a memory bar in a grade that times only the verdict's size."""
    last = index == len(spec.performance.cases) - 1
    return job.timed_sizes == "verdict" and not last and spec.performance.max_extra_bytes is not None


def _other_dtypes_note(spec: ExerciseSpec, variant: Variant) -> str:
    """The cases this version does not take (their dtype is another version's), said rather than hidden."""
    others = sorted({c.dtype for c in spec.cases if not variant.accepts(c)})
    if not others:
        return ""
    count = sum(1 for c in spec.cases if not variant.accepts(c))
    return (
        f"; {count} {'/'.join(others)} case(s) are for the other version(s), this one takes {'/'.join(variant.dtypes)}"
    )
