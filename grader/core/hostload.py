"""How busy the host is: a grade's fair share of the CPUs, and, for KCOURSE_PROBE_TRACE, where a probe burst's
wall clock went as the kernel accounts it.

A host grading on each of its GPUs at once (validate, grade-batch) runs that many grades side by side. Each
process used to size its thread pools to the whole host (64 threads each on a 64-core, 4-GPU host); each now
takes one GPU's share.

The wall-clock probe (judge.py) once called honest kernels forged on such hosts. The trace showed why: every
grader's children ran on GPU 0 (batch.visible_gpus), so the probe's bursts shared one GPU, time-sliced, while
its host CPUs sat idle: the bursts are GPU-bound (the host queues a run in microseconds, the GPU takes a
tenth of a millisecond or more), so a busy CPU barely moves them. Nothing is subtracted from the probe's
wall clock: time taken off for a waiting thread is time a learner's own background process could make. What the
waits can do is turn an accusation into no verdict (`cpu_wait`, speed.starved): a probe that disagrees while the
learner's process spent much of its burst waiting for a CPU says the host was too busy to check, never "passed"."""

from __future__ import annotations

import glob
import os


def gpus_on_host() -> int:
    """The host's NVIDIA GPUs, whatever CUDA_VISIBLE_DEVICES this process was given (1 where unknown)."""
    return len(glob.glob("/proc/driver/nvidia/gpus/*")) or 1


def cpu_share() -> int:
    """One GPU's share of the CPUs this process may use: the threads one grade should run at most."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, cpus // gpus_on_host())


def limit_threads() -> None:
    """torch's CPU thread pool down to this grade's share (never up)."""
    import torch

    share = cpu_share()
    if torch.get_num_threads() > share:
        torch.set_num_threads(share)


def _schedstat(path: str) -> tuple[float, float] | None:
    """(seconds on a CPU, seconds runnable but waiting for one) of one thread, from Linux's schedstat."""
    try:
        with open(path) as f:
            on_cpu, waiting = f.read().split()[:2]
        return int(on_cpu) / 1e9, int(waiting) / 1e9
    except (OSError, ValueError):
        return None


def main_thread_times(pid: int) -> tuple[float, float] | None:
    """(seconds on a CPU, seconds waiting for one) of process `pid`'s main thread (None off Linux)."""
    return _schedstat(f"/proc/{pid}/task/{pid}/schedstat")


def cpu_wait(before: tuple, after: tuple) -> float | None:
    """Seconds the child's main thread and this thread waited for a CPU between two readings, each reading
    (main_thread_times(child), own_thread_times()); None where the child's could not be read (not Linux)."""
    (child_before, own_before), (child_after, own_after) = before, after
    if child_before is None or child_after is None:
        return None
    own = own_after[1] - own_before[1] if own_before is not None and own_after is not None else 0.0
    return child_after[1] - child_before[1] + own


def own_thread_times() -> tuple[float, float] | None:
    """The same for the calling thread."""
    return _schedstat("/proc/thread-self/schedstat")


def burst_trace(
    who: str, runs: int, wall_s: float, child_before, child_after, parent_before, parent_after, end: dict
) -> dict:
    """One probe burst as the host accounted it, for KCOURSE_PROBE_TRACE: where its wall clock went."""

    def delta(after, before, index):
        return None if after is None or before is None else round(after[index] - before[index], 6)

    return {
        "who": who,
        "runs": runs,
        "wall_s": round(wall_s, 6),
        "child_cpu_s": delta(child_after, child_before, 0),
        "child_wait_s": delta(child_after, child_before, 1),
        "parent_wait_s": delta(parent_after, parent_before, 1),
        # the child's own figures: what it says, kept apart from what the kernel accounted
        "child_enqueue_s": end.get("enqueue_s"),
        "child_sync_s": end.get("sync_s"),
        "loadavg": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }


def write_trace(path: str, entry: dict) -> None:
    import json

    with open(path, "a") as f:
        f.write(json.dumps(entry) + "\n")
