"""The judge's inputs: each trial's inputs drawn from its seed, written to the child's folder, and their float64
reference started, ahead of the child (grader/run/judge.py reads the references when the child's outputs come).

Threads: a producer draws and sends the trials, at most AHEAD ahead of the trial being judged; a reference
thread computes the CPU references; a draw thread draws the large trials and the timed sizes from the start of
the grade (`prefetch`, while nvcc builds and the child starts). Heavy references run in a GPU process of their
own (heavy.py). Learner code never runs here."""

from __future__ import annotations

import contextlib
import math
import threading
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, ContextManager

from grader.checks import op_checks
from grader.checks.checking import narrowable, reference_outputs
from grader.checks.inputs import dtype_of, element_size, generate, save_inputs, save_tensor, shape_of
from grader.core import gpu_lock
from grader.core.spec import Case, ExerciseSpec, Variant
from grader.core.vocabulary import Order
from grader.run import heavy
from grader.run.sandbox import Child

AHEAD = 2  # trials drawn ahead of the child: enough to hide drawing, little memory held
# A trial whose inputs are this large (reduction's 1 GB at 2^28) is drawn from the start of the grade on a
# thread of its own: drawing and writing it takes about a second, which the build and the first trials hide.
# What is drawn ahead waits on disk (and in memory, where the judge needs the inputs again): at most
# PREFETCH_BUDGET bytes of it, the rest drawn when its turn comes.
PREFETCH_BYTES = 64 * 2**20
PREFETCH_BUDGET = 3 * 2**30

Trial = tuple[int, Case, int, int]  # (case index, case, trial, trial seed)


class InputFeed:
    def __init__(self, spec: ExerciseSpec, variant: Variant, child: Child, reference: Callable):
        self.spec, self.variant, self.child, self.reference = spec, variant, child, reference
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="kcourse-reference")
        self.drawer = ThreadPoolExecutor(1, thread_name_prefix="kcourse-draw")
        self.child_ready = threading.Event()  # the GPU process's work waits for it (heavy.GpuCompute's gate)
        if child.ready is not None:
            self.child_ready.set()
        self.gpu = (
            heavy.GpuCompute(spec, variant.reference, child.visible_devices, self.child_ready)
            if heavy.wanted(spec)
            else None
        )
        self.stop = threading.Event()
        self.slots = threading.Semaphore(AHEAD)
        self.refs: dict[Any, Future] = {}  # trial k or "t{index}" -> its reference's outputs (read by .result())
        self.op_refs: dict[Any, Future] = {}  # the reference's gradients for the trials running [checks] (op_checks.py)
        # a trial's inputs, kept until it is judged only where an output is judged by a property check
        self.checked_inputs: dict[Any, dict] = {}
        self.keep_inputs = any(t.check for t in spec.outputs)
        self.drawn: dict[Any, Future] = {}  # trial k or "t{index}" -> (file metadata, inputs), drawn ahead
        self.producer_error: tuple[BaseException, str] | None = None  # (error, traceback) of the producer thread
        # Where grades share the GPU (gpu_lock): whether this grade's numerics may pause for other grades' timers (not
        # while its sanitizer runs on the GPU), and what stops the child's deadline meanwhile (ChildLink.paused)
        self.may_pause: Callable[[], bool] = lambda: False
        self.pausing: Callable[[], ContextManager] = contextlib.nullcontext
        self.judged = 0  # trials whose outputs came back
        self._judged_more = threading.Condition()

    # --- the producer --------------------------------------------------------------------------------
    def start(self, trials: list[Trial], label: Callable[[Case, int], str]) -> None:
        """Draw, write and send each trial on the producer thread; the judge frees a slot per trial it takes."""
        threading.Thread(target=self._produce, args=(trials, label), daemon=True).start()

    def next_slot(self) -> None:
        """A trial's outputs came: the producer may send one more."""
        with self._judged_more:
            self.judged += 1
            self._judged_more.notify_all()
        self.slots.release()

    def _produce(self, trials: list[Trial], label: Callable[[Case, int], str]) -> None:
        """A grading that ended early stops it (its errors then mean nothing); any other error is the grader's:
        kept for the judge to report, and the child stopped, so the judge is not left waiting for a trial that
        was never sent (which would read as the learner's hang)."""
        try:
            self._produce_all(trials, label)
        except Exception as exc:
            if not self.stop.is_set():
                self.producer_error = (exc, traceback.format_exc())
                self.child.kill()

    def _produce_all(self, trials: list[Trial], label: Callable[[Case, int], str]) -> None:
        for k, (index, case, trial, trial_seed) in enumerate(trials):
            self.slots.acquire()
            if self.stop.is_set():
                return
            metas, inputs = self.take(k, case, trial_seed, trial)
            self._pause_for_timers(k)
            self.child.send(
                {
                    "case": index,
                    "k": k,
                    "label": label(case, trial),
                    "inputs": metas,
                    "watch_ops": trial == 0,
                    **self._op_checks_request(k, case, trial, trial_seed, inputs),
                }
            )
        self.child.send({Order.END_TRIALS: True})

    def _pause_for_timers(self, k: int) -> None:
        """Before trial k, where other grades' timers wait in a batch for this grade's shared hold: once the child
        has handed back every trial sent (its GPU idle), they go first; the child's deadline stops meanwhile."""
        if not self.may_pause() or not gpu_lock.timers_waiting():
            return
        with self._judged_more:
            self._judged_more.wait_for(lambda: self.judged >= k or self.stop.is_set())
        if not self.stop.is_set():
            with self.pausing():
                gpu_lock.let_timers_go()

    # --- drawing -------------------------------------------------------------------------------------
    def prefetch(self, trials: list[Trial], timed: list[tuple[Any, Case, int]]) -> None:
        """Start drawing, before the build: the trials of PREFETCH_BYTES or more and those whose reference
        is the GPU process's (a GFLOP or more: the one wait numerics would otherwise have), then the timed
        sizes (key, case, seed), as far as PREFETCH_BUDGET goes."""
        wanted = [
            (k, case, seed, trial)
            for k, (_, case, trial, seed) in enumerate(trials)
            if input_bytes(self.spec, case) >= PREFETCH_BYTES or self.on_gpu(case)
        ]
        wanted += [(key, case, seed, 0) for key, case, seed in timed]
        budget = PREFETCH_BUDGET
        for k, case, seed, trial in wanted:
            size = input_bytes(self.spec, case)
            if size <= budget:
                budget -= size
                if k not in self.drawn:  # a judge made ahead (grade.judge_ahead) has drawn it already
                    self.drawn[k] = self.drawer.submit(self._draw, case, seed, trial, k, True)

    def take(self, k: Any, case: Case, seed: int, trial: int) -> tuple[dict, dict]:
        """(file metadata, inputs) of trial k: the prefetched draw, or drawn now."""
        future = self.drawn.pop(k, None)
        metas, inputs = future.result() if future is not None else self._draw(case, seed, trial, k)
        if self.keep_inputs:
            self.checked_inputs[k] = inputs
        return metas, inputs

    def _draw(self, case: Case, seed: int, trial: int, k: Any, ahead: bool = False) -> tuple[dict, dict]:
        """Draw a trial's inputs, write them for the child and start its reference. Ahead of time the
        reference is computed on this thread, not queued before the small trials' on the reference thread."""
        if self.on_gpu(case):
            return self._draw_on_gpu(case, seed, trial, k)
        inputs = generate(self.spec, case, seed, trial)
        metas = save_inputs(inputs, self.child.dir, k)
        if not ahead:
            self.refs[k] = self.pool.submit(reference_outputs, self.reference, self.spec, inputs, case.params)
            return metas, inputs
        self.refs[k] = _done(lambda: reference_outputs(self.reference, self.spec, inputs, case.params))
        return metas, inputs if self._needed(case, trial) else {}  # else not held while it waits

    def _draw_on_gpu(self, case: Case, seed: int, trial: int, k: Any) -> tuple[dict, dict]:
        """A heavy case: drawn, written for the child and its reference computed, all in the GPU process (heavy.py);
        its inputs cross to this one only where the judge needs them again."""
        keep, narrow = self._needed(case, trial), narrowable(self.spec, case)
        metas, inputs = self.gpu.draw(case, seed, trial, self.child.dir, k, keep, narrow)
        self.refs[k] = self.gpu.reference_of_drawn(self.child.dir, k)
        return metas, inputs

    def _needed(self, case: Case, trial: int) -> bool:
        """Whether the judge reads a trial's inputs again: a property check, or the operator's checks."""
        return self.keep_inputs or op_checks.wanted(self.spec, case, trial)

    def _op_checks_request(self, k: int, case: Case, trial: int, seed: int, inputs: dict) -> dict:
        """For a trial that runs the operator checks: the gradients fed backward (their reference's on the way)."""
        if not op_checks.wanted(self.spec, case, trial):
            return {}
        grads = op_checks.draw_grad_outputs(self.spec, case, seed)
        self.op_refs[k] = self.pool.submit(
            op_checks.reference_gradients, self.reference, self.spec, inputs, grads, case.params
        )
        return {
            "op_checks": {
                "grad_outputs": [save_tensor(g, self.child.dir / f"in-{k}-grad{i}.bin") for i, g in enumerate(grads)]
            }
        }

    def on_gpu(self, case: Case) -> bool:
        """A heavy case of an exercise whose spec asks for references on the GPU (heavy.py); the small
        ones stay on the CPU, so the first trials do not wait for the GPU process to start."""
        return self.gpu is not None and heavy.worth_it(self.spec, self.variant, case)

    # --- what the judge reads ------------------------------------------------------------------------
    def expected(self, k: Any) -> list:
        """Trial k's reference outputs (waits for them)."""
        return self.refs[k].result()

    def inputs_of(self, k: Any) -> dict | None:
        """Trial k's inputs where a property check needs them (keep_inputs), else None."""
        return self.checked_inputs.get(k)

    def forget(self, k: Any) -> None:
        """Trial k is judged: its inputs are held no longer."""
        self.checked_inputs.pop(k, None)

    def gpu_seconds(self) -> dict[str, float]:
        """Where the inputs and references made in the GPU process went (heavy.GpuCompute.busy); nothing
        without that process."""
        return {} if self.gpu is None else self.gpu.busy()

    def wait_for_timed(self, keys: list[str]) -> None:
        """The timed sizes' references computed: nothing of ours on the GPU while the child times."""
        if self.gpu is not None:
            for key in keys:
                self.refs[key].result()

    def close(self, wait_for_draws: bool = False) -> None:
        """End the threads and the GPU process. `wait_for_draws`: until a draw under way has written its files
        (another judge will write the same names in this child's folder)."""
        self.stop.set()
        self.child_ready.set()  # a draw waiting to use the GPU process goes on, and finds it shut down
        with self._judged_more:
            self._judged_more.notify_all()  # a producer waiting to pause sees `stop` and ends
        for _ in range(AHEAD):
            self.slots.release()  # a producer waiting for a slot sees `stop` and ends
        self.drawer.shutdown(wait=wait_for_draws, cancel_futures=True)  # a failure's verdict does not wait for a draw
        self.pool.shutdown(wait=True, cancel_futures=True)
        if self.gpu is not None:
            self.gpu.shutdown()


def input_bytes(spec: ExerciseSpec, case: Case) -> int:
    """Bytes of one trial's inputs at `case`."""
    return sum(math.prod(shape_of(t, case)) * element_size(dtype_of(t, case)) for t in spec.inputs)


def _done(compute: Callable[[], Any]) -> Future:
    """A future holding compute()'s answer (or its exception), computed now."""
    future: Future = Future()
    try:
        future.set_result(compute())
    except Exception as exc:  # raised again where the reference is read, as the reference thread's would be
        future.set_exception(exc)
    return future
