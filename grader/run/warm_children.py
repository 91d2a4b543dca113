"""Grading children started one grade ahead, for a worker that grades one file after another (grade-batch).

A grade's child spends seconds importing torch and starting CUDA before it can run anything; `kcourse grade`
hides part of that behind the build, but a cached build takes about a second, so in a class of hundreds of
files most of each grade's start is paid in full. Here, when a grade takes its child, the next one starts
at once, so its start-up runs while this grade builds and checks. Not while it times: a spare's start-up
(its CUDA context, the page-locked buffers, the timer's calibration) works on the GPU and can slow every kernel
the probe times (docs/measurements.md, "Why the code is as it is"), so a grade waits for its spare to be ready
before timing (settle);
from then on the spare holds a CUDA context but runs nothing. Every child is fresh: none runs
two learners' code. An unused child ends itself after IDLE_S (KCOURSE_CHILD_IDLE_S), so a worker left idle
holds no CUDA context, and with its parent (grader/child/orphan.py)."""

from __future__ import annotations

import threading

from grader.run import sandbox

IDLE_S = 600


class WarmChildren:
    """One started child per grading thread and device ("0", "1", ... or None for the CPU): threads that
    grade side by side on one device each keep their own."""

    def __init__(self, idle_s: float = IDLE_S):
        self._ready: dict[tuple[int, str | None], sandbox.Child] = {}
        self._lock = threading.Lock()
        self._idle_s = idle_s

    def take(self, device: str | None) -> sandbox.Child | None:
        """The child started for this slot, if it is still alive; starts the one the next grade will take."""
        with self._lock:
            child = self._ready.pop((threading.get_ident(), device), None)
        if child is not None and child.proc.poll() is not None:  # it ended (idle too long, killed): start anew
            child.close()
            child = None
        self._start(device)
        return child

    def settle(self, device: str | None) -> None:
        """Wait until the spare started for this slot's next grade has warmed up, so that its start-up is over
        before the calling grade times (grade.grade's before_timing). A spare that fails to start is dropped:
        take() starts another."""
        key = (threading.get_ident(), device)
        with self._lock:
            child = self._ready.get(key)
        if child is None:
            return
        try:
            child.wait_ready()
        except (sandbox.ChildGone, sandbox.ChildTimeout):
            with self._lock:
                if self._ready.get(key) is child:
                    del self._ready[key]
            child.close()

    def close(self) -> None:
        with self._lock:
            children, self._ready = list(self._ready.values()), {}
        for child in children:
            child.close()

    def _start(self, device: str | None) -> None:
        env = {"KCOURSE_CHILD_IDLE_S": str(self._idle_s)}
        if device is not None:
            env["CUDA_VISIBLE_DEVICES"] = device
        child = sandbox.Child("cuda" if device is not None else "cpu", env)
        key = (threading.get_ident(), device)
        with self._lock:
            earlier = self._ready.pop(key, None)
            self._ready[key] = child
        if earlier is not None:
            earlier.close()


_WORKER_CHILDREN: WarmChildren | None = None


def for_this_process() -> WarmChildren:
    """One pool per process: a Dask worker keeps its started child from one task to the next."""
    global _WORKER_CHILDREN
    if _WORKER_CHILDREN is None:
        _WORKER_CHILDREN = WarmChildren()
    return _WORKER_CHILDREN
