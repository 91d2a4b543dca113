"""The grading pipeline for one exercise: build -> run in a child -> collect checks -> record.

This module decides what can run here (GPU, Triton interpreter, compile check only) and says what
was skipped and why; the work itself happens in build.py (compiling) and worker.py (checks, timing)."""

from __future__ import annotations

import os
import random
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from grader import cuda_cpu
from grader.checks import hints, op_checks
from grader.child import box
from grader.core import calibration, gpu_lock, store
from grader.core.discovery import Target, learner_file, solution_file
from grader.core.job import Job
from grader.core.paths import course_root, solutions_dir
from grader.core.records import ERROR, FAILED, PASSED, SKIPPED, Check, GradeResult
from grader.core.spec import BUILDS
from grader.core.vocabulary import CheckName, Code, Event
from grader.run import heavy, kit, sandbox, sanitize, waiting
from grader.run.child_link import ChildLink, not_started
from grader.run.judge import Judge
from grader.toolchain import build, occupancy, op_build

BACKGROUND = "background"  # sanitize_code=BACKGROUND: the verdict does not wait for compute-sanitizer
PENDING = Code.SANITIZER_PENDING
INTERPRETER_TIMEOUT_FACTOR = 3  # the Triton interpreter is far slower than a GPU
WRAPPER_EXIT_S = 120  # a wrapped child's exit: Nsight Compute writes its report then (seconds for a few kernels)


@dataclass
class GradeRun:
    """One grade in flight, shared by the pipeline's steps instead of a chain of parameters: what is graded, where
    its checks go, how (the options of grade()), on what (gpu, the child), and the job the child will be sent."""

    target: Target
    path: Path  # the learner's file (a notebook's tagged cells, once extracted)
    result: GradeResult
    seed: int
    job: Job  # what the child is sent: filled in here, read in grader/child/worker.py
    quick: bool = False  # numerics and integrity only
    timeout_s: float | None = None  # the caller's; `timeout` is the one in force
    gpu: bool = False
    child: sandbox.Child | None = None
    ahead: Judge | None = None  # a judge made by judge_ahead() for this child and seed
    before_timing: Callable[[], None] | None = None  # the caller's, before the timed runs

    @property
    def variant(self):
        return self.target.variant

    @property
    def timeout(self) -> float:
        return _timeout(self.variant, self.timeout_s, self.gpu)

    @property
    def timing(self) -> bool:
        return self.gpu and self.job.mode == "grade" and not self.quick


def cuda_available() -> bool:
    """A usable NVIDIA GPU for the child: nvidia-smi answers and torch was built with CUDA.
    KCOURSE_DEVICE=cpu forces the CPU path (interpreter, compile checks) even on a GPU machine."""
    if os.environ.get("KCOURSE_DEVICE", "").lower() == "cpu":
        return False
    import torch

    return torch.version.cuda is not None and build.gpu_arch() is not None


def grade(
    target: Target,
    *,
    source: str = "learner",
    submission: Path | None = None,
    seed: int | None = None,
    timeout_s: float | None = None,
    record: bool = True,
    child_env: dict[str, str] | None = None,
    mode: str = "grade",
    job_extra: dict | None = None,
    quick: bool = False,
    child: sandbox.Child | None = None,
    sanitize_code: bool = True,
    timed_sizes: str = "all",
    ahead: Judge | None = None,
    before_timing: Callable[[], None] | None = None,
) -> GradeResult:
    """Grade one exercise (mode "grade"), or run the learner's code for "profile" / "tune" in the same
    sandbox. Every option is a keyword (callers name what they change); inside, they become one GradeRun.
    `quick`: numerics and integrity only. `child`: a worker already started (kcourse watch).
    `sanitize_code`: run compute-sanitizer on a small case (sanitize.py). `timed_sizes`: "all" the
    [performance] cases (validate, grade-batch, `kcourse grade --full`), or "verdict": only the last, where the
    speed verdict is taken (kcourse grade, kcourse watch); job_extra {"torch_anchor": True} times PyTorch beside
    it there too (watch leaves it out).
    `ahead`: a judge made by judge_ahead() for this `child` and `seed`, its large draws already under way.
    `before_timing`: called before the timed runs, to end what the caller has going on this GPU (grade-batch:
    the next grade's child warming up); the grade's own compute-sanitizer run always ends first."""
    seed = seed if seed is not None else random.randrange(1, 2**31)
    result = _new_result(target, submission or source, seed)
    path = learner_file(target, source, submission)
    result.file = _relative(path)
    refusal = _refusal(path, source)
    if refusal is not None:
        result.add(refusal)
    else:
        job = Job(mode=mode, sanitize=sanitize_code, timed_sizes=timed_sizes, **(job_extra or {}))
        run = GradeRun(target, path, result, seed, job, quick, timeout_s, child=child, ahead=ahead)
        run.before_timing = before_timing
        _grade_file(run, child_env or {})
        child = None  # _grade_file closed it
    _close_unused(child, ahead, result)
    hints.annotate(result, target.spec)
    result.finish()
    if record:
        started = time.monotonic()
        store.append(result.to_dict())
        result.phases["record"] = round(time.monotonic() - started, 3)
    return result


def _new_result(target: Target, source: str | Path, seed: int) -> GradeResult:
    result = GradeResult(
        exercise=target.spec.id,
        lang=target.variant.lang,
        source=str(source),
        seed=seed,
        unit=target.unit,
        plan=target.plan,
        threshold=target.spec.performance.threshold,
    )
    result.scoring = dict(target.spec.scoring)
    result.kit_changes = kit.differs_from_git() or []
    return result


def _refusal(path: Path, source: str) -> Check | None:
    """Why no code is run at all: the kit differs from the kit as shipped, or the file is not there."""
    tampered = kit.differs_from_shipped()
    if tampered:
        return Check(
            CheckName.KIT,
            ERROR,
            f"these files of the kit differ from the kit as shipped: {', '.join(tampered[:5])}. "
            "Restore them (git checkout -- FILE, or download the kit again): a grade made with a changed "
            "grader, spec or reference is not valid",
            {"code": Code.KIT_MODIFIED, "files": tampered},
        )
    if not path.exists():
        hint = " (solutions/ is absent from a learner's kit)" if source == "solutions" else ""
        return Check(
            CheckName.LOAD,
            ERROR,
            f"{path} does not exist{hint}: check the path, or run `kcourse list` for the exercises and their files",
            {"code": Code.MISSING_FILE},
        )
    return None


def _close_unused(child: sandbox.Child | None, ahead: Judge | None, result: GradeResult) -> None:
    """End what was started early for a grade that never ran: its child, the references' GPU process, and a
    judge made ahead that this grade did not take up (it adopts it in _build_and_run)."""
    if child is not None:
        child.close()
    heavy.discard_early()
    if ahead is not None and ahead.result is not result:
        ahead.close()


def _relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(course_root()))
    except ValueError:
        return str(path)


def _extract_notebook(target: Target, path: Path, result: GradeResult) -> Path | None:
    """A notebook submission becomes the .py file of its tagged cells (None, with a verdict, if it cannot)."""
    if path.suffix != ".ipynb":
        return path
    from grader.toolchain.notebook import NotebookError, extract_submission

    try:
        return extract_submission(path, target)
    except NotebookError as exc:
        result.add(Check(CheckName.LOAD, FAILED, str(exc), {"code": Code.BAD_NOTEBOOK}))
        return None


def _grade_file(run: GradeRun, child_env: dict[str, str]) -> None:
    """Pick where the learner's code runs (GPU, interpreter, emulator, compile only), start its child if none was
    started early, then build and run; the child is closed and its output kept whatever happens."""
    run.path = _extract_notebook(run.target, run.path, run.result)
    if run.path is None:
        return
    run.gpu = gpu = cuda_available()
    emulated = not gpu and _emulated(run.variant, run.path, run.result)
    compile_only = not gpu and run.variant.kind_of.gpu_to_run and not emulated
    preload = cuda_cpu.child_env() if emulated else {}
    child = run.child
    if child is not None and (compile_only or child.device != ("cuda" if gpu else "cpu") or child.preload != preload):
        child.close()  # started early on a guess this machine turned out not to fit (e.g. torch without CUDA)
        child = None
    if child is None and not compile_only:  # it imports torch and starts CUDA while we build
        imports = op_checks.first_use_imports(run.target.spec.checks)
        child = sandbox.Child("cuda" if gpu else "cpu", {**child_env, **preload}, run.job.wrapper, imports=imports)
    run.child = child
    run.job.emulated = emulated
    try:
        _build_and_run(run)
    finally:
        if child is not None:
            if child.wrapped:  # killing its process group at once would lose the wrapper's report (ncu's)
                child.finish(WRAPPER_EXIT_S)
            run.result.output = child.output()
            child.close()


def _emulated(variant, path: Path, result: GradeResult) -> bool:
    """A CUDA file that runs on this CPU under the emulator (cuda_cpu): its kind, the machine and the file allow it.
    When the file is what stops it, result.emulation says why (the numerics check repeats it)."""
    if not variant.kind_of.nvcc or variant.link or variant.requires or not path.exists():
        return False
    able, how = cuda_cpu.mode()
    reason = cuda_cpu.unsupported(path.read_text(errors="replace")) if able else None
    result.emulation = how if able and reason is None else f"compile only: your file uses {reason}" if reason else how
    return able and reason is None


def _build_and_run(run: GradeRun) -> None:
    target, path, job, child = run.target, run.path, run.job, run.child
    solution = solution_file(target.spec, run.variant)
    grading = job.mode == "grade"
    job.spec_folder, job.lang, job.learner, job.seed = str(target.spec.folder), run.variant.lang, str(path), run.seed
    job.solutions_root = str(solutions_dir())
    job.solution = str(solution) if run.timing and solution.exists() else None
    calibration_data, calibration_error = None, None
    if run.timing and job.solution is None:
        calibration_data, calibration_error = _calibration(target)
    judge = None
    if grading and child is not None:  # its large inputs are drawn while nvcc builds (or were, ahead)
        judge = _adopt_or_make_judge(run, calibration_data)
        judge.prefetch(job)
    try:
        if not _build(run, solution):
            return
        staged = _box_the_child(target, path, job, child, run.result) if child is not None else {}
        if judge is not None:
            judge.staged_solution = staged
        if not grading:
            _run_tool(child, job, run.timeout, run.result)
        elif judge is not None:
            _judge(run, judge, calibration_error)
    finally:
        if judge is not None:
            judge.close()


def _adopt_or_make_judge(run: GradeRun, calibration_data: dict | None) -> Judge:
    """The judge made ahead for this very grade (same child, seed, timing and time limit), or a new one."""
    ahead = run.ahead
    if ahead is not None and (ahead.child, ahead.seed, ahead.timing, ahead.timeout_s) == (
        run.child,
        run.seed,
        run.timing,
        run.timeout,
    ):
        ahead.result = run.result
        return ahead
    if ahead is not None:  # made for another grade: its files in this child's folder would clash with ours
        ahead.close(wait_for_draws=True)
    spec, variant = run.target.spec, run.variant
    return Judge(spec, variant, run.child, run.result, run.seed, run.timeout, run.timing, calibration_data)


def _box_the_child(target: Target, path: Path, job: Job, child: sandbox.Child, result: GradeResult) -> dict[Path, Path]:
    """The child's box (box.py), sent with the job; the solution moves to the child's scratch folder, where
    the judge copies it just before timing ({instructor's file: its place there}): until then the learner's
    code cannot read it, and the box never lets it read solutions/."""
    staged = {}
    for key in ("solution", "solution_library"):
        if getattr(job, key):
            real = Path(getattr(job, key))
            staged[real] = child.dir / "solution" / real.name
            setattr(job, key, str(staged[real]))
    home = sandbox.box_home(_box_id(path, result))
    job.box_home = str(home)
    boxed, why = box.available()
    if os.environ.get(box.UNBOXED_ENV) == "1":
        boxed, why = False, f"{box.UNBOXED_ENV}=1 is set"
    result.isolation = why if boxed else f"none ({why})"
    if not boxed:
        job.box = None
        return staged
    reads = [Path(p) for p in [job.learner_library, *job.tune_libraries.values()] if p]
    writes = [home, *_operator_build_dirs(target, path, staged)]
    if job.trace_path:  # kcourse profile's trace, written by the child into the learner's reports folder
        writes.append(Path(job.trace_path).parent)
    job.box = box.policy(child.dir, path, course_root(), reads, writes).to_dict()
    return staged


def _box_id(path: Path, result: GradeResult) -> str:
    """Whose caches the child gets: the learner's own files share one; a submission's folder (grade-batch:
    one per learner) gets its own, so no learner's code reads kernels another's compiled."""
    if result.source in ("learner", "stubs", "solutions"):
        return "local"
    import hashlib

    return "submission-" + hashlib.sha256(str(path.resolve().parent).encode()).hexdigest()[:16]


def _operator_build_dirs(target: Target, path: Path, staged: dict[Path, Path]) -> list[Path]:
    """A torch operator is built inside the box: its build folders (named by content, not listable) are writable."""
    sources = [path, *(real for real in staged if real.suffix != ".so")]
    return [folder for source in sources for folder in op_build.box_build_dirs(target.variant, source)]


def _build(run: GradeRun, solution: Path) -> bool:
    """Compile what this kind of exercise compiles before its child runs (its `builder` hook); False if the grade
    ends here."""
    if run.variant.kind_of.builder is None:
        return True
    started = time.monotonic()
    waiting.report(0.0, 0.0, "building")  # the live line at a terminal, where one is drawn
    ok = run.variant.kind_of.hook("builder")(run, solution)
    run.result.phases["build"] = round(time.monotonic() - started, 3)
    return ok


def build_raw_cuda(run: GradeRun, solution: Path) -> bool:
    """The builder of nvcc kinds: the learner's .cu (and the solution's, for the probe) into shared libraries."""
    solution_or_none = solution if run.job.solution else None
    return _build_raw_cuda(run.path, solution_or_none, run.job, run.result, run.gpu, run.variant)


def build_torch_op(run: GradeRun, solution: Path) -> bool:
    """The builder of torch operators: the child builds the extension; here, only what the machine lacks (cmake)
    ends the grade, and without a GPU the file is compile-checked instead."""
    variant, result = run.variant, run.result
    if run.gpu and op_build.missing_tool(variant):
        result.add(Check(CheckName.BUILD, ERROR, op_build.missing_tool(variant), {"code": Code.NO_BUILD_TOOL}))
        return False
    if not run.gpu:
        _compile_check_torch_op(run.path, result, variant)
        return False
    return True


def _judge(run: GradeRun, judge: Judge, calibration_error: str | None) -> None:
    """The child runs the learner's code; the judge decides; compute-sanitizer runs beside or after."""
    target, path, job, result, gpu, variant = run.target, run.path, run.job, run.result, run.gpu, run.variant
    before_timing = run.before_timing
    # Boxed, learner code cannot write the kit or the results: a change meanwhile is someone's edit, left alone.
    # Unboxed, the files are kept to be put back after the run.
    before = None if job.box else (kit.contents(), kit.append_only_state(store.results_path()))
    memory_safety = _MemorySafety(target, path, job, gpu, result, judge.child.visible_devices)
    background = job.sanitize == BACKGROUND

    def quiet_gpu() -> None:  # nothing else of ours on the GPU while the child times
        if not background:
            memory_safety.finish()  # the sanitizer's processes
        if before_timing is not None:
            before_timing()  # the caller's (grade-batch: the next grade's child warming up)

    judge.before_timing = quiet_gpu
    _child_and_tools(judge, job, memory_safety, background, early=not variant.kind_of.builds_in_child)
    if variant.kind_of.interpreted and not gpu:
        _lint_for_the_gpu(path, result)
    result.phases.update(judge.phases)
    if before is not None:
        _check_kit_untouched(before, result)
    if calibration_error:  # numerics still count; only the speed bar is unknown
        result.checks = [c for c in result.checks if c.name != "speed"]
        result.add(Check(CheckName.SPEED, ERROR, calibration_error, {"code": Code.CORRUPT_CALIBRATION}))
    _add_skipped_speed(result, gpu, run.quick, variant, job.emulated)


def _child_and_tools(judge: Judge, job: Job, memory_safety: _MemorySafety, background: bool, early: bool) -> None:
    """The child's run and the sanitizer's: raw CUDA and Triton (`early`) start the tools at once, to overlap the
    child's start and numerics; a torch operator after the child built it (one build at a time in its folder).
    In the background (watch), after timing, so the tools never share the GPU with it; watch settles them.
    The GPU lock is held shared throughout (other grades' numerics may share the GPU, never their timing): for a
    torch operator from the child's load on, since the child's build before it (tens of seconds of CPU work
    cold) needs no GPU and, held, kept timers waiting (gpu_lock)."""
    judge.may_pause = lambda: not memory_safety.on_the_gpu()  # its GPU work would go on during the pause
    if early:
        with gpu_lock.shared():
            if not background:
                memory_safety.start()
            judge.run(job)
            _tools_after_the_child(memory_safety, background)
    else:
        judge.gpu_hold = gpu_lock.shared
        judge.run(job)
        with gpu_lock.shared():
            _tools_after_the_child(memory_safety, background)


def _tools_after_the_child(memory_safety: _MemorySafety, background: bool) -> None:
    memory_safety.start()  # where not started yet
    if background:
        memory_safety.leave_running()
    else:
        memory_safety.finish()


class _MemorySafety:
    """When the sanitizer runs within a grade: started once, its check added once, before timing; on the
    grading child's GPU (`visible_devices`), never on another grade's."""

    def __init__(
        self, target: Target, path: Path, job: Job, gpu: bool, result: GradeResult, visible_devices: str | None = None
    ):
        self.target, self.path, self.job, self.gpu, self.result = target, path, job, gpu, result
        self.visible_devices = visible_devices
        self.running: sanitize.Sanitizer | Check | None = None
        self.done = False

    def on_the_gpu(self) -> bool:
        """Whether compute-sanitizer has started on the GPU and not yet been collected."""
        return isinstance(self.running, sanitize.Sanitizer) and not self.done

    def start(self) -> None:
        if self.running is not None or self.done:
            return
        if not self.job.sanitize:
            self.running = Check(
                CheckName.SANITIZER,
                SKIPPED,
                "--no-sanitize: memory safety not checked; grade without it before you hand in",
                {"code": Code.NO_SANITIZE},
            )
        elif not self.gpu and self.job.emulated:
            self.running = Check(
                CheckName.SANITIZER,
                SKIPPED,
                "no GPU found: your kernels ran on the CPU emulator, where "
                "AddressSanitizer checked every access; races are not checked (a clean CPU run is no "
                "race check): compute-sanitizer's racecheck needs a GPU",
                {"code": Code.NO_GPU},
            )
        elif not self.gpu:
            self.running = Check(
                CheckName.SANITIZER,
                SKIPPED,
                "no GPU found: compute-sanitizer needs one; run `kcourse grade` "
                "on a machine with an NVIDIA GPU to check races and out-of-bounds accesses",
                {"code": Code.NO_GPU},
            )
        else:
            self.running = sanitize.start(
                self.target.spec,
                self.target.variant,
                self.path,
                self.job.learner_library,
                self.visible_devices,
                boxed=self.job.box is not None,
                box_home=self.job.box_home,
            )

    def leave_running(self) -> None:
        """The verdict goes out now; the tools' verdict follows (settle_sanitizer), unless it is already known."""
        if isinstance(self.running, sanitize.Sanitizer):
            self.done = True
            self.result.add(
                Check(
                    CheckName.SANITIZER,
                    SKIPPED,
                    "compute-sanitizer is still running: its verdict follows",
                    {"code": PENDING},
                )
            )
            self.result.pending_sanitizer = self.running
        else:
            self.finish()

    def finish(self) -> None:
        if self.done or self.running is None:
            return
        self.done = True
        if isinstance(self.running, Check):
            self.result.add(self.running)
            return
        started = time.monotonic()
        self.result.add(self.running.collect())
        self.result.phases["sanitizer"] = round(time.monotonic() - started, 3)  # the wait, not the tools' time


def settle_sanitizer(result: GradeResult, spec, superseded: Callable[[], bool]) -> bool:
    """For a grade with sanitize_code=BACKGROUND (kcourse watch): wait for the tools left running after
    the verdict and put their verdict in place of the pending check; stop them if `superseded()` (the
    learner saved again). True when the verdict changed and the result was finished again."""
    pending = getattr(result, "pending_sanitizer", None)
    if pending is None:
        return False
    result.pending_sanitizer = None
    while not pending.finished():
        if superseded():
            pending.stop()
            _replace_pending(
                result,
                Check(
                    CheckName.SANITIZER,
                    SKIPPED,
                    "stopped: you saved again before compute-sanitizer finished; the next grade checks the new file",
                    {"code": Code.SANITIZER_SUPERSEDED},
                ),
            )
            return True
        time.sleep(0.1)
    _replace_pending(result, pending.collect())
    hints.annotate(result, spec)
    return True


def _replace_pending(result: GradeResult, check: Check) -> None:
    result.checks = [c for c in result.checks if c.details.get("code") != PENDING] + [check]
    result.verdict = ""
    result.finish()


def _add_skipped_speed(result: GradeResult, gpu: bool, quick: bool, variant, emulated: bool = False) -> None:
    if any(c.name == "speed" for c in result.checks) or any(c.status in (FAILED, ERROR) for c in result.checks):
        return
    if quick:
        result.add(
            Check(
                CheckName.SPEED,
                SKIPPED,
                "--quick: numerics and integrity only; grade without --quick for the speed verdict",
                {"code": Code.QUICK},
            )
        )
    elif not gpu and not variant.kind_of.gpu_to_run:
        ran = "under the Triton interpreter" if variant.kind_of.interpreted else "on the CPU"
        result.add(
            Check(
                CheckName.SPEED,
                SKIPPED,
                f"no GPU found: timing skipped; numerics ran {ran}",
                {"code": Code.NO_GPU},
            )
        )
    elif not gpu and emulated:
        result.add(
            Check(
                CheckName.SPEED,
                SKIPPED,
                "no GPU found: timing skipped; numerics ran on the CPU emulator (CUDA's semantics, not its speed)",
                {"code": Code.NO_GPU},
            )
        )


def _check_kit_untouched(before: tuple[dict[str, bytes], tuple[int, str]], result: GradeResult) -> None:
    """A kit file the learner's run changed (possible only where no box ran) is put back as it was before the
    run, so a changed kit never judges a later grade; the grade fails, naming it."""
    touched = kit.restore(before[0])
    if kit.rewritten(store.results_path(), before[1]):
        touched.append(str(store.results_path()))
    if touched:
        result.add(
            Check(
                CheckName.INTEGRITY,
                FAILED,
                f"your code changed files of the kit while it ran: {', '.join(touched[:5])} "
                "(the kit's files were put back as they were). A kernel must not touch the grader, the specs, "
                "the references or your results: remove that code and grade again",
                {"code": Code.KIT_MODIFIED, "files": touched},
            )
        )


def _lint_for_the_gpu(path: Path, result: GradeResult) -> None:
    """The interpreter runs kernels a GPU refuses to compile (triton_lint.py): said on the CPU, where it passed."""
    from grader.toolchain import triton_lint

    found = triton_lint.plain_globals_in_kernels(path.read_text(errors="replace"))
    if found:
        result.add(Check(CheckName.GPU_COMPILE, FAILED, triton_lint.message(path, found), {"code": Code.PLAIN_GLOBAL}))


def _run_tool(child: sandbox.Child, job: Job, timeout: float, result: GradeResult) -> None:
    """profile / tune: the child reports findings, not verdicts (failures of the learner's code still are). The
    wait goes through a ChildLink, as a grade's does: "still running" lines at a terminal, and each step the child
    names (tune: the configuration it tries) on the live line where one is drawn."""
    try:
        result.device = child.wait_ready().get("device", {})  # the GPU the figures were taken on, as a grade says
        link = ChildLink(child, result, timeout, timeout)
        link.start(job, time.monotonic())
        with gpu_lock.exclusive(child.pid):  # tune and profile time: no other grade of ours on the GPU, the CPU first
            _tool_events(link, job, result)
    except (sandbox.ChildTimeout, sandbox.ChildGone) as exc:
        result.add(_tool_stopped(child, exc, timeout))


def _tool_stopped(child: sandbox.Child, exc: Exception, timeout: float) -> Check:
    """The tool run's child stopped answering: before it was ready (not the learner's code), or after."""
    if child.ready is None:
        return not_started(child, exc)
    child.kill()
    death = sandbox.Death(isinstance(exc, sandbox.ChildTimeout), child.proc.wait(), child.last_step)
    code, message = sandbox.death_message(death, timeout)
    return Check(CheckName.RUN, FAILED, message, {"code": code})


def _tool_events(link: ChildLink, job: Job, result: GradeResult) -> None:
    """The tool run's events, until its findings or a failure of the learner's code."""
    while True:
        event = link.next_event()
        if event["event"] == Event.TOOL:
            result.extra[job.mode] = event["result"]
            result.add(Check(CheckName.LOAD, PASSED, f"{Path(job.learner).name} loaded"))
            return
        if event["event"] == Event.CHECK:
            result.add(_tool_failure(event.get("check")))
            return
        if event["event"] == Event.DONE:
            raise sandbox.ChildGone


def _tool_failure(reported) -> Check:
    """A failure of the learner's code the tool run reports, as it came; anything else it claims is a forgery."""
    try:
        check = Check(**reported)
    except TypeError:  # not a check's fields: a forgery too
        check = None
    if check is not None and check.status in (FAILED, ERROR):
        return check
    return Check(CheckName.RUN, FAILED, "the tool run reported a verdict of its own", {"code": Code.FORGED_VERDICT})


def judge_ahead(target: Target, child: sandbox.Child | None, seed: int, quick: bool, timed_sizes: str) -> Judge | None:
    """The judge of a grade that has not started: kcourse watch makes the next grade's (its child and seed
    chosen) as soon as a grade ends, so the large inputs and their references are drawn while the learner
    edits, not after the save. None where that grade will run no child (a compile check)."""
    if child is None:
        return None
    gpu = child.device == "cuda"
    timing = gpu and not quick
    solution_here = solution_file(target.spec, target.variant).exists()
    calibration_data = _calibration(target)[0] if timing and not solution_here else None
    result = GradeResult(
        exercise=target.spec.id, lang=target.variant.lang, source="", seed=seed
    )  # the grade's own replaces it
    judge = Judge(
        target.spec, target.variant, child, result, seed, _timeout(target.variant, None, gpu), timing, calibration_data
    )
    judge.prefetch(Job(timed_sizes=timed_sizes))
    return judge


def _timeout(variant, timeout_s: float | None, gpu: bool) -> float:
    return timeout_s or variant.timeout_s * (1 if gpu else INTERPRETER_TIMEOUT_FACTOR)


def _calibration(target: Target) -> tuple[dict | None, str | None]:
    """No solution here: the speed bar comes from the instructor's calibration file (error text if corrupt)."""
    try:
        return calibration.load().get(target.key, {}), None
    except calibration.CalibrationError as exc:
        return None, str(exc)


def _build_raw_cuda(path: Path, solution: Path | None, job: Job, result: GradeResult, gpu: bool, variant) -> bool:
    arch = build.gpu_arch() if gpu else None
    # Without a GPU nvcc compiles the kernels alone (errors, resources): no host library can run here, and the CPU
    # emulator's own build compiles the host code, beside nvcc's
    emulator = _emulator_build_ahead(path) if not gpu and job.emulated else None
    built = build.build_variant(path, variant, arch, device_only=not gpu)
    result.build = built.to_dict()
    if built.skipped or not built.ok:
        return _not_built(built, path, job, result, gpu, variant, emulator)
    result.add(_built_check(built, path, variant, job, gpu))
    if not job.emulated and not _has_entry_point(built.library and Path(built.library), path, variant, result):
        return False  # (an emulated file's entry point is checked on the emulator's library)
    if not gpu:
        return _build_emulated(path, job, result, variant, ahead=emulator)
    job.learner_library = built.library
    if solution is not None:
        solution_build = build.build_variant(solution, variant, arch)
        job.solution_library = solution_build.library if solution_build.ok else None
        if not solution_build.ok:
            job.solution = None
    return True


def _not_built(built, path: Path, job: Job, result: GradeResult, gpu: bool, variant, emulator: Future | None) -> bool:
    """nvcc's build did not give a library: a library the machine lacks (skipped, not the learner's), no nvcc
    where the emulator can still run the file, or the learner's compile errors. True where the grade goes on."""
    if built.skipped:  # the machine lacks a library the spec links or requires (cuBLAS, ThunderKittens)
        result.add(Check(CheckName.BUILD, SKIPPED, built.log, {"code": built.skip_code}))
        result.add(
            Check(CheckName.NUMERICS, SKIPPED, "not built: " + built.log.split(":")[0], {"code": built.skip_code})
        )
        return False
    if built.log == build.NVCC_HINT and not gpu and job.emulated:
        result.add(
            Check(
                CheckName.BUILD,
                SKIPPED,
                "no nvcc here: your file was not compiled for a GPU (nvcc's errors and its "
                f"resource report need it: {build.NVCC_HINT}); its kernels still run on the CPU emulator",
                {"code": Code.NO_NVCC},
            )
        )
        return _build_emulated(path, job, result, variant, nvcc_checked=False, ahead=emulator)
    code = Code.NO_NVCC if built.log == build.NVCC_HINT else Code.BUILD_ERROR
    result.add(
        Check(
            CheckName.BUILD,
            ERROR if code == "no_nvcc" else FAILED,
            build.failure_message(path, built.log) if code == "build_error" else built.log,
            {"code": code},
        )
    )
    return False


def _built_check(built, path: Path, variant, job: Job, gpu: bool) -> Check:
    """The passed build check: for which GPU, how long (or cached), and the kernels' resource report."""
    timing = "cached" if built.cached else f"{built.seconds:.2f} s"
    if not gpu:
        timing += "; the kernels: " + ("the CPU emulator compiles the host code" if job.emulated else "no GPU here")
    report, occupied = _resource_report(built, path, variant, gpu)
    return Check(
        CheckName.BUILD,
        PASSED,
        f"compiled for {built.arch} ({timing})\n{report}",
        {"resources": built.resources, "occupancy": occupied},
    )


def _has_entry_point(library: Path | None, path: Path, variant, result: GradeResult) -> bool:
    """The library exports the stub's `extern "C"` function with its parameters; else a failed load check."""
    problem = build.check_entry_point(library, path, variant.entry, len(variant.args))
    if problem:
        code, message = problem
        result.add(Check(CheckName.LOAD, FAILED, message, {"code": code}))
    return problem is None


def _emulator_build_ahead(path: Path) -> Future:
    """The CPU emulator's build of the learner's file, started now in a thread beside nvcc's compile of its kernels:
    both only compile, so on a machine of several cores the grade waits for the longer, not for both. A grade that
    ends at nvcc's errors leaves it to finish (its library lands whole in the build cache, or not at all)."""
    future: Future = Future()

    def run() -> None:
        try:
            future.set_result(cuda_cpu.build(path))
        except BaseException as exc:  # handed to the grade, which reads it as it would the call's own
            future.set_exception(exc)

    threading.Thread(target=run, name="kcourse-emulator-build", daemon=True).start()
    return future


def _build_emulated(
    path: Path, job: Job, result: GradeResult, variant, nvcc_checked: bool = True, ahead: Future | None = None
) -> bool:
    """No GPU: the file built for the CPU emulator (cuda_cpu), whose library the child runs; or the numerics
    skipped, saying why (the file uses what the emulator lacks, or the emulator's own build failed)."""
    if not job.emulated:
        _no_gpu_no_emulator(result)
        return False
    started = time.monotonic()
    built = ahead.result() if ahead is not None else cuda_cpu.build(path)
    result.phases["emulator_build"] = round(time.monotonic() - started, 3)  # what the grade waited for, after nvcc
    if not built.ok:
        _emulator_build_failed(built, path, result, variant, nvcc_checked)
        return False
    if not _has_entry_point(Path(built.library), path, variant, result):
        return False
    job.learner_library = built.library
    return True


def _no_gpu_no_emulator(result: GradeResult) -> None:
    why = getattr(result, "emulation", "") or "the CPU emulation is not available here"
    result.add(
        Check(
            CheckName.NUMERICS,
            SKIPPED,
            f"no GPU found and {why}: compiled and checked the resource report "
            "only; run `kcourse grade` on a machine with an NVIDIA GPU to check numerics",
            {"code": Code.NO_GPU},
        )
    )
    result.add(Check(CheckName.SPEED, SKIPPED, "no GPU found: timing skipped", {"code": Code.NO_GPU}))


def _emulator_build_failed(built, path: Path, result: GradeResult, variant, nvcc_checked: bool) -> None:
    """Whose the failure is: the learner's where no nvcc read the file, or where nvcc's whole build fails too
    (_host_code_fails); else the emulator's gap, and the numerics are skipped, saying so."""
    if not nvcc_checked:  # the host compiler is the only one that read the file: its errors are the learner's
        result.checks = [c for c in result.checks if c.name != "build"]  # the skipped nvcc check it replaces
        result.add(
            Check(
                CheckName.BUILD,
                FAILED,
                "the CPU emulator's build (no nvcc here) failed:\n" + built.log.strip()[-3000:],
                {"code": Code.BUILD_ERROR},
            )
        )
        return
    if _host_code_fails(path, variant, result):
        return
    result.add(  # nvcc accepted the file: what the emulator's header lacks, not the learner's mistake
        Check(
            CheckName.NUMERICS,
            SKIPPED,
            "the CPU emulator could not build your file (nvcc could): "
            f"{_first_error(built.log)} — "
            "numerics need a GPU for this file; tell your instructor, it is the emulator's gap",
            {"code": Code.EMULATOR_BUILD_ERROR, "log": built.log[-4000:]},
        )
    )


def _host_code_fails(path: Path, variant, result: GradeResult) -> bool:
    """nvcc compiled the kernels alone and the emulator's build failed: nvcc's whole build (host code too) says
    whether the error is the learner's (then the build check fails with nvcc's errors) or the emulator's gap."""
    whole = build.build_variant(path, variant, None)
    if whole.ok:
        return False
    result.checks = [c for c in result.checks if c.name != "build"]  # the kernels' check it replaces
    result.add(Check(CheckName.BUILD, FAILED, build.failure_message(path, whole.log), {"code": Code.BUILD_ERROR}))
    return True


def _first_error(log: str) -> str:
    lines = log.strip().splitlines()
    return next((line.strip() for line in lines if "error" in line), lines[0] if lines else "no compiler output")


def _compile_check_torch_op(path: Path, result: GradeResult, variant=None) -> None:
    built = build.compile_check_torch_op(_project_file(path, variant))
    result.build = built.to_dict()
    if built.log == build.NVCC_HINT:
        result.add(Check(CheckName.BUILD, ERROR, built.log, {"code": Code.NO_NVCC}))
        return
    if built.skipped:
        result.add(Check(CheckName.BUILD, SKIPPED, built.log, {"code": Code.TOOLKIT_INCOMPLETE}))
        result.add(Check(CheckName.NUMERICS, SKIPPED, "no GPU found: the operator was not run", {"code": Code.NO_GPU}))
        return
    if not built.ok:
        result.add(Check(CheckName.BUILD, FAILED, build.failure_message(path, built.log), {"code": Code.BUILD_ERROR}))
        return
    later = (
        f"; {BUILDS[variant.build]} builds the operator on a GPU"
        if variant is not None and variant.build != "jit"
        else ""
    )
    report, occupied = _resource_report(built, path, variant, False)
    result.add(
        Check(
            CheckName.BUILD,
            PASSED,
            f"compiled against torch's headers for {built.arch} "
            f"(compile only: nvcc's device pass, which reads the host code too{later})\n" + report,
            {"resources": built.resources, "occupancy": occupied},
        )
    )
    result.add(
        Check(CheckName.NUMERICS, SKIPPED, "no GPU found: the operator was compiled, not run", {"code": Code.NO_GPU})
    )
    result.add(Check(CheckName.SPEED, SKIPPED, "no GPU found: timing skipped", {"code": Code.NO_GPU}))


def _resource_report(built: build.BuildResult, path: Path, variant, gpu: bool) -> tuple[str, list[dict]]:
    """nvcc's report per kernel, then the theoretical occupancy of each kernel that declares __launch_bounds__."""
    lines, figures = occupancy.describe(built.resources, path.read_text(errors="replace"), built.arch, gpu)
    return build.format_resources(built.resources) + lines, figures


def _project_file(path: Path, variant) -> Path:
    """The learner's file where its project's given headers are beside it (a copy with the spec's `files`)."""
    if variant is None or not variant.files:
        return path
    from grader.core.paths import build_cache_dir

    folder = build_cache_dir() / ("check-" + op_build.extension_name(variant, path))
    return op_build.stage(variant, path, folder) / variant.stub
