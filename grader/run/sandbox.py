"""The child process that runs untrusted code, and how the parent talks to it.

The child is started before the job is known (`Child.start`): it imports torch, creates its CUDA
context and says "ready", so that start-up overlaps the parent's build, or, in `kcourse watch`, the
learner's typing. It then reads one job and its trials as JSON lines on stdin and answers with events
on a pipe of its own (JSON lines). It gets its own process group so a hang is killed with everything
it started; its output (the learner's prints) goes to a file and is trimmed; when it dies, its exit
status and last step become a verdict such as "crashed with SIGSEGV while checking n=1000003"."""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.child.box import release_pids_cgroup
from grader.core.paths import course_root
from grader.core.vocabulary import Code, Event
from grader.kinds import kind_named
from grader.run import forkserver

OUTPUT_LIMIT = 4000
START_LIMIT_S = 180.0  # importing torch and creating a CUDA context; ceilings are measured once per GPU
SHM_MIN_FREE = 8 * 2**30  # trial files go to /dev/shm when it has room (no disk writes for 1 GB inputs)
# torch's profiler (used to catch torch calls) logs lines like "USDT:2026-.. Sync...cpp:52] profiler_start"
_PROFILER_NOISE = re.compile(r"^(USDT|INFO|WARNING|ERROR):\d{4}-\d\d-\d\d [^\]]*\.cpp:\d+\].*$\n?", re.M)


class ChildGone(Exception):
    """The child exited or closed its event pipe; `check`: the failure it reported instead of being ready."""

    def __init__(self, check: dict | None = None):
        super().__init__()
        self.check = check


class ChildTimeout(Exception):
    """The child ran past its deadline."""


def trim(text: str, limit: int = OUTPUT_LIMIT) -> str:
    text = _PROFILER_NOISE.sub("", text)
    return text if len(text) <= limit else "... (earlier output trimmed)\n" + text[-limit:]


def _work_dir() -> Path:
    shm = Path("/dev/shm")
    try:
        base = shm if shm.is_dir() and shutil.disk_usage(shm).free > SHM_MIN_FREE else None
    except OSError:
        base = None
    return Path(tempfile.mkdtemp(prefix="kcourse-", dir=base))


def box_home(name: str = "local") -> Path:
    """A child's own writable caches (Triton's kernels and autotuning results), by owner: the learner's own
    grades share "local"; each grade-batch submission folder gets its own, so no learner's box reads
    kernels another learner's grade compiled. The job names it; the child switches to it before the box."""
    from grader.core.paths import build_cache_dir

    path = build_cache_dir().parent / "box" / re.sub(r"[^A-Za-z0-9_.-]", "_", name)
    path.mkdir(parents=True, exist_ok=True)
    return path


def child_env(device: str, extra: dict[str, str] | None = None, scratch: Path | None = None) -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1", KCOURSE_CHILD_DEVICE=device, **(extra or {}))
    home = box_home()
    # CUDA's own JIT cache is off: it would be one more folder shared by every learner's box
    env.update(TRITON_CACHE_DIR=str(home / "triton"), TRITON_HOME=str(home), CUDA_CACHE_DISABLE="1")
    # torch.compile (a custom operator's checks) compiles in the child itself, not through a pool of compile-worker
    # processes started inside the box: CI saw inductor fail there now and then (BackendCompilerFailed)
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    if scratch is not None:
        env["TMPDIR"] = str(scratch)  # nvcc's and ptxas's temporary files: the box writes nowhere else
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(course_root()), env.get("PYTHONPATH")]))
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"  # read by triton at import: set before the child starts
    # Autotuning results kept on disk, keyed by the kernel's source, its configs and the tuning key: a fresh
    # child per grade otherwise re-benchmarks every config of every key (an FA v2 grade spent most of its
    # ~45 s there, the solution's and yours). An edit to the kernel or its configs tunes again.
    env.setdefault("TRITON_CACHE_AUTOTUNING", "1")
    return env


class Child:
    """One worker process. `send` writes a JSON line to its stdin; `event` reads its next event."""

    @staticmethod
    def visible_devices_for(extra_env: dict[str, str] | None) -> str | None:
        """The child's CUDA_VISIBLE_DEVICES: what a multi-GPU batch gave it, else what this grader was given (the
        child inherits it); the sanitizer, the references and gpushare look at that GPU, not the first."""
        return (extra_env or {}).get("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))

    def __init__(
        self,
        device: str,
        extra_env: dict[str, str] | None = None,
        wrapper: list[str] | None = None,
        module: str = "grader.child.worker",
        imports: list[str] | None = None,
    ):
        """`module`: the child's program, speaking the worker protocol (grader.capstone.child does too). `imports`:
        modules its grade will import on first use (op_checks.first_use_imports), imported before the job comes:
        by a fork server, once for all its children, else by the child while it waits."""
        self.device = device
        self.preload = {k: v for k, v in (extra_env or {}).items() if k in ("LD_PRELOAD", "ASAN_OPTIONS")}
        self.visible_devices = self.visible_devices_for(extra_env)
        self.wrapped = bool(wrapper)  # run under a tool (ncu) that writes its report after the worker exits
        self.dir = _work_dir()
        self.last_step = "starting"
        self.ready: dict[str, Any] | None = None
        self.started = time.monotonic()
        read_fd, write_fd = os.pipe()
        self._output = open(self.dir / "output.txt", "wb")
        env = child_env(device, extra_env, self.dir)
        if imports:  # a fresh child imports them once it has said it is ready (worker.main)
            env["KCOURSE_CHILD_IMPORTS"] = ",".join(imports)
        self.proc = forkserver.wanted(device, wrapper, module) and forkserver.spawn(
            env, str(self.dir), self._output.fileno(), write_fd, imports
        )
        if not self.proc:  # a process of its own (the fork server's is for many grades without a GPU)
            command = [*(wrapper or []), sys.executable, "-m", module, str(write_fd)]
            self.proc = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=self._output,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.dir,
                pass_fds=(write_fd,),
                start_new_session=True,
            )
        os.close(write_fd)
        self._events = read_fd
        self._buffer = b""

    # --- talking ---------------------------------------------------------------------------------
    def send(self, message: dict[str, Any]) -> None:
        try:
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass  # the child is gone: the event reader reports how it died

    def event(self, deadline: float) -> dict[str, Any]:
        """The next event (a dict with "event"); raises ChildTimeout past `deadline`, ChildGone at EOF."""
        while b"\n" not in self._buffer:
            # past the deadline, what the child already sent is still read: a caller that comes late (a grade
            # that waited for the GPU lock) finds the event that came in time
            left = max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self._events], [], [], left)
            if not ready:
                raise ChildTimeout
            chunk = os.read(self._events, 1 << 16)
            if not chunk:
                raise ChildGone
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            message = json.loads(line)
        except ValueError:
            message = None
        if not isinstance(message, dict) or "event" not in message:
            return {"event": Event.GARBLED, "text": line[:200].decode(errors="replace")}
        if message["event"] == Event.STEP:
            self.last_step = str(message.get("text", ""))[:200]
        return message

    def wait_ready(self, limit_s: float = START_LIMIT_S) -> dict[str, Any]:
        if self.ready is None:
            message = self.event(self.started + limit_s)
            while message["event"] == Event.STEP:
                message = self.event(self.started + limit_s)
            if message["event"] != Event.READY:
                raise ChildGone(message.get("check") if message["event"] == Event.CHECK else None)
            self.ready = message
        return self.ready

    @property
    def pid(self) -> int:
        """The worker's own pid, as its ready event said before learner code ran (the process started may be a
        wrapper, ncu); the process started until then."""
        return int((self.ready or {}).get("pid") or self.proc.pid)

    # --- ending ----------------------------------------------------------------------------------
    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def finish(self, grace_s: float = 10.0) -> int | None:
        """Close stdin, wait a little for a clean exit, then kill; returns the exit status."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            return self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.proc.wait()

    def output(self, limit: int = OUTPUT_LIMIT) -> str:
        """What the child printed, its last `limit` characters (a learner's prints can be long)."""
        self._output.flush()
        try:
            return trim((self.dir / "output.txt").read_bytes().decode(errors="replace"), limit)
        except OSError:
            return ""

    def close(self) -> None:
        if self._events is None:
            return  # closed already
        self.kill()
        self.proc.wait()
        release_pids_cgroup(self.proc.pid)
        self._output.close()
        os.close(self._events)
        self._events = None
        shutil.rmtree(self.dir, ignore_errors=True)


# Kinds of exercise that only compile on a machine without a GPU: no child runs them there.


def early_child(kind: str = "", imports: list[str] | None = None) -> Child | None:
    """The worker, started before the grader imports torch, so that the two start-ups overlap (a one-shot
    `kcourse grade` pays them once, not one after the other): a GPU worker where nvidia-smi sees a GPU, else
    the interpreter's or the CUDA emulator's (KCOURSE_DEVICE=cpu too); None where no child will run. grade()
    replaces a guess that turns out wrong (torch without CUDA). `kind`: the exercise's, for what the worker
    pre-warms; `imports`: what its checks import on first use (op_checks.first_use_imports)."""
    from grader.toolchain.build import gpu_arch

    return child_for(kind, os.environ.get("KCOURSE_DEVICE", "").lower() != "cpu" and bool(gpu_arch()), imports)


def child_for(kind: str, gpu: bool, imports: list[str] | None = None) -> Child | None:
    """The worker for an exercise of this kind, pre-warmed for it: on the GPU, the interpreter's, or the CUDA
    emulator's; None where no child runs (a torch operator without a GPU is only compiled)."""
    if not gpu and kind_named(kind).gpu_to_run:
        return _emulator_child(kind)
    return Child("cuda" if gpu else "cpu", prewarm_env(kind), imports=imports)


def _emulator_child(kind: str) -> Child | None:
    """Without a GPU, a raw CUDA file's worker runs it on the CPU emulator, AddressSanitizer's runtime preloaded;
    None for a kind only compiled here or where this machine cannot emulate. A file the emulator turns out not to
    take (a library it links, a feature it lacks) has this child closed by its grade (grade._grade_file)."""
    from grader import cuda_cpu

    if not kind_named(kind).nvcc or not cuda_cpu.mode()[0]:
        return None
    return Child("cpu", {**prewarm_env(kind), **cuda_cpu.child_env()})


# What a worker pays while it waits for the job (worker.warm_up reads it), by kind: a torch operator's
# integrity check runs under torch's profiler, whose first use costs seconds; a Triton file's first line
# imports triton (0.3 s).
def prewarm_env(kind: str) -> dict[str, str]:
    prewarm = kind_named(kind).prewarm if kind else None
    return {"KCOURSE_CHILD_PREWARM": prewarm} if prewarm else {}


@dataclass
class Death:
    timed_out: bool
    returncode: int | None
    last_step: str


def death_message(death: Death, timeout_s: float) -> tuple[str, str]:
    """(code, message) for a child that stopped answering."""
    where = f" while {death.last_step}"
    if death.timed_out:
        return Code.TIMEOUT, (
            f"your code ran past the {timeout_s:g} s limit{where} and was stopped — a loop that never "
            "ends? (a loop bound that never changes, a barrier not every thread reaches, a spin-wait)"
        )
    code = death.returncode or 0
    if code < 0:
        name = _signal_name(-code)
        hint = {
            "SIGSEGV": " — a bad pointer: a device pointer used on the host, or an index past an array?",
            "SIGABRT": " — an assertion or a C++ exception in your code?",
            "SIGFPE": " — an integer division by zero?",
        }.get(name, "")
        return Code.CRASH, f"your code crashed with {name}{where}{hint}"
    return Code.CRASH, (
        f"the grading process ended unexpectedly (exit status {code}){where} — does your code call "
        "exit() or close file descriptors? Look at your program's output below"
    )


def start_failure(exc: Exception, returncode: int | None) -> tuple[str, str]:
    """(code, message) for a child that never became ready: no learner code had run, so it is not the learner's."""
    if isinstance(exc, ChildGone) and exc.check:
        said = str(exc.check.get("message", "")).removeprefix("internal grader error: ")
        why = f"it reported: {said}"
    elif isinstance(exc, ChildTimeout):
        why = f"it was not ready within {START_LIMIT_S:g} s (importing torch, creating the GPU context)"
    else:
        why = f"it ended before it was ready (exit status {returncode})"
    return Code.CHILD_START, (
        f"the grading process could not start, before your code ran: {why} — grade again (on a busy machine, "
        "once it is quieter); if it persists, run `kcourse env-check`"
    )


def _signal_name(number: int) -> str:
    """SIGSEGV, ...; a signal Python has no name for (a real-time one) by its number."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
