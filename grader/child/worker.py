"""The child process that runs untrusted code: `python -m grader.child.worker EVENT_FD`.

It decides no verdict. It warms up (torch, the CUDA context), says "ready", reads its job, loads the
learner's entry point, and for each trial the parent sends it maps the parent's input files, runs the
learner's code on them and writes the outputs back as files, with what it saw on the way (torch
operators called, inputs changed, solution files opened). When asked, it times the learner, the
solution and torch side by side. The parent compares, judges and cross-checks; a learner's file that
patches this process can change what it reports, never the reference or the comparison.

Each step is announced as an event, so if the learner's code kills the process (segfault, hang, CUDA
fault) the parent can still say where it happened."""

from __future__ import annotations

import json
import os
import select
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import torch

from grader.checks import integrity, memory, op_checks
from grader.checks.inputs import (
    in_place_names,
    load_tensor,
    make_outputs,
    place,
    save_tensor,
    stand_ins,
    start_in_place,
    with_nan_tail,
    written_outside,
)
from grader.child import autotune_cache, compile_steps, interpreter, learner_errors, loading, staging
from grader.child.learner_errors import learner_error
from grader.child.orphan import exit_with_parent
from grader.core import gpushare, hostload  # memory binds torch's allocator statistics before learner code loads
from grader.core.job import Job
from grader.core.records import FAILED, Check
from grader.core.spec import Case, ExerciseSpec, load_spec
from grader.core.vocabulary import CheckName, Code, Event, Order

CUDA_HINT = (
    "Find the faulting access with: compute-sanitizer python -m grader grade ... "
    "(an index past the end of an array, or a host pointer used on the device?)"
)
PROBE_S = 0.05  # each contestant's wall-clock probe runs about this long


class Stop(Exception):
    """Grading cannot go on (the learner's code failed in a way that ends this run)."""


class Events:
    """JSON lines to the parent on the pipe it gave us."""

    def __init__(self, fd: int):
        self.fd = fd

    def send(self, event: str, **data: Any) -> None:
        line = (json.dumps({"event": event, **data}, default=str) + "\n").encode()
        while line:
            line = line[os.write(self.fd, line) :]


class Worker:
    def __init__(self, job: Job | dict[str, Any], events: Events, device_info: dict[str, Any]):
        """`job`: the parent's message (grader/core/job.py), or the Job made of it."""
        self.job = job = job if isinstance(job, Job) else Job.from_message(job)
        self.events = events
        self.spec: ExerciseSpec = load_spec(Path(job.spec_folder))
        self.variant = self.spec.variant(job.lang)
        self.device = job.device
        # host-pointer exercises get CPU tensors: the learner's own code copies them to the GPU
        self.tensor_device = "cpu" if self.variant.kind_of.host_side else self.device
        # (page-locked memory needs CUDA: the CPU emulator reads plain host memory)
        self.interpreted = self.variant.kind_of.interpreted and self.device == "cpu"  # the Triton interpreter
        if self.interpreted:
            interpreter.speed_up()
        self.pinned = self.variant.kind_of.host_side and self.variant.host_memory == "pinned" and self.device == "cuda"
        self.learner_path = Path(job.learner)
        self.device_info = device_info
        self.out: dict[str, Any] = {"device": device_info}  # what profile/tune helpers read
        self._reference = None
        self.compiled: dict[str, Any] = {}  # the entry point under torch.compile, kept for every case (op_checks.py)

    @property
    def reference(self):
        """The reference, for the tools (profile, tune) only: verdicts use the parent's."""
        if self._reference is None:
            from grader.checks.checking import load_reference

            self._reference = load_reference(self.spec.folder / "reference.py", self.variant.reference)
        return self._reference

    def work_and_ceiling(self, case: Case):
        from grader.checks.speed import work_and_ceiling

        return work_and_ceiling(self.spec, self.variant, case, self.device_info)

    # --- bookkeeping -------------------------------------------------------------------------
    def progress(self, text: str) -> None:
        self.events.send(Event.STEP, text=text)

    def add(self, name: str, status: str, message: str, **details: Any) -> None:
        """A failure of the learner's own code (a learner can only hurt themselves by forging one)."""
        self.events.send(Event.CHECK, check=Check(name, status, message, details).__dict__)

    def sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    def read_message(self) -> dict[str, Any]:
        line = sys.stdin.readline()
        if not line:
            raise Stop  # the parent is done with us
        return json.loads(line)

    # --- steps -------------------------------------------------------------------------------
    def run(self) -> None:
        self.enter_box()
        if self.job.emulated:  # the CPU emulator's schedule between barriers follows the grade's seed
            os.environ["KCOURSE_CUDA_CPU_SEED"] = str(self.job.seed)
        self.progress("loading your code")
        self.solution_watch = integrity.SolutionWatch(self.job.solutions_root or None, self.learner_path)
        learner = self._load(self.learner_path, self.job.learner_library, "learner")
        if self.device == "cuda" and "triton.runtime.autotuner" in sys.modules:  # before the first launch
            autotune_cache.keep_hooked_tunings()
            compile_steps.show_compiles(self.progress)
        mode = self.job.mode
        if mode != "grade":
            from grader.child import viz, worker_tools

            jobs = viz if mode == "viz" else worker_tools  # kcourse viz's job has a module of its own
            self.events.send(Event.TOOL, result=getattr(jobs, mode)(self, learner))
            return
        self.events.send(Event.LOADED)
        self.run_trials(learner)
        message = self.read_message()
        if Order.TIME in message:
            self.time_cases(learner, message[Order.TIME], bool(message.get(Order.COMPILE_FIRST)))

    def enter_box(self) -> None:
        """Into the box the parent drew (box.py) before any learner code loads; a box that fails ends the run."""
        import tempfile

        from grader.child import box

        tempfile.tempdir = self.job.work_dir  # Python's temporary files: the box writes nowhere else
        if self.job.box_home:  # this learner's own compiled-kernel caches (Triton reads these at compile time)
            home = self.job.box_home
            os.environ.update(TRITON_CACHE_DIR=os.path.join(home, "triton"), TRITON_HOME=home)
        if not self.job.box:
            return
        try:
            box.enter(box.Policy(**self.job.box))
            learner_errors.BOXED = True
        except (box.BoxError, OSError) as exc:
            self.events.send(
                Event.CHECK,
                check=Check(
                    CheckName.GRADER,
                    "error",
                    f"the grading box could not be set up: {exc} — "
                    "grade again; if it persists, report it to your instructor",
                    {"code": Code.BOX_FAILED},
                ).__dict__,
            )
            raise Stop from None

    def _load(self, path: Path, library: str | None, role: str) -> loading.Caller:
        try:
            return loading.load(self.variant, path, library, role, self._renamed(role))
        except loading.EntryError as exc:
            self.add(CheckName.LOAD, FAILED, str(exc), code=exc.code)
        except Exception as exc:  # the learner's module raised at import time
            self.add(
                CheckName.LOAD,
                FAILED,
                f"importing {path.name} failed: " + learner_error(exc, path),
                code=Code.EXCEPTION,
            )
        raise Stop from None

    def _renamed(self, role: str) -> dict[str, str] | None:
        """The solution, loaded beside the learner's code for timing, registers its operator under another
        namespace (torch.library refuses a second "kcourse::name")."""
        if role != "solution" or self.spec.checks is None or self.spec.checks.schema is None:
            return None  # a plain autograd.Function registers no operator: nothing to rename
        namespace = self.spec.checks.namespace
        return {
            f"{namespace}::": f"{namespace}_solution::",
            f"torch.ops.{namespace}.": f"torch.ops.{namespace}_solution.",
        }

    def call(
        self,
        caller: loading.Caller,
        tensors: dict[str, torch.Tensor],
        case: Case,
        what: str,
        outputs: dict[str, torch.Tensor] | None = None,
    ) -> Any:
        """Invoke the entry point and turn any failure into a verdict the learner can act on. `outputs`: those to
        check were complete when it returned (host-side code, whose caller reads them at once)."""
        try:
            result = caller(tensors, case.params)
            at_return = self._host_outputs_now(outputs)
            self.sync()
        except NotImplementedError as exc:
            self.add(
                CheckName.NUMERICS,
                FAILED,
                f"not implemented yet: {exc or 'fill in the TODOs in ' + self.learner_path.name}",
                code=Code.NOT_IMPLEMENTED,
            )
            raise Stop from exc
        except Exception as exc:
            self._call_failed(exc, what)
            raise Stop from exc
        self._complete_at_return(at_return, outputs or {}, what)
        return result

    def _call_failed(self, exc: Exception, what: str) -> None:
        text = f"{type(exc).__name__}: {exc}"
        if "CUDA error" in text or type(exc).__name__ == "AcceleratorError":
            self.add(
                CheckName.NUMERICS,
                FAILED,
                f"{what}: CUDA error — {str(exc).splitlines()[0]}\n{CUDA_HINT}",
                code=Code.CUDA_ERROR,
            )
        else:
            self.add(
                CheckName.NUMERICS,
                FAILED,
                f"{what}: your code raised " + learner_error(exc, self.learner_path),
                code=Code.EXCEPTION,
            )

    def _host_outputs_now(self, outputs: dict[str, torch.Tensor] | None) -> dict[str, torch.Tensor]:
        """Copies of host-side code's outputs in host memory as they are when it returns, before the grader waits
        for the GPU: work it left queued may still be writing them."""
        if not outputs or not self.variant.kind_of.host_side or self.device != "cuda":
            return {}
        return {name: t.clone() for name, t in outputs.items() if t.device.type == "cpu"}

    def _complete_at_return(self, at_return: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor], what: str):
        """An output that changed after the function returned was still being written by work it left queued:
        its caller would have read it half done. (Compared bit for bit: the poison is NaN.)"""
        for name, early in at_return.items():
            if not torch.equal(early.reshape(-1).view(torch.uint8), outputs[name].reshape(-1).view(torch.uint8)):
                self.add(
                    CheckName.NUMERICS,
                    FAILED,
                    f"{what}: `{name}` changed after your function returned — the copies or kernels you queued were "
                    "still writing it, and a caller reads it as soon as you return. Wait for every stream you used "
                    "before returning: cudaStreamSynchronize(stream) for each (or cudaDeviceSynchronize())",
                    code=Code.RETURNED_EARLY,
                )
                raise Stop

    # --- numerics: run each trial the parent sends, hand the outputs back ---------------------------
    def run_trials(self, learner: loading.Caller) -> None:
        watch_ops = self.variant.kind_of.watch_ops
        while True:
            message = self.read_message()
            if Order.END_TRIALS in message:
                break
            if Order.COMPILE_CASES in message:  # before the first trial (compile_steps.compile_first)
                failed = self._compile_for(learner, None, [self.spec.cases[i] for i in message[Order.COMPILE_CASES]])
                self.events.send(Event.COMPILED, failed=failed)
                continue
            case = self.spec.cases[message["case"]]
            self.progress(f"checking {message['label']}")
            self.events.send(Event.TRIAL, k=message["k"], **self._one_trial(learner, case, message, watch_ops))
        self.solution_watch.active = False  # from here on the grader itself may load the solution
        self.events.send(Event.TRIALS_DONE, borrowed=sorted(self.solution_watch.seen))

    def _tensors(self, case: Case, message: dict) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        inputs = {}
        for name, meta in message["inputs"].items():
            values = staging.load(meta, self.tensor_device)
            os.unlink(meta["path"])
            placed = place(values, case.inputs.get(name, {}).get("layout"), self.tensor_device)
            if self.interpreted:
                placed = with_nan_tail(placed)  # a load past the end reads NaN in every run
            inputs[name] = staging.tracked(placed, values) if self.job.emulated else placed  # ASan sees past it
        return self.host_memory(inputs), self.host_memory(make_outputs(self.spec, case, self.tensor_device, inputs))

    def host_memory(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The tensors in page-locked memory where the spec asks for it (host_memory = "pinned")."""
        return {name: pinned(t) for name, t in tensors.items()} if self.pinned else tensors

    def _one_trial(self, learner, case: Case, message: dict, watch_ops: bool) -> dict[str, Any]:
        inputs, outputs = self._tensors(case, message)
        originals = {k: v.clone() for k, v in inputs.items()}
        tensors = {**inputs, **outputs}
        if self.variant.returns_outputs:
            poison_free_memory(outputs)
        ops: list[str] = []
        label = message["label"]
        if watch_ops and message.get("watch_ops"):
            result, ops = integrity.ops_called(
                lambda: self.call(learner, tensors, case, label, outputs), self.variant.kind_of.op_library
            )
        else:
            result = self.call(learner, tensors, case, label, outputs)
        got = self._outputs_from(result, outputs, label)
        files = {
            spec_out.name: save_tensor(out, self._out_path(message["k"], spec_out.name))
            for spec_out, out in zip(self.spec.outputs, got)
        }
        outside = [] if self.variant.returns_outputs else [n for n, t in outputs.items() if written_outside(t)]
        report = {
            "outputs": files,
            "ops": sorted(ops),
            "modified": integrity.inputs_modified(originals, inputs),
            "outside": outside,
        }
        if message.get("op_checks"):
            report["op_checks"] = self._op_checks(learner, originals, case, message)
        return report

    def _op_checks(self, learner: loading.Caller, inputs: dict[str, torch.Tensor], case: Case, message: dict) -> dict:
        """Evidence for the registered operator's checks ([checks] in spec.toml) on this trial's inputs."""
        self.progress(f"checking the operator on {message['label']} (opcheck, torch.compile)")
        grads = [load_tensor(meta).to(self.tensor_device) for meta in message["op_checks"]["grad_outputs"]]
        save = lambda name, t: save_tensor(t, self._out_path(message["k"], name))  # noqa: E731
        return op_checks.gather(
            self.spec.checks, learner.function, learner.arguments(inputs, case.params), grads, save, self.compiled
        )

    def _out_path(self, k: Any, name: str) -> Path:
        return Path(self.job.work_dir) / f"out-{k}-{name}.bin"

    def _outputs_from(self, result: Any, outputs: dict[str, torch.Tensor], label: str) -> list[torch.Tensor]:
        if not self.variant.returns_outputs:
            return list(outputs.values())
        got = list(result) if isinstance(result, (tuple, list)) else [result]
        if len(got) != len(self.spec.outputs) or not all(isinstance(t, torch.Tensor) for t in got):
            self.add(
                CheckName.NUMERICS,
                FAILED,
                f"{label}: `{self.variant.entry}` must return {len(self.spec.outputs)} tensor(s), "
                f"got {type(result).__name__}",
                code=Code.BAD_RETURN,
            )
            raise Stop
        return got

    # --- timing --------------------------------------------------------------------------------
    def time_cases(self, learner: loading.Caller, cases: list[dict], compile_first: bool = False) -> None:
        solution = None
        if self.job.solution:
            solution = self._load(Path(self.job.solution), self.job.solution_library, "solution")
        for message in cases:
            if compile_first and not message.get("memory_only"):  # after the sizes run for their memory alone
                compile_first = False
                self.read_message()  # the parent's go for it
                timed = [self.spec.performance.cases[m["case"]] for m in cases if not m.get("memory_only")]
                self.events.send(Event.COMPILED, failed=self._compile_for(learner, solution, timed))
            self.read_message()  # the parent's go: it is listening, so its clock brackets this case
            case = self.spec.performance.cases[message["case"]]
            self.progress(f"{'peak memory at' if message.get('memory_only') else 'timing'} {case.label()}")
            inputs, mine = self._tensors(case, message)
            # tensors updated in place as they were before any timed run (torch's own in-place step, timed
            # as the "torch" figure, updates the inputs themselves)
            start = {name: inputs[name].clone() for name in in_place_names(self.spec)}
            last: dict[str, Any] = {}

            def run_learner():
                last["result"] = learner({**inputs, **mine}, case.params)
                return last["result"]

            untimed = message.get("memory_only", False)
            functions = (
                {} if untimed else {"learner": run_learner, **self._others(solution, learner, inputs, case, message)}
            )
            self.events.send(Event.TIMING_START, k=message["k"])
            if untimed:
                measured, peaks = {}, self._memory_only(run_learner, mine, start)
            else:
                measured, peaks = self._timed(functions, mine, start, run_learner, message["budget_s"])
            files = self._saved_outputs(message["k"], case, last.get("result"), mine)
            self.events.send(Event.TIMED, k=message["k"], measured=measured, outputs=files, memory=peaks)
            if message.get("probe"):
                self._probe_while_asked(functions, self.variant.kind_of.host_side)

    def _compile_for(self, learner: loading.Caller, solution: loading.Caller | None, cases: list[Case]) -> str | None:
        """Every Triton kernel the learner's code (and the solution, where given) calls at each case compiled and none
        launched, side by side (compile_steps.compiling_only), on stand-ins of the case's tensors: before the trials
        or the timed runs (Order.COMPILE_CASES, Order.COMPILE_FIRST; where grades share the GPU, its grade holds no
        part of the lock meanwhile). PyTorch's operations give tensors of the right shapes and run nothing
        (compile_steps.torch_left_out). A failure ends the pass, and is no verdict: the run after meets it again, and
        reports it as it always has. Returns it (the GPU lock's log)."""
        callers = [caller for caller in (learner, solution) if caller is not None]
        try:
            with compile_steps.compiling_only(), compile_steps.torch_left_out(self.tensor_device):
                for case in cases:
                    self.progress(f"compiling for {case.label()}")
                    for caller in callers:
                        caller(stand_ins(self.spec, case, self.tensor_device), case.params)
            self.sync()
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"[:300]
        return None

    def _others(self, solution, learner, inputs: dict, case: Case, message: dict) -> dict[str, Callable]:
        """The contestants timed beside the learner: the solution, the learner's own baseline (spec
        baseline_args), and PyTorch (the reference) unless the message leaves it out (kcourse watch)."""
        from grader.checks.checking import reference_keywords

        functions = {}
        if solution is not None:
            theirs = self.host_memory(make_outputs(self.spec, case, self.tensor_device, inputs))
            functions["solution"] = lambda: solution({**inputs, **theirs}, case.params)
        functions.update(self._baseline(learner, inputs, case))
        if not self.variant.kind_of.host_side and message.get("anchor", True):
            keywords = reference_keywords(self.reference, case.params, self.tensor_device)
            functions["torch"] = lambda: self.reference(*inputs.values(), **keywords)
        return functions

    def _timed(self, functions: dict, mine: dict, start: dict, run_learner: Callable, budget_s: float):
        """(the contestants' figures, their peak memory): alternating timed runs, then one untimed run each."""
        from grader.child import timing

        host = self.variant.kind_of.host_side
        alternate = timing.time_host_alternating if host else timing.time_alternating
        measured = alternate(functions, budget_s=budget_s)
        self.sync()
        peaks = self._peak_memory(functions) if self.device == "cuda" and not host else {}
        if start:  # every timed run stepped the outputs again: the parent checks one step from the start
            start_in_place(mine, start)
            run_learner()
            self.sync()
        return measured, peaks

    def _memory_only(self, run_learner: Callable, mine: dict, start: dict) -> dict[str, int]:
        """A size the grade checks memory at but does not time (kcourse grade without --full, kcourse watch): the
        learner's run once (compiling and autotuning), then the run whose peak memory is measured and whose
        outputs the parent checks. No solution, no PyTorch, no timer: the speed verdict is another size's."""
        run_learner()
        self.sync()
        if start:
            start_in_place(mine, start)
        if self.device != "cuda":
            run_learner()
            return {}
        return {"learner": memory.peak_extra_bytes(run_learner, returns_outputs=self.variant.returns_outputs)[0]}

    def _saved_outputs(self, k: Any, case: Case, result: Any, mine: dict) -> dict[str, dict]:
        """The outputs of the learner's last run, in files for the parent to check."""
        got = self._outputs_from(result, mine, case.label())
        return {s.name: save_tensor(out, self._out_path(k, s.name)) for s, out in zip(self.spec.outputs, got)}

    def _peak_memory(self, functions: dict) -> dict[str, int]:
        """Bytes each contestant allocates beyond what is live before its run, over one untimed run after
        the timed ones (compiling and autotuning are done by then). The learner's run is the one whose
        outputs the parent checks next. Returned outputs (torch's, a torch operator's) are not scratch."""
        own = self.variant.returns_outputs
        return {
            who: memory.peak_extra_bytes(fn, returns_outputs=own or who == "torch")[0] for who, fn in functions.items()
        }

    def _baseline(self, learner: loading.Caller, inputs: dict[str, torch.Tensor], case: Case) -> dict:
        """The learner's own entry point with the spec's baseline_args (n_streams = 1: the same work done
        serially), timed beside it for the speedup it reports; its outputs go to buffers of their own."""
        args = self.spec.performance.baseline_args
        if not args:
            return {}
        outputs = self.host_memory(make_outputs(self.spec, case, self.tensor_device, inputs))
        params = {**case.params, **args}
        return {"learner_baseline": lambda: learner({**inputs, **outputs}, params)}

    def _probe_while_asked(self, functions: dict, host: bool) -> None:
        """The probe once the parent's go comes, and again each time it asks (its clock disagreed with the
        timed runs: a moment the GPU ran slow, or a patched timer); it says when it is done."""
        self.read_message()
        self._probe(functions, host)
        while self.read_message().get(Order.PROBE_AGAIN):
            self._probe(functions, host)

    def _probe(self, functions: dict, host: bool) -> None:
        """Back-to-back runs of each contestant between two events the parent timestamps with its own
        clock: a timer patched in this process cannot change what the parent's clock saw.

        Each contestant runs in PROBE_BURSTS bursts, synchronised once at each burst's end; the parent keeps
        the fastest: a GPU another process shares for a moment slows one burst, not all."""
        from grader.checks.speed import PROBE_BURSTS
        from grader.child import timing

        flush = None if host or self.device != "cuda" else timing.l2_flush_buffer()
        functions = {"baseline": lambda: None, **functions}
        for who in [w for w in ("baseline", "learner", "solution") if w in functions]:
            once = min(self._once(functions[who]) for _ in range(3))  # one slow call must not shrink the bursts
            runs = max(3, min(1000, int(PROBE_S / PROBE_BURSTS / once)))
            for _ in range(PROBE_BURSTS):
                self.events.send(Event.PROBE_START, who=who, runs=runs)
                self.read_message()  # the parent's go, sent once its clock runs: its late waking only lengthens it
                begun = time.perf_counter()
                for _ in range(runs):
                    if flush is not None:
                        flush.zero_()
                    functions[who]()
                enqueued = time.perf_counter()
                self.sync()
                # the child's own account, for KCOURSE_PROBE_TRACE only: the parent's clock decides
                self.events.send(
                    Event.PROBE_END, who=who, enqueue_s=enqueued - begun, sync_s=time.perf_counter() - enqueued
                )

    def _once(self, function: Callable) -> float:
        started = time.perf_counter()
        function()
        self.sync()
        return max(time.perf_counter() - started, 1e-6)


def pinned(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` in page-locked host memory, same values, shape and strides. A view keeps its whole
    allocation (the poisoned guard after an output, a row slice's padding), so checks of those still work."""
    base = tensor if tensor._base is None else tensor._base
    whole = base.pin_memory()
    offset = whole.storage_offset() + tensor.storage_offset() - base.storage_offset()
    return whole.as_strided(tensor.shape, tensor.stride(), offset)


def poison_free_memory(outputs: dict[str, torch.Tensor]) -> None:
    """For entry points that allocate their own outputs: leave poison in the blocks the caching
    allocator will hand out next, so elements the kernel never writes still show (in any of the outputs' dtypes:
    inputs.FREE_POISON)."""
    from grader.checks.inputs import free_poison_block

    for t in outputs.values():
        if t.is_cuda and t.is_floating_point():
            free_poison_block(t)  # freed at once; its poisoned block is what the allocator reuses


def describe_device(device: str) -> dict[str, Any]:
    if device != "cuda":
        return {
            "type": "cpu",
            "name": "CPU (Triton interpreter)" if os.environ.get("TRITON_INTERPRET") == "1" else "CPU",
        }
    props = torch.cuda.get_device_properties(0)
    return {
        "type": "cuda",
        "name": props.name,
        "capability": f"{props.major}.{props.minor}",
        "memory_gb": round(props.total_memory / 1e9, 1),
        "multiprocessors": props.multi_processor_count,
        "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),  # grade-batch gives each worker one GPU
        "uuid": str(props.uuid) if hasattr(props, "uuid") else None,  # which GPU, whatever the order (gpushare)
        **device_ceilings(props.name),
    }


def device_ceilings(name: str) -> dict[str, float]:
    """This GPU's measured copy bandwidth and matmul rates (float32, float16, bfloat16: timing.CEILINGS),
    measured once per GPU model and kept in the state folder; a ceiling a saved entry lacks (one written
    before it existed) is measured and added (env-check measures all afresh and replaces them)."""
    from grader.child import timing
    from grader.core.paths import state_dir

    path = state_dir() / "device_ceilings.json"
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    missing = [c for c in timing.CEILINGS if c not in known.get(name, {})]
    if not missing:
        return known[name]
    measured = {**known.get(name, {}), **timing.measure_ceilings(missing)}
    # A ceiling measured while another process works on the GPU comes out low and would make every later
    # grade's "% of roofline" wrong: use it for this grade, keep it only when the GPU was ours alone.
    if timing.memory_held_by_others() < timing.SHARED_GPU_BYTES:
        known[name] = measured
        write_result(str(path), known)
    return measured


def write_result(path: str, data: dict[str, Any]) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def _grader_failure(exc: BaseException) -> Check:
    """The check for an error of the child's own code (not the learner's, which _call_failed reports): the GPU full
    (torch's OutOfMemoryError) or, otherwise, a grader bug with its traceback."""
    return gpushare.full_check(exc) or Check(
        CheckName.GRADER,
        "error",
        f"internal grader error: {type(exc).__name__}: {exc}",
        {"traceback": traceback.format_exc()[-4000:]},
    )


def warm_up(device: str) -> dict[str, Any]:
    """Everything a grade needs that does not depend on the job: paid before the job arrives."""
    if device == "cuda":
        torch.zeros(1, device="cuda")
        from grader.child import timing

        timing.warm_up()
        staging.warm_up()
    prewarm = os.environ.get("KCOURSE_CHILD_PREWARM")  # sandbox.PREWARM
    if prewarm == "profiler":
        integrity.ops_called(lambda: torch.ones(1, device=device) + 1, op_library=True)
    if prewarm == "triton":
        import triton.language  # noqa: F401  (the learner's file imports it first thing)
    return describe_device(device)


def read_job_line(idle_s: float) -> str:
    """The job, or "" (end) when none came within idle_s seconds (0: wait for ever, as kcourse watch's does)."""
    if idle_s > 0 and not select.select([sys.stdin], [], [], idle_s)[0]:
        return ""
    return sys.stdin.readline()


def main(event_fd: int) -> None:
    exit_with_parent()
    events = Events(event_fd)
    device = os.environ.get("KCOURSE_CHILD_DEVICE", "cpu")
    try:
        hostload.limit_threads()  # one GPU's share of the host's CPUs: other GPUs' grades may be running
        info = warm_up(device)
        events.send(Event.READY, device=info, pid=os.getpid())
        # What the grade's checks import on first use (sandbox.Child's imports), after "ready": the parent goes on
        # with its part of the grade meanwhile, and the job waits in the pipe until they are imported
        op_checks.import_first_use(os.environ.get("KCOURSE_CHILD_IMPORTS", "").split(","))
        line = read_job_line(float(os.environ.get("KCOURSE_CHILD_IDLE_S", "0")))
        if line:
            Worker(dict(json.loads(line), device=device), events, info).run()
    except Stop:
        pass
    except BaseException as exc:  # a grader bug, or a full GPU: still hand back what we know
        events.send(Event.CHECK, check=_grader_failure(exc).__dict__)
    events.send(Event.DONE)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip interpreter teardown: a broken CUDA context can hang it


if __name__ == "__main__":
    main(int(sys.argv[1]))
