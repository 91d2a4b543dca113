"""The grading pipeline for one exercise: build -> run in a child -> collect checks -> record.

This module decides what can run here (GPU, Triton interpreter, compile check only) and says what
was skipped and why; the work itself happens in build.py (compiling) and worker.py (checks, timing)."""

from __future__ import annotations

import os
import random
from pathlib import Path

from grader import build, calibration, sandbox, store
from grader.paths import course_root, solutions_dir
from grader.discovery import Target, solution_file, stub_file
from grader.records import ERROR, FAILED, PASSED, SKIPPED, Check, GradeResult, Timing

INTERPRETER_TIMEOUT_FACTOR = 3  # the Triton interpreter is far slower than a GPU


def cuda_available() -> bool:
    """A usable NVIDIA GPU for the child: nvidia-smi answers and torch was built with CUDA.
    KCOURSE_DEVICE=cpu forces the CPU path (interpreter, compile checks) even on a GPU machine."""
    if os.environ.get("KCOURSE_DEVICE", "").lower() == "cpu":
        return False
    import torch

    return torch.version.cuda is not None and build.gpu_arch() is not None


def learner_file(target: Target, source: str, submission: Path | None) -> Path:
    if submission is not None:
        return submission.resolve()
    if source == "solutions":
        return solution_file(target.spec, target.variant)
    return stub_file(target.spec, target.variant)


def grade(target: Target, source: str = "learner", submission: Path | None = None, seed: int | None = None,
          timeout_s: float | None = None, record: bool = True, child_env: dict[str, str] | None = None,
          mode: str = "grade", job_extra: dict | None = None) -> GradeResult:
    """Grade one exercise (mode "grade"), or run the learner's code for "profile" / "tune" in the same sandbox."""
    seed = seed if seed is not None else random.randrange(1, 2**31)
    result = GradeResult(exercise=target.spec.id, lang=target.variant.lang, source=str(submission or source),
                         seed=seed, unit=target.unit, plan=target.plan, threshold=target.spec.performance.threshold)
    path = learner_file(target, source, submission)
    result.scoring = dict(target.spec.scoring)
    result.file = _relative(path)
    if not path.exists():
        hint = " (solutions/ is absent from a learner's kit)" if source == "solutions" else ""
        result.add(Check("load", ERROR, f"{path} does not exist{hint}", {"code": "missing_file"}))
    else:
        _grade_file(target, path, result, seed, timeout_s, child_env or {}, {"mode": mode, **(job_extra or {})})
    result.finish()
    if record:
        store.append(result.to_dict())
    return result


def _relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(course_root()))
    except ValueError:
        return str(path)


def _extract_notebook(target: Target, path: Path, result: GradeResult) -> Path | None:
    """A notebook submission becomes the .py file of its tagged cells (None, with a verdict, if it cannot)."""
    if path.suffix != ".ipynb":
        return path
    from grader.notebook import NotebookError, extract_submission

    try:
        return extract_submission(path, target)
    except NotebookError as exc:
        result.add(Check("load", FAILED, str(exc), {"code": "bad_notebook"}))
        return None


def _grade_file(target: Target, path: Path, result: GradeResult, seed: int, timeout_s: float | None,
                child_env: dict[str, str], job: dict) -> None:
    path = _extract_notebook(target, path, result)
    if path is None:
        return
    variant = target.variant
    gpu = cuda_available()
    solution = solution_file(target.spec, variant)
    grading = job["mode"] == "grade"
    job.update({"spec_folder": str(target.spec.folder), "lang": variant.lang, "learner": str(path), "seed": seed,
                "solutions_root": str(solutions_dir()),
                "device": "cuda" if gpu else "cpu", "timing": gpu and grading,
                "solution": str(solution) if gpu and grading and solution.exists() else None})
    wrapper = job.pop("wrapper", None)
    if variant.kind in ("cuda", "cuda_host"):
        if not _build_raw_cuda(path, solution if job["solution"] else None, job, result, gpu):
            return
    elif variant.kind == "torch_op" and not gpu:
        _compile_check_torch_op(path, result)
        return
    calibration_error = _attach_calibration(target, job) if gpu and grading and job["solution"] is None else None
    timeout = timeout_s or variant.timeout_s * (1 if gpu else INTERPRETER_TIMEOUT_FACTOR)
    outcome = sandbox.run_worker(job, timeout, interpret_triton=not gpu, extra_env=child_env, wrapper=wrapper)
    _merge(outcome, result, timeout)
    if outcome.result and job["mode"] in outcome.result:
        result.extra[job["mode"]] = outcome.result[job["mode"]]
    if calibration_error:  # numerics still count; only the speed bar is unknown
        result.checks = [c for c in result.checks if c.name != "speed"]
        result.add(Check("speed", ERROR, calibration_error, {"code": "corrupt_calibration"}))
    if not gpu and variant.kind == "triton" and grading:
        result.add(Check("speed", SKIPPED, "no GPU found: timing skipped; numerics ran under the Triton interpreter",
                         {"code": "no_gpu"}))


def _attach_calibration(target: Target, job: dict) -> str | None:
    """No solution here: the speed bar comes from the instructor's calibration file (error text if corrupt)."""
    try:
        job["calibration"] = calibration.load().get(target.key, {})
    except calibration.CalibrationError as exc:
        return str(exc)
    return None


def _build_raw_cuda(path: Path, solution: Path | None, job: dict, result: GradeResult, gpu: bool) -> bool:
    arch = build.gpu_arch() if gpu else None
    built = build.build_shared_library(path, arch)
    result.build = built.to_dict()
    if not built.ok:
        code = "no_nvcc" if built.log == build.NVCC_HINT else "build_error"
        result.add(Check("build", ERROR if code == "no_nvcc" else FAILED,
                         f"{path.name} did not compile:\n{built.log}" if code == "build_error" else built.log, {"code": code}))
        return False
    timing = "cached" if built.cached else f"{built.seconds:.2f} s"
    report = build.format_resources(built.resources)
    result.add(Check("build", PASSED, f"compiled for {built.arch} ({timing})\n{report}", {"resources": built.resources}))
    if not gpu:
        result.add(Check("numerics", SKIPPED, "no GPU found: compiled and checked the resource report only; "
                         "run `kcourse grade` on a machine with an NVIDIA GPU to check numerics", {"code": "no_gpu"}))
        result.add(Check("speed", SKIPPED, "no GPU found: timing skipped", {"code": "no_gpu"}))
        return False
    job["learner_library"] = built.library
    if solution is not None:
        solution_build = build.build_shared_library(solution, arch)
        job["solution_library"] = solution_build.library if solution_build.ok else None
        if not solution_build.ok:
            job["solution"] = None
    return True


def _compile_check_torch_op(path: Path, result: GradeResult) -> None:
    built = build.compile_check_torch_op(path)
    result.build = built.to_dict()
    if built.log == build.NVCC_HINT:
        result.add(Check("build", ERROR, built.log, {"code": "no_nvcc"}))
        return
    if built.skipped:
        result.add(Check("build", SKIPPED, built.log, {"code": "toolkit_incomplete"}))
        result.add(Check("numerics", SKIPPED, "no GPU found: the operator was not run", {"code": "no_gpu"}))
        return
    if not built.ok:
        result.add(Check("build", FAILED, f"{path.name} did not compile:\n{built.log}", {"code": "build_error"}))
        return
    result.add(Check("build", PASSED, f"compiled against torch's headers for {built.arch} (compile only)\n"
                     + build.format_resources(built.resources), {"resources": built.resources}))
    result.add(Check("numerics", SKIPPED, "no GPU found: the operator was compiled, not run", {"code": "no_gpu"}))
    result.add(Check("speed", SKIPPED, "no GPU found: timing skipped", {"code": "no_gpu"}))


def _merge(outcome: sandbox.Outcome, result: GradeResult, timeout_s: float) -> None:
    result.output = outcome.output
    if outcome.result is None:
        code, message = sandbox.death_message(outcome, timeout_s)
        result.add(Check("run", FAILED, message, {"code": code}))
        return
    result.device = outcome.result.get("device", {})
    result.timings = [Timing(**t) for t in outcome.result.get("timings", [])]
    for check in outcome.result.get("checks", []):
        result.add(Check(**check))
    if not result.checks:
        result.add(Check("run", FAILED, "the grading process returned no checks", {"code": "crash"}))
