"""Inputs and references too heavy for the CPU, made on the GPU in a trusted process of their own.

A float64 attention backward at its timed sizes is about 3 TFLOP: minutes on the CPU, a fraction of a
second on an H100's float64 units. The grader itself never opens CUDA (the learner's child owns the GPU,
and a context in the parent would outlive its crashes), so an exercise whose spec says
`reference_device = "cuda"` gets this one more process, running only kit code: it applies the inputs'
transforms (an attention forward) and computes the float64 references there, for the cases heavy enough
to be worth it (worth_it: the timed sizes; the small numerics cases stay on the CPU, ready at once). The
random draws stay on the CPU, so the values are the same on every machine; only the float64 arithmetic
moves. The judge waits for the timed sizes' references before timing starts: nothing of ours runs on the
GPU while it is timed; where several grades share a GPU (the kit's parallel tests), this process holds the GPU lock
beside its grade, so neither does another grade's (core/gpu_lock.py).
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from grader.core import gpu_lock
from grader.core.spec import Case, ExerciseSpec, Variant

if TYPE_CHECKING:  # torch is imported where it is used: `kcourse grade` starts this process before its own import
    import torch

_references: dict[str, Any] = {}  # per process: reference.py loaded once
# In the process: the references' work for the inputs written for a child, by (folder, key), until collected
_drawn: dict[tuple[str, Any], Any] = {}
_references_thread: ThreadPoolExecutor | None = None  # in the process, with GpuCompute.beside
# Pools started by `kcourse grade` before the grader imported torch (start_early), by (folder, function, GPUs)
_early: dict[tuple[str, str, str | None], tuple[ProcessPoolExecutor, Future]] = {}
# A case whose work is under this goes to the CPU as before: its float64 reference takes tens of ms there, less
# than the GPU process's start (spawn, torch, a CUDA context: seconds), which the first trials would wait for.
HEAVY_FLOPS = 1e9
REAP_LIMIT_S = 10.0  # the longest a grade sharing the GPU waits for its GPU process to end (_terminate)
GATE_LIMIT_S = 180.0  # the longest a grading child may take to get ready (sandbox.START_LIMIT_S)
# "1": the process computes each case's references on a thread of its own, beside the next case's draws (which
# otherwise wait for them); an experiment until a GPU measures it (scripts/device_tier.sh)
BESIDE_ENV = "KCOURSE_REFERENCES_BESIDE"


class GpuCompute:
    """One spawned process (CUDA cannot be forked) that draws transformed inputs and computes references.
    `visible_devices`: the grading child's CUDA_VISIBLE_DEVICES, so the references run on the child's GPU
    (grade-batch and validate grade on several GPUs from one process; on another GPU they would share it
    with a grade being timed there)."""

    def __init__(
        self,
        spec: ExerciseSpec,
        reference: str = "reference",
        visible_devices: str | None = None,
        gate: threading.Event | None = None,
    ):
        """`gate`: set once the grading child is ready. Until then it may be measuring this GPU's copy and
        matmul ceilings (worker.device_ceilings), which work of ours beside it would make read low."""
        import torch.multiprocessing  # noqa: F401  (registers the reductions that pass tensors through shared memory)

        self.spec, self.reference_name = spec, reference  # the function of reference.py (spec.Variant.reference)
        self.gate = gate
        # Seconds the process worked, by task: where a heavy grade's wait for its timed sizes goes (`busy`)
        self._busy = {"gpu_inputs": 0.0, "input_files": 0.0, "gpu_references": 0.0}
        self._busy_lock = threading.Lock()
        self.beside = os.environ.get(BESIDE_ENV) == "1"
        early = _early.pop(_early_key(spec, reference, visible_devices), None)
        self.executor, self.warm_up = early or _start(spec, reference, visible_devices)

    def draw(
        self, case: Case, seed: int, trial: int, folder: Path, key: Any, keep: bool, narrow: list[bool] | None = None
    ) -> tuple[dict, dict]:
        """A case's inputs drawn and written for the child (`folder`/in-<key>-<name>.bin) in the process itself:
        (the files' metadata, the inputs where `keep`, else {}). They stay there for their references
        (`reference_of_drawn`; `narrow` as checking.narrowable), so a timed size's gigabyte of inputs never
        crosses to the grader and back."""
        self._wait_for_the_gate()
        args = (self.spec, case, seed, trial, str(folder), key, keep, self.reference_name, narrow, self.beside)
        (metas, inputs, files_s), seconds = self.executor.submit(_timed, _draw_for_child, *args).result()
        self._count("gpu_inputs", seconds - files_s)
        self._count("input_files", files_s)
        return metas, inputs

    def reference_of_drawn(self, folder: Path, key: Any) -> Future | _Deferred:
        """The float64 references of the inputs `draw` made for `key`, those it was told to narrow handed back as
        float32; the process then lets the inputs go. With `beside`, asked for only when read: computed in the
        process beside its next draws, they would otherwise be waited for ahead of those draws."""

        def collect() -> Future:
            return self._untimed(self.executor.submit(_reference_of_drawn, str(folder), key), "gpu_references")

        return _Deferred(collect) if self.beside else collect()

    def busy(self) -> dict[str, float]:
        """Seconds the process spent so far drawing inputs (`gpu_inputs`: the draws, on its CPU threads, and their
        transforms), writing them for the child (`input_files`) and computing references (`gpu_references`), each
        counted in the process itself: what a wait for them was made of, the rest being the queue and the
        crossings between the processes."""
        with self._busy_lock:
            return {name: round(seconds, 3) for name, seconds in self._busy.items()}

    def _count(self, name: str, seconds: float) -> None:
        with self._busy_lock:
            self._busy[name] += seconds

    def _untimed(self, timed: Future, name: str) -> Future:
        """A future of the task's answer alone, its seconds counted under `name` once it is done."""
        answer: Future = Future()

        def done(finished: Future) -> None:
            try:
                value, seconds = finished.result()
            except BaseException as exc:  # a broken or shut-down pool, a cancelled task: raised where it is read
                answer.set_exception(exc)
                return
            self._count(name, seconds)
            answer.set_result(value)

        timed.add_done_callback(done)
        return answer

    def _wait_for_the_gate(self) -> None:
        if self.gate is not None:
            self.gate.wait(GATE_LIMIT_S)  # a child that never gets ready ends the grade, and close() opens the gate

    def shutdown(self) -> None:
        _terminate(self.executor)


def start_early(spec: ExerciseSpec, reference: str, visible_devices: str | None) -> None:
    """Start the GPU process for the grade about to run, before the grader imports torch (`kcourse grade`),
    so that its start-up (spawn, torch, a CUDA context: seconds) overlaps the grader's and the child's
    rather than following them; the grade's GpuCompute takes it up. Nothing where it is not wanted."""
    if wanted(spec):
        _early[_early_key(spec, reference, visible_devices)] = _start(spec, reference, visible_devices)


def discard_early() -> None:
    """End a process start_early made for a grade that never got to its numerics (a missing file, a build
    that failed before the judge was made)."""
    while _early:
        _terminate(_early.popitem()[1][0])


def _early_key(spec: ExerciseSpec, reference: str, visible_devices: str | None) -> tuple[str, str, str | None]:
    return str(spec.folder), reference, visible_devices


def _start(spec: ExerciseSpec, reference: str, visible_devices: str | None) -> tuple[ProcessPoolExecutor, Future]:
    """The pool and its warm-up, submitted at once: spawning, importing torch and opening a CUDA context take
    seconds, which then pass while the child starts and nvcc builds (or, in watch, while the learner edits)."""
    executor = ProcessPoolExecutor(
        1, mp_context=multiprocessing.get_context("spawn"), initializer=_see_only, initargs=(visible_devices,)
    )
    return executor, executor.submit(_warm_up, spec, reference)


def _terminate(executor: ProcessPoolExecutor) -> None:
    """Ends the process now, whatever it is doing. A grade that ends early (a build error) must not wait
    for the warm-up (seconds): the exit handlers of concurrent.futures join a pool's process after its
    running task. Its work is ours alone and none of it is wanted any more. Where grades share the GPU
    (gpu_lock), the process is also reaped, so that its CUDA context is gone before the grade lets go of the GPU."""
    processes = list((getattr(executor, "_processes", None) or {}).values())
    for process in processes:
        process.terminate()
    executor.shutdown(wait=False, cancel_futures=True)
    if gpu_lock.sharing():
        for process in processes:
            process.join(REAP_LIMIT_S)


def wanted(spec: ExerciseSpec) -> bool:
    """A GPU for this exercise's references: asked for by the spec, and one is here (seen by nvidia-smi)."""
    from grader.toolchain.build import gpu_arch

    return spec.reference_device == "cuda" and gpu_arch() is not None


def worth_it(spec: ExerciseSpec, variant: Variant, case: Case) -> bool:
    """Whether this case's inputs and reference are made in the GPU process: its work (the spec's flops
    expression) is HEAVY_FLOPS or more, or the spec gives no way to tell."""
    from grader.checks import speed
    from grader.core import exprs

    flops = speed.work_model(spec, variant)[0]
    if flops is None:
        return True
    try:
        return exprs.evaluate(flops, speed.expression_names(case)) >= HEAVY_FLOPS
    except Exception:  # an expression naming a parameter this case lacks: as the spec asked, on the GPU
        return True


def _see_only(visible_devices: str | None) -> None:
    """In the spawned process, before anything opens CUDA: the GPUs it may use."""
    import os

    if visible_devices is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = visible_devices


def _warm_up(spec: ExerciseSpec, function: str) -> None:
    """Everything the first reference needs but its arithmetic. A CUDA context's start is not work on the
    GPU's memory or SMs, so it need not wait for the gate. A failure here shows at the first real task."""
    import torch

    from grader.checks.inputs import generate  # noqa: F401  (imported now, not when the first case is drawn)

    try:
        _reference_function(spec, function)
        torch.zeros(1, device="cuda")
    except Exception:
        pass


def _out_of_memory() -> type[Exception]:
    """torch's out-of-memory error (torch.OutOfMemoryError since torch 2.1; the older name is the same class)."""
    import torch

    return getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)


def _reference_function(spec: ExerciseSpec, function: str):
    """reference.py's function, loaded once per process (by the warm-up, or by the first reference)."""
    from grader.checks.checking import load_reference

    key = f"{spec.folder}:{function}"
    if key not in _references:
        _references[key] = load_reference(spec.folder / "reference.py", function)
    return _references[key]


def _timed(function, *args) -> tuple[Any, float]:
    """function(*args) and the seconds it took, in the GPU process (its answers are on the CPU: nothing is left
    running on the GPU when it returns)."""
    started = time.perf_counter()
    return function(*args), time.perf_counter() - started


def _generate(spec: ExerciseSpec, case: Case, seed: int, trial: int) -> dict[str, torch.Tensor]:
    import torch

    from grader.checks.inputs import generate

    with gpu_lock.beside():  # where grades share the GPU, never while another one times
        try:
            return generate(spec, case, seed, trial, device="cuda")
        except _out_of_memory():
            torch.cuda.empty_cache()  # the GPU is full: the transforms on the CPU give the same inputs, slower
    return generate(spec, case, seed, trial)


def _draw_for_child(
    spec: ExerciseSpec,
    case: Case,
    seed: int,
    trial: int,
    folder: str,
    key: Any,
    keep: bool,
    function: str,
    narrow: list[bool] | None,
    beside: bool,
) -> tuple[dict, dict, float]:
    """GpuCompute.draw, in the process: (metadata, the inputs or {}, seconds spent writing the files). The
    references' work is kept for _reference_of_drawn, or started at once on the thread beside the draws."""
    from grader.checks.inputs import save_inputs

    inputs = _generate(spec, case, seed, trial)
    started = time.perf_counter()
    metas = save_inputs(inputs, Path(folder), key)
    files_s = time.perf_counter() - started
    work = functools.partial(_timed, _reference, spec, inputs, case.params, function, narrow)
    _drawn[(folder, key)] = _beside_the_draws().submit(work) if beside else work
    return metas, inputs if keep else {}, files_s


def _reference_of_drawn(folder: str, key: Any) -> tuple[list[torch.Tensor], float]:
    """(references, seconds computing them) of the inputs drawn for (folder, key), which are then let go."""
    work = _drawn.pop((folder, key))
    return work.result() if isinstance(work, Future) else work()


def _beside_the_draws() -> ThreadPoolExecutor:
    """In the process: the one thread that computes references beside the draws (GpuCompute.beside)."""
    global _references_thread
    if _references_thread is None:
        _references_thread = ThreadPoolExecutor(1, thread_name_prefix="kcourse-references")
    return _references_thread


class _Deferred:
    """A future's stand-in whose work is asked for when its result first is (`submit`: starts it, returns its
    Future); the one method InputFeed reads."""

    def __init__(self, submit: Callable[[], Future]):
        self._submit, self._future = submit, None
        self._lock = threading.Lock()

    def result(self, timeout: float | None = None) -> Any:
        with self._lock:
            if self._future is None:
                self._future = self._submit()
        return self._future.result(timeout)


def _reference(
    spec: ExerciseSpec,
    inputs: dict[str, torch.Tensor],
    params: dict[str, Any],
    function: str = "reference",
    narrow: list[bool] | None = None,
) -> list[torch.Tensor]:
    import torch

    from grader.checks.checking import narrowed, reference_outputs

    reference = _reference_function(spec, function)
    with gpu_lock.beside():  # where grades share the GPU, never while another one times
        try:
            return _on_the_gpu(reference, spec, inputs, params, narrow)
        except _out_of_memory():
            torch.cuda.empty_cache()  # the GPU is full (the learner's cached blocks, other grades): not an error
    on_cpu = {name: t.cpu() for name, t in inputs.items()}
    return narrowed(list(reference_outputs(reference, spec, on_cpu, params)), narrow)  # on the CPU: slower, as exact


def _on_the_gpu(
    reference, spec: ExerciseSpec, inputs: dict[str, torch.Tensor], params: dict[str, Any], narrow: list[bool] | None
) -> list:
    import torch

    from grader.checks.checking import narrowed, reference_outputs

    try:
        on_gpu = {name: t.to("cuda") for name, t in inputs.items()}
        return [o.cpu() for o in narrowed(reference_outputs(reference, spec, on_gpu, params), narrow)]
    finally:
        on_gpu = None
        torch.cuda.empty_cache()  # hand the memory back before the learner's code is timed
