"""The child process that runs untrusted code: `python -m grader.worker JOB.json`.

It loads the learner's entry point, checks numerics case by case, watches for cheats, then times the
learner, the solution and torch side by side. It writes its findings to the job's result file and
notes each step in a progress file, so that if the learner's code kills the process (segfault,
hang, CUDA fault) the parent can still say where it happened."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

import torch

from grader import exprs, integrity, loading
from grader.checking import compare, element_size, make_inputs, make_outputs, matches, reference_outputs
from grader.records import FAILED, PASSED, SKIPPED, Check, Timing
from grader.spec import Case, ExerciseSpec, load_spec

CUDA_HINT = ("Find the faulting access with: compute-sanitizer python -m grader grade ... "
             "(an index past the end of an array, or a host pointer used on the device?)")


class Stop(Exception):
    """Grading cannot go on (the learner's code failed in a way that ends this run)."""


class Worker:
    def __init__(self, job: dict[str, Any]):
        self.job = job
        self.spec: ExerciseSpec = load_spec(Path(job["spec_folder"]))
        self.variant = self.spec.variant(job["lang"])
        self.device = job["device"]
        # host-pointer exercises get CPU tensors: the learner's own code copies them to the GPU
        self.tensor_device = "cpu" if self.variant.kind == "cuda_host" else self.device
        self.learner_path = Path(job["learner"])
        self.out: dict[str, Any] = {"checks": [], "timings": [], "device": {}}
        self.reference = _load_reference(self.spec.folder / "reference.py")

    # --- bookkeeping -------------------------------------------------------------------------
    def progress(self, text: str) -> None:
        with open(self.job["progress_path"], "a") as f:
            f.write(text + "\n")

    def add(self, name: str, status: str, message: str, **details: Any) -> None:
        self.out["checks"].append(Check(name, status, message, details).__dict__)

    def sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    # --- steps -------------------------------------------------------------------------------
    def run(self) -> None:
        self.out["device"] = describe_device(self.device)
        self.progress("loading your code")
        self.solution_watch = integrity.SolutionWatch(self.job.get("solutions_root"), self.learner_path)
        learner = self._load(self.learner_path, self.job.get("learner_library"), "learner")
        mode = self.job.get("mode", "grade")
        if mode != "grade":
            from grader import worker_tools

            self.out[mode] = getattr(worker_tools, mode)(self, learner)
        elif self.check_numerics(learner) and self.job.get("timing"):
            self.check_speed(learner)

    def _load(self, path: Path, library: str | None, role: str) -> loading.Caller:
        """Load an entry point; only the learner's load is reported as a check (failures always are)."""
        try:
            caller = loading.load(self.variant, path, library, role)
        except loading.EntryError as exc:
            self.add("load", FAILED, str(exc), code=exc.code)
            raise Stop from None
        except Exception as exc:  # the learner's module raised at import time
            self.add("load", FAILED, f"importing {path.name} failed: " + learner_error(exc, path), code="exception")
            raise Stop from None
        if role == "learner":
            self.add("load", PASSED, f"{path.name}: `{self.variant.entry}` loaded")
        return caller

    def call(self, caller: loading.Caller, tensors: dict[str, torch.Tensor], case: Case, what: str) -> Any:
        """Invoke the entry point and turn any failure into a verdict the learner can act on."""
        try:
            result = caller(tensors, case.params)
            self.sync()
            return result
        except NotImplementedError as exc:
            self.add("numerics", FAILED, f"not implemented yet: {exc or 'fill in the TODOs in ' + self.learner_path.name}",
                     code="not_implemented")
        except Exception as exc:
            text = f"{type(exc).__name__}: {exc}"
            if "CUDA error" in text or type(exc).__name__ == "AcceleratorError":
                self.add("numerics", FAILED, f"{what}: CUDA error — {str(exc).splitlines()[0]}\n{CUDA_HINT}", code="cuda_error")
            else:
                self.add("numerics", FAILED, f"{what}: your code raised " + learner_error(exc, self.learner_path), code="exception")
        raise Stop

    def check_numerics(self, learner: loading.Caller) -> bool:
        cases = [c for c in self.spec.cases if self.device == "cuda" or not c.gpu_only]
        watch_ops = self.variant.kind in ("triton", "torch_op")
        checked = 0
        for index, case in enumerate(cases):
            previous: list[torch.Tensor] | None = None
            for trial in range(self.spec.trials):
                seed = self.job["seed"] + 1000 * index + trial
                label = f"{case.label()} (seed {seed})"
                self.progress(f"checking {label}")
                refs = self._one_trial(learner, case, seed, label, watch_ops and trial == 0, previous)
                if refs is None:
                    return False
                previous, checked = refs, checked + 1
        self.solution_watch.active = False  # from here on the grader itself may load the solution
        borrowed = sorted(self.solution_watch.seen)
        if borrowed:
            self.add("integrity", FAILED, f"your code loaded the instructor's solution ({', '.join(borrowed)}): "
                     "the kernel must be your own", code="solution_loaded")
            return False
        skipped = len(self.spec.cases) - len(cases)
        note = f"; {skipped} GPU-only case(s) skipped (no GPU)" if skipped else ""
        self.add("numerics", PASSED, f"{len(cases)} case(s) × {self.spec.trials} trials matched the float64 reference{note}",
                 cases=len(cases), trials=checked, skipped_cases=skipped)
        self.add("integrity", PASSED, "no torch compute operators called, inputs untouched, no cached results")
        return True

    def _one_trial(self, learner, case, seed, label, watch_ops, previous):
        inputs = make_inputs(self.spec, case, seed, self.tensor_device)
        originals = {k: v.clone() for k, v in inputs.items()}
        outputs = make_outputs(self.spec, case, self.tensor_device)
        refs = reference_outputs(self.reference, self.spec, originals)
        tensors = {**inputs, **outputs}
        if self.variant.returns_outputs:
            poison_free_memory(outputs)
        if watch_ops:
            result, names = integrity.ops_called(lambda: self.call(learner, tensors, case, label))
            bad = integrity.forbidden_ops(names)
            if bad:
                self.add("integrity", FAILED, f"{label}: your code called torch's {', '.join(bad[:5])}: the result must come "
                         "from your own kernel, not from PyTorch (allowed: allocation, views, copies)", code="torch_compute", ops=bad)
                return None
        else:
            result = self.call(learner, tensors, case, label)
        changed = integrity.inputs_modified(originals, inputs)
        if changed:
            self.add("integrity", FAILED, f"{label}: your code modified its input {', '.join(changed)} in place; "
                     "inputs are read-only — write only to the outputs", code="input_modified")
            return None
        got = self._outputs_from(result, outputs, label)
        for i, (spec_out, out, ref) in enumerate(zip(self.spec.outputs, got, refs)):
            comparison = compare(spec_out.name, out, ref, self.spec.tolerance_for(case.dtype), label)
            if comparison.ok:
                continue
            if previous is not None and matches(out, previous[i], self.spec.tolerance_for(case.dtype)):
                self.add("integrity", FAILED, f"{label}: {spec_out.name} equals the answer for the previous trial's inputs "
                         "— is your code caching results between calls?", code="cached_result")
            else:
                self.add("numerics", FAILED, comparison.message, code=comparison.code, case=case.params, seed=seed,
                         **comparison.details)
            return None
        return refs

    def _outputs_from(self, result: Any, outputs: dict[str, torch.Tensor], label: str) -> list[torch.Tensor]:
        if not self.variant.returns_outputs:
            return list(outputs.values())
        got = list(result) if isinstance(result, (tuple, list)) else [result]
        if len(got) != len(self.spec.outputs) or not all(isinstance(t, torch.Tensor) for t in got):
            self.add("numerics", FAILED, f"{label}: `{self.variant.entry}` must return {len(self.spec.outputs)} tensor(s), "
                     f"got {type(result).__name__}", code="bad_return")
            raise Stop
        return got

    # --- timing ------------------------------------------------------------------------------
    def check_speed(self, learner: loading.Caller) -> None:
        from grader import timing

        solution = None
        if self.job.get("solution"):
            solution = self._load(Path(self.job["solution"]), self.job.get("solution_library"), "solution")
        results = []
        cases = self.spec.performance.cases
        for index, case in enumerate(cases):
            self.progress(f"timing {case.label()}")
            budget = timing.BUDGET_S if index == len(cases) - 1 else timing.BUDGET_S / 3  # the verdict size gets most runs
            results.append(self._time_case(timing, learner, solution, case, self.job["seed"] + 10**6 + index, budget))
        self._speed_verdict(results[-1] if results else None, solution is not None)

    def _time_case(self, timing, learner, solution, case: Case, seed: int, budget_s: float) -> Timing:
        inputs = make_inputs(self.spec, case, seed, self.tensor_device)
        mine, theirs = make_outputs(self.spec, case, self.tensor_device), make_outputs(self.spec, case, self.tensor_device)
        functions = {"learner": lambda: learner({**inputs, **mine}, case.params)}
        if solution is not None:
            functions["solution"] = lambda: solution({**inputs, **theirs}, case.params)
        if self.variant.kind != "cuda_host":
            functions["torch"] = lambda: self.reference(*inputs.values())
        host = self.variant.kind == "cuda_host"
        measured = (timing.time_host_alternating(functions, budget_s=budget_s) if host
                    else timing.time_alternating(functions, budget_s=budget_s))
        self._check_timed_output(learner, inputs, case)
        return self._timing_record(case, measured)

    def _check_timed_output(self, learner, inputs, case: Case) -> None:
        """The timed size is checked too: a kernel must not be right only on the small sizes."""
        outputs = make_outputs(self.spec, case, self.tensor_device)
        result = self.call(learner, {**inputs, **outputs}, case, f"timed size {case.label()}")
        got = self._outputs_from(result, outputs, case.label())
        for spec_out, out, ref in zip(self.spec.outputs, got, reference_outputs(self.reference, self.spec, inputs)):
            comparison = compare(spec_out.name, out, ref, self.spec.tolerance_for(case.dtype), f"timed size {case.label()}")
            if not comparison.ok:
                self.add("numerics", FAILED, comparison.message, code=comparison.code)
                raise Stop

    def work_and_ceiling(self, case: Case) -> tuple[float | None, float | None, str]:
        """(work in the reported unit, this GPU's ceiling in that unit, unit) for one timed size."""
        perf, device = self.spec.performance, self.out["device"]
        names = {**case.params, "elem": element_size(case.dtype)}
        host = self.variant.kind == "cuda_host"  # host transfers have no device roofline
        if perf.is_compute_bound:
            return exprs.evaluate(perf.flops, names) / 1e12, None if host else device.get("matmul_tflops"), "TFLOP/s"
        if perf.bytes:
            return exprs.evaluate(perf.bytes, names) / 1e9, None if host else device.get("copy_gbps"), "GB/s"
        return None, None, ""

    def _timing_record(self, case: Case, measured: dict) -> Timing:
        record = Timing(case=case.label(), runs=measured["learner"]["runs"])
        for who in ("learner", "solution", "torch"):
            if who in measured:
                setattr(record, f"{who}_ms", measured[who]["median_ms"])
        record.learner_spread = measured["learner"]["spread"]
        record.solution_spread = measured.get("solution", {}).get("spread")
        work, ceiling, record.unit = self.work_and_ceiling(case)
        for who in ("learner", "solution", "torch"):
            ms = getattr(record, f"{who}_ms")
            if work is not None and ms:
                setattr(record, f"{who}_rate", work / (ms / 1000))
        if ceiling and record.learner_rate:
            record.roofline_pct = 100 * record.learner_rate / ceiling
            if record.solution_rate:
                record.solution_roofline_pct = 100 * record.solution_rate / ceiling
        perf, names = self.spec.performance, {**case.params, "elem": element_size(case.dtype)}
        if perf.flops and perf.bytes:
            flops = exprs.evaluate(perf.flops, names)
            record.intensity = flops / exprs.evaluate(perf.bytes, names)
            record.learner_tflops = flops / 1e12 / (record.learner_ms / 1000)
        if record.solution_ms:
            record.ratio = record.solution_ms / record.learner_ms
        self.out["timings"].append(record.__dict__)
        return record

    def _speed_verdict(self, record: Timing | None, have_solution: bool) -> None:
        threshold = self.spec.performance.threshold
        if record is None:
            self.add("speed", SKIPPED, "this exercise has no timed sizes")
            return
        if have_solution:
            record.solution_source = "live solution"
        elif not self._apply_calibration(record):
            self.add("speed", SKIPPED, f"no solution here to time against (you: {record.learner_ms:.4g} ms) and no "
                     "calibration for this exercise: ask your instructor for calibration/calibration.json", code="no_solution")
            return
        rate = f", {record.learner_rate:.4g} {record.unit}" if record.learner_rate else ""
        roof = f" ({record.roofline_pct:.0f}% of this GPU's measured roofline)" if record.roofline_pct else ""
        text = (f"{record.case}: {record.learner_ms:.4g} ms{rate}{roof}; solution {record.solution_ms:.4g} ms "
                f"[{record.solution_source}]; your speed is {record.ratio:.2f}× the solution's (needed: {threshold:.2f}×)")
        status = PASSED if record.ratio >= threshold else FAILED
        hint = "" if status == PASSED else " — see the exercise README's hints on making it faster"
        self.add("speed", status, text + hint, ratio=record.ratio, threshold=threshold, bar=record.solution_source)

    def _apply_calibration(self, record: Timing) -> bool:
        from grader.calibration import solution_bar

        case = next(c for c in self.spec.performance.cases if c.label() == record.case)
        work, ceiling, _ = self.work_and_ceiling(case)
        bar = solution_bar(self.job.get("calibration") or {}, record.case, self.out["device"].get("name", ""), work, ceiling)
        if bar is None:
            return False
        record.solution_ms, record.solution_source = bar
        record.ratio = record.solution_ms / record.learner_ms
        if work:
            record.solution_rate = work / (record.solution_ms / 1000)
        return True


def poison_free_memory(outputs: dict[str, torch.Tensor]) -> None:
    """For entry points that allocate their own outputs: leave NaN in the blocks the caching
    allocator will hand out next, so elements the kernel never writes still show."""
    for t in outputs.values():
        if t.is_cuda and t.is_floating_point():
            torch.full_like(t, float("nan"))  # freed at once; its NaN block is what the allocator reuses


def describe_device(device: str) -> dict[str, Any]:
    if device != "cuda":
        return {"type": "cpu", "name": "CPU (Triton interpreter)" if os.environ.get("TRITON_INTERPRET") == "1" else "CPU"}
    props = torch.cuda.get_device_properties(0)
    return {
        "type": "cuda", "name": props.name, "capability": f"{props.major}.{props.minor}",
        "memory_gb": round(props.total_memory / 1e9, 1), "multiprocessors": props.multi_processor_count,
        "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),  # grade-batch gives each worker one GPU
        **device_ceilings(props.name),
    }


def device_ceilings(name: str) -> dict[str, float]:
    """This GPU's measured copy bandwidth and float32 matmul rate, measured once per GPU model and kept
    in the state folder (env-check measures afresh and replaces them)."""
    from grader import timing
    from grader.paths import state_dir

    path = state_dir() / "device_ceilings.json"
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    if name not in known:
        known[name] = {"copy_gbps": round(timing.measure_copy_bandwidth(), 1),
                       "matmul_tflops": round(timing.measure_matmul_peak(), 2)}
        write_result(str(path), known)
    return known[name]


def learner_error(exc: BaseException, learner_file: Path) -> str:
    """The exception with the learner's own frames only: no grader traceback at the learner."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename).name == learner_file.name]
    where = "".join(f"\n    {Path(f.filename).name}:{f.lineno} in {f.name}: {(f.line or '').strip()}" for f in frames[-3:])
    text = str(exc).strip()
    if len(text) > 2000:
        text = text[:2000] + " ..."
    return f"{type(exc).__name__}: {text}{where}"


def _load_reference(path: Path):
    spec = importlib.util.spec_from_file_location(f"kcourse_reference_{path.parent.name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.reference


def write_result(path: str, data: dict[str, Any]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def main(job_path: str) -> None:
    job = json.loads(Path(job_path).read_text())
    out: dict[str, Any] = {"checks": []}
    try:
        worker = Worker(job)
        out = worker.out
        worker.run()
    except Stop:
        pass
    except BaseException as exc:  # a grader bug: still hand back what we know
        out["checks"].append(Check("grader", "error", f"internal grader error: {type(exc).__name__}: {exc}",
                                   {"traceback": traceback.format_exc()[-4000:]}).__dict__)
    write_result(job["result_path"], out)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip interpreter teardown: a broken CUDA context can hang it


if __name__ == "__main__":
    main(sys.argv[1])
