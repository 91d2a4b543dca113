"""One GPU shared by several grading processes at once, each timing with the GPU to itself.

Off unless `KCOURSE_GPU_LOCK` names a file: the kit's GPU tests set it to run grades in parallel (pytest-xdist
workers on one GPU machine, docs/testing.md); a learner's one grade at a time needs no lock. With it on:

- a grade holds the lock *shared* while its child, the sanitizer and the reference process use the GPU
  (numerics: any number of grades at once; builds happen before, outside the lock), and until its child has
  ended, and its reference process too: a CUDA context torn down stalls the other processes' kernels for a moment
  (judge._end_gpu_processes);
- it holds the lock *exclusive* while the child times (and while a tool such as `tune` runs): no other process
  of ours uses the GPU then, so the timings and the probe are what a lone grade would measure. The timing child and
  the thread that reads its clock get the CPU first meanwhile (`FAVOURED_NICE`, where the process may raise a
  priority: root): the other grades' builds and CPU work go on, and a kernel whose launch takes Python time would
  otherwise be timed as host-bound.

Readers first, for a while: a grade that waits to time lets other grades start their numerics for `PATIENCE_S`
(trying the lock every `POLL_S`), and takes it the moment no grade holds it. Writers first made one long holder (a
compute-sanitizer run, a hung kernel's time-out) stall every worker: the waiting timer stopped new numerics while
that one ran on. Past its patience it stops new grades from starting their numerics: it holds a turnstile
(`<file>.turn`) shared, and a grade takes the turnstile exclusively, for an instant, before its shared hold of the
lock. Timers go in batches: a timer that finds the turnstile held joins at once, without its patience, so every
grade waiting to time does so after one wait for the numerics already running (the drain), not one drain each.
Numerics start again when the batch's last timer is done. `KCOURSE_GPU_LOCK_PATIENCE_S` sets the patience.
A grade whose numerics are under way lets a waiting batch go first at a pause in them (`let_timers_go`: between
trials, its child idle): the batch then waits for one trial of each grade, not for the longest numerics phase
running (a cold attention backward's, over a minute), while the GPU does little.

The lock is `flock(2)` on open files: held by the trusted grader process, never by the boxed child, and released
by the kernel when the process dies. A process that holds it exclusively exports `KCOURSE_GPU_LOCK_HELD`, so the
`kcourse` processes it starts (a test that times in its own process and runs the CLI) do not wait for it. A build
sets an exclusive hold aside (`set_aside`): compiling needs no GPU.

A grade's helper process (the references' GPU process, run/heavy.py) holds it `beside` the grade: shared, but not
queued behind a waiting timer, since its grade may hold the lock shared and wait for its results; it waits only while
a timer holds the lock, and at most `BESIDE_LIMIT_S`, then goes on unlocked.

A Triton grade compiles first (child/compile_steps.py): its child compiles what its trials and its timed runs will
launch, Triton's autotuning included, launching nothing, before the numerics start and before the grade asks for the
exclusive hold; the grade steps out of its shared hold meanwhile (`step_out`). Compiling is CPU work: inside the
exclusive hold it kept every other grade off the GPU while the GPU did nothing, and inside a shared one it kept a
batch of timers waiting.

One thread per process takes the lock (the grade's main thread). `KCOURSE_GPU_LOCK_LOG` names a file where each hold
appends a JSON line (mode, when asked, seconds waited and held, the pytest test): where a parallel GPU test run's
time goes (scripts/gpu_lock_report.py sums it)."""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

ENV = "KCOURSE_GPU_LOCK"
HELD_ENV = "KCOURSE_GPU_LOCK_HELD"
PATIENCE_ENV = "KCOURSE_GPU_LOCK_PATIENCE_S"
PATIENCE_S = 30.0  # how long a timer waits beside new numerics before it stops them
POLL_S = 0.02
BESIDE_LIMIT_S = 120.0  # a helper waits this long for a timer to finish, then works unlocked (never a deadlock)
LOG_ENV = "KCOURSE_GPU_LOCK_LOG"
FAVOURED_NICE = -10  # the timing processes' CPU priority while they hold the GPU alone (where that may be raised)


class _Lock:
    """This process's hold on the lock file: shared holds counted, an exclusive hold nested inside any."""

    def __init__(self, path: str):
        self.path = path
        self.shared = 0
        self.exclusive = 0
        self.fd: int | None = None  # the lock file, open while this process holds it
        self.turn: int | None = None  # the turnstile, open while this process holds it exclusively
        self._mutex = threading.Lock()  # let_timers_go (a grade's input thread) against the releases

    def _open(self, suffix: str = "") -> int:
        return os.open(self.path + suffix, os.O_RDWR | os.O_CREAT, 0o666)

    def acquire_shared(self) -> None:
        self.shared += 1
        if self.shared == 1 and not self.exclusive:
            self.fd = self._open()
            with self._turnstile():
                fcntl.flock(self.fd, fcntl.LOCK_SH)

    def release_shared(self) -> None:
        with self._mutex:
            self.shared -= 1
            if self.shared == 0 and not self.exclusive:
                self._close()

    def batch_waiting(self) -> bool:
        """Whether this process reads while a batch of timers waits for it."""
        if not self.shared or self.exclusive:
            return False
        turn = self._open(".turn")
        try:
            return _batch_forming(turn)
        finally:
            os.close(turn)

    def let_timers_go(self) -> None:
        """The shared hold let go while a waiting batch of timers goes, and taken again after it (through the
        turnstile, as new numerics are); kept where no batch waits. A hold that ended meanwhile stays ended."""
        with self._mutex:
            if not self.batch_waiting():
                return
            self._close()
        self._rejoin()

    def step_out(self) -> bool:
        """The shared hold let go until `_rejoin` (its count kept); False where there is none to let go (none held,
        or held alone)."""
        with self._mutex:
            if not self.shared or self.exclusive or self.fd is None:
                return False
            self._close()
            return True

    def _rejoin(self) -> None:
        """The shared hold taken again after a pause, through the turnstile (once a waiting batch of timers is
        done), as new numerics take it. A hold that ended meanwhile stays ended."""
        fd = self._open()
        with self._turnstile():
            fcntl.flock(fd, fcntl.LOCK_SH)
        with self._mutex:
            if self.shared and not self.exclusive and self.fd is None:
                self.fd, fd = fd, None
        if fd is not None:
            os.close(fd)

    def acquire_exclusive(self) -> None:
        self.exclusive += 1
        if self.exclusive > 1:
            return
        self._close()  # our own shared hold goes first: two graders each holding one would deadlock
        self._take_alone()

    def release_exclusive(self) -> None:
        self.exclusive -= 1
        if self.exclusive:
            return
        os.environ.pop(HELD_ENV, None)
        if self.shared:
            fcntl.flock(self.fd, fcntl.LOCK_SH)  # back to reading, before others may write
        else:
            self._close()
        self._leave_turnstile()

    @contextmanager
    def aside(self) -> Iterator[None]:
        """An exclusive hold let go for the block and taken again after it (shared holds stay counted)."""
        if not self.exclusive:
            yield
            return
        os.environ.pop(HELD_ENV, None)
        self._close()
        self._leave_turnstile()
        try:
            yield
        finally:
            self._take_alone()

    def _take_alone(self) -> None:
        """The exclusive hold itself, from holding nothing: tried while readers come and go, for our patience or
        until a batch of timers forms; then in the batch (the turnstile held shared), once the readers already in
        finish and the timers before us are done."""
        self.fd = self._open()
        turn = self._open(".turn")
        if _patient(self.fd, turn, _patience()):
            os.close(turn)
        else:
            self.turn = turn
            fcntl.flock(self.turn, fcntl.LOCK_SH)  # new readers now wait until the batch is done
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        os.environ[HELD_ENV] = str(os.getpid())

    def _leave_turnstile(self) -> None:
        if self.turn is not None:
            os.close(self.turn)
            self.turn = None

    @contextmanager
    def _turnstile(self) -> Iterator[None]:
        turn = self._open(".turn")
        try:
            fcntl.flock(turn, fcntl.LOCK_EX)
            yield
        finally:
            os.close(turn)

    def _close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the file releases its lock
            self.fd = None


def _try_for(fd: int, seconds: float, mode: int, give_up=lambda: False) -> bool:
    """Whether `fd`'s lock (`mode`) was taken within `seconds`, trying every POLL_S without the turnstile and
    stopping early (False) once `give_up()` says so."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if give_up() or time.monotonic() >= deadline:
                return False
            time.sleep(POLL_S)


def _patient(fd: int, turn: int, seconds: float) -> bool:
    """Whether the lock `fd` was taken alone while readers come and go (True), or our patience ran out or a batch
    of timers formed meanwhile (False: join it)."""
    return _try_for(fd, seconds, fcntl.LOCK_EX, give_up=lambda: _batch_forming(turn))


def _batch_forming(turn: int) -> bool:
    """Whether timers hold the turnstile (a grade starting its numerics holds it for an instant: then a batch
    forms a little early, no harm)."""
    try:
        fcntl.flock(turn, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    fcntl.flock(turn, fcntl.LOCK_UN)
    return False


def _patience() -> float:
    value = os.environ.get(PATIENCE_ENV)
    return float(value) if value else PATIENCE_S


_locks: dict[str, _Lock] = {}


def _lock() -> _Lock | None:
    """This process's lock, or None where no lock is asked for or a process above this one holds it."""
    path = os.environ.get(ENV)
    held_by = os.environ.get(HELD_ENV)
    if not path or (held_by and held_by != str(os.getpid())):
        return None
    return _locks.setdefault(path, _Lock(path))


def shared():
    """Held while this grade's processes use the GPU without timing it."""
    return _holding("shared")


def exclusive(*favoured: int):
    """Held while this process's child times: no other holder of the lock uses the GPU meanwhile. `favoured`: the
    pids of the processes that time (the child), which with this thread get the CPU first while it is held."""
    return _holding("exclusive", favoured)


def sharing() -> bool:
    """Whether this process's grades share the GPU with others through the lock (it is on here)."""
    return _lock() is not None


def timers_waiting() -> bool:
    """Whether a batch of timers waits for this process's shared hold: its numerics should pause (let_timers_go)."""
    lock = _lock()
    return lock is not None and lock.batch_waiting()


def let_timers_go() -> None:
    """At a pause in this process's GPU work (no kernel of its grade running): a batch of timers waiting for its shared
    hold goes first, and the hold is taken again after it. Nothing where no batch waits or no lock is on."""
    lock = _lock()
    if lock is None:
        return
    asked = time.time()
    lock.let_timers_go()
    if time.time() - asked > POLL_S:
        _log("paused", asked, time.time())


def step_out() -> Callable[[str | None], None]:
    """While this grade's child compiles and launches nothing (compile_steps.compile_first): its shared hold let go,
    so a batch of timers need not wait for the compiles. Returns what takes the hold again (through the turnstile:
    after a waiting batch is done), given what ended the child's compiles early if anything did (logged); nothing to
    do where no shared hold is this process's."""
    lock = _lock()
    if lock is None or not lock.step_out():
        return lambda failed=None: None
    asked = time.time()

    def rejoin(failed: str | None = None) -> None:
        lock._rejoin()
        _log("stepped_out", asked, time.time(), {"failed": failed} if failed else {})

    return rejoin


@contextmanager
def set_aside() -> Iterator[None]:
    """Around a build: a process that holds the GPU alone lets it go meanwhile, since compiling uses no GPU, and
    takes it again after (other grades' numerics run during the build). The grader builds before it takes the lock,
    so this matters where code that times also builds: a test that times in its own process."""
    lock = _lock()
    if lock is None:
        yield
        return
    with lock.aside():
        yield


@contextmanager
def _holding(mode: str, favoured: tuple[int, ...] = ()) -> Iterator[None]:
    lock = _lock()
    if lock is None:
        yield
        return
    asked = time.time()
    getattr(lock, f"acquire_{mode}")()
    got = time.time()
    before = _favour((threading.get_native_id(), *favoured)) if mode == "exclusive" else {}
    try:
        yield
    finally:
        _restore(before)
        getattr(lock, f"release_{mode}")()
        _log(mode, asked, got, {"favoured": len(before)} if mode == "exclusive" else {})


def _favour(tids: tuple[int, ...]) -> dict[int, int]:
    """Each thread (a pid names a process's main thread) at FAVOURED_NICE; their priorities before, to restore.
    Skipped where it is not allowed (an ordinary user may only lower a priority) or the process is gone."""
    before = {}
    for tid in dict.fromkeys(tids):  # once each: the child may be this very process (a test's fake)
        try:
            was = os.getpriority(os.PRIO_PROCESS, tid)
            os.setpriority(os.PRIO_PROCESS, tid, min(was, FAVOURED_NICE))
            before[tid] = was
        except OSError:
            pass
    return before


def _restore(before: dict[int, int]) -> None:
    for tid, was in before.items():
        try:
            os.setpriority(os.PRIO_PROCESS, tid, was)
        except OSError:
            pass


def _log(mode: str, asked: float, got: float, extra: dict | None = None) -> None:
    """One hold as a line of the log KCOURSE_GPU_LOCK_LOG names; an exclusive hold's line says how many of its
    threads got FAVOURED_NICE (0: the host does not let this process raise a priority)."""
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    line = {"mode": mode, "pid": os.getpid(), "asked": asked, "waited": got - asked, "held": time.time() - got}
    line.update(extra or {})
    line["test"] = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]
    with open(path, "a") as f:  # one short write per line: appends from many processes stay whole
        f.write(json.dumps(line) + "\n")


@contextmanager
def beside() -> Iterator[None]:
    """Held while a grade's helper process uses the GPU (heavy.py's draws and references): shared, without the
    turnstile, so a timer waiting for its grade's shared hold to end cannot also stop it; it waits for a timer
    that holds the lock, for BESIDE_LIMIT_S at most. A hold per block: the helper holds nothing between tasks."""
    lock = _lock()
    if lock is None:  # no lock asked for, or the process that started this one holds it alone
        yield
        return
    asked = got = time.time()
    fd = lock._open()  # a file of its own, not the process's hold: the helper holds nothing between tasks
    try:
        _try_for(fd, BESIDE_LIMIT_S, fcntl.LOCK_SH)
        got = time.time()
        yield
    finally:
        os.close(fd)  # closing the file releases its lock
        _log("beside", asked, got)


def held_alone() -> bool:
    """Whether this process, or one that started it, holds the lock exclusively (timing): then no other
    participant of the lock uses the GPU, whatever CUDA contexts they keep open."""
    return bool(os.environ.get(ENV) and os.environ.get(HELD_ENV))


def participant(pid: int) -> bool:
    """Whether process `pid` takes part in this lock: it, or a process above it, started with `KCOURSE_GPU_LOCK`
    naming the same file (a pytest worker, and the grading children below it whatever their own environment).
    Linux's /proc; False where it cannot be read."""
    mark = f"{ENV}={os.environ.get(ENV)}".encode()
    for _ in range(32):  # up the parent chain to init
        if pid <= 1:
            return False
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if mark in f.read().split(b"\0"):
                    return True
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rpartition(")")[2].split()[1])  # the field after the state: the parent's pid
        except (OSError, ValueError, IndexError):
            return False
    return False
