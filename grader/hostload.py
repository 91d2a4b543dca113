"""How busy the host is, as the kernel accounts it: a grade's fair share of the CPUs, and how long a thread
waited for one.

A host grading on each of its GPUs at once (validate, grade-batch) runs that many grades side by side. Each
process used to size its thread pools to the whole host (64 threads each on a 64-core, 4-GPU host), and the
grading child's own loop then waited for a CPU most of the time: the wall-clock probe (judge.py) measured
honest 0.04-ms kernels at 0.6-3.4 ms a run and called them forged (4x H200)."""

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


def cpu_wait_s() -> float | None:
    """Seconds this thread has spent runnable but waiting for a CPU (None where the kernel does not say)."""
    times = _schedstat("/proc/thread-self/schedstat")
    return None if times is None else times[1]


def _descendants(pid: int) -> list[int]:
    """pid's child processes, theirs, and so on (Linux's /proc/PID/task/TID/children)."""
    found, todo = [], [pid]
    while todo:
        for path in glob.glob(f"/proc/{todo.pop()}/task/*/children"):
            try:
                with open(path) as f:
                    children = [int(c) for c in f.read().split()]
            except (OSError, ValueError):
                continue
            found += children
            todo += children
    return found


def _fair(pid: int) -> bool:
    """Whether process pid runs at no lower priority than this one (its nice value, and the normal policy)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
        nice, policy = int(fields[16]), int(fields[38])
    except (OSError, ValueError, IndexError):
        return False
    return policy == 0 and nice <= os.nice(0)


def process_times(pid: int) -> tuple[float, float, bool] | None:
    """(main thread's seconds waiting for a CPU, the seconds every other thread of the process and of its
    child processes spent on one, whether it runs at this process's priority or higher) of process `pid`.
    The kernel keeps these: the process cannot make them up."""
    main_path = f"/proc/{pid}/task/{pid}/schedstat"
    main = _schedstat(main_path)
    if main is None:
        return None
    others = 0.0
    for process in [pid, *_descendants(pid)]:
        for path in glob.glob(f"/proc/{process}/task/*/schedstat"):
            if path != main_path:
                times = _schedstat(path)
                others += times[0] if times else 0.0
    return main[1], others, _fair(pid)


def waited_for_cpu(wall_s: float, child_before, child_after, parent_before: float | None,
                   parent_after: float | None) -> float:
    """Seconds of a wall-clock interval of `wall_s` the host's other work took: the parent's wait to be
    scheduled, and the child's main thread's. The child's is counted only where the child did not cause it:
    its own threads and child processes busy for under a quarter of the interval, and its priority not lowered
    (a process starving its own main thread could otherwise shrink the wall clock of its kernel)."""
    waited = parent_after - parent_before if parent_before is not None and parent_after is not None else 0.0
    if child_before is not None and child_after is not None:
        own_doing = child_after[1] - child_before[1] >= 0.25 * wall_s or not (child_before[2] and child_after[2])
        if not own_doing:
            waited += child_after[0] - child_before[0]
    return max(0.0, waited)


def main_thread_times(pid: int) -> tuple[float, float] | None:
    """(seconds on a CPU, seconds waiting for one) of process `pid`'s main thread."""
    return _schedstat(f"/proc/{pid}/task/{pid}/schedstat")


def burst_trace(who: str, runs: int, wall_s: float, waited_s: float, main_before, main_after, child_before,
                child_after, parent_before, parent_after, end: dict) -> dict:
    """One probe burst as the host accounted it, for KCOURSE_PROBE_TRACE: where its wall clock went."""
    def delta(after, before, index):
        return None if after is None or before is None else round(after[index] - before[index], 6)

    return {"who": who, "runs": runs, "wall_s": round(wall_s, 6), "waited_s": round(waited_s, 6),
            "main_cpu_s": delta(main_after, main_before, 0), "main_wait_s": delta(main_after, main_before, 1),
            "others_cpu_s": delta(child_after, child_before, 1),
            "parent_wait_s": None if parent_before is None or parent_after is None else round(parent_after - parent_before, 6),
            # the child's own figures: what it says, kept apart from what the kernel accounted
            "child_enqueue_s": end.get("enqueue_s"), "child_sync_s": end.get("sync_s"),
            "loadavg": os.getloadavg()[0] if hasattr(os, "getloadavg") else None}


def write_trace(path: str, entry: dict) -> None:
    import json

    with open(path, "a") as f:
        f.write(json.dumps(entry) + "\n")
