"""Who else is using a GPU: processes on it that are not this grader's own (its grading child, its reference
process, a warm child waiting for the next grade, and anything they started).

Another program's work on the GPU slows the grader's wall-clock probe more than the child's timed runs (a
burst of many runs spans several of the GPU's time slices, one short run rarely does), so the two disagree
and an honest kernel would look as if its timer were patched. Where the probe disagrees and another program
shares the GPU, the grade says so and gives no speed verdict, instead of accusing anyone. A learner's code
gains nothing from starting such a program: the speed check then fails to pass.

Under the GPU lock (the kit's tests grading in parallel, core/gpu_lock.py) a grade that times holds the lock alone:
the lock's other participants keep their CUDA contexts open but stay off the GPU, so they do not count."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess

from grader.core import gpu_lock
from grader.core.records import ERROR, Check
from grader.core.vocabulary import CheckName, Code


def nvidia_smi_ids(visible_devices: str | None, uuid: str | None = None) -> list[str]:
    """The grading child's GPU as nvidia-smi's `-i` takes it, best first: the UUID the child read from CUDA where
    it sent one (CUDA's order of GPUs need not be nvidia-smi's), then its CUDA_VISIBLE_DEVICES' first entry, or
    the first GPU."""
    index = (visible_devices or "0").split(",")[0].strip() or "0"
    return ([uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"] if uuid else []) + [index]


def other_gpu_processes(*devices: str) -> list[str]:
    """ "pid name" of each process nvidia-smi lists on the GPU (the first of `devices`, nvidia_smi_ids' answer,
    that nvidia-smi knows; the first GPU when none is given) that this process did not start. Empty where
    nvidia-smi is missing or sees none (a container often cannot see other containers' processes) and off Linux."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return []
    for device in devices or ("0",):
        try:
            out = subprocess.run(
                [smi, "--query-compute-apps=pid,process_name", "--format=csv,noheader", "-i", device],
                capture_output=True,
                text=True,
                timeout=10,
            )
        except (OSError, subprocess.TimeoutExpired):
            return []
        if out.returncode == 0:
            break
    else:
        return []
    own = {os.getpid(), *descendants(os.getpid())}
    # a pid this machine's /proc does not show is another PID namespace's (a container's view of the host's
    # pids): whose it is cannot be told, so it is not counted, and the probe's verdict stands
    others = [(pid, name) for pid, name in parse_apps(out.stdout) if pid not in own and os.path.exists(f"/proc/{pid}")]
    if gpu_lock.held_alone():  # parallel grades of the kit's tests: the lock keeps them off the GPU while we time
        others = [(pid, name) for pid, name in others if not gpu_lock.participant(pid)]
    return [f"{pid} {name}" for pid, name in others]


def parse_apps(text: str) -> list[tuple[int, str]]:
    """nvidia-smi's `pid, process_name` lines as (pid, the program's file name)."""
    apps = []
    for line in text.splitlines():
        pid, _, name = line.partition(",")
        if pid.strip().isdigit():
            apps.append((int(pid), os.path.basename(name.strip()) or "?"))
    return apps


def descendants(pid: int) -> list[int]:
    """pid's child processes, theirs, and so on (Linux's /proc/PID/task/TID/children; [] elsewhere)."""
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


def full_check(exc: BaseException) -> Check | None:
    """The verdict for an error of the grader's own GPU work (in the grader or its child) that is torch's
    OutOfMemoryError: the GPU is full, not a grader bug (full_message says what to do); None for any other error."""
    if type(exc).__name__ != "OutOfMemoryError":
        return None
    return Check(CheckName.GRADER, ERROR, full_message(), {"code": Code.GPU_FULL})


def full_message() -> str:
    """What a learner reads when the grader's own GPU work (drawing inputs, references, comparisons; in the grader or
    its child) ran out of memory, torch's OutOfMemoryError: the GPU's free memory now, and who holds the rest."""
    free = ""
    try:
        import torch

        if torch.cuda.is_initialized():  # never a CUDA context of its own for this (the error may be another process's)
            left, total = torch.cuda.mem_get_info()
            free = f" ({left / 2**30:.1f} GiB free of {total / 2**30:.0f} GiB now)"
    except Exception:  # no context left to ask: the message stands without the figures
        pass
    return (
        f"not judged: the GPU ran out of memory in the grader's own work (inputs, references){free}. Other processes "
        "hold the rest — `nvidia-smi` lists them: your notebooks and scripts, or your grading process if your code "
        "allocates much. Free the GPU and grade again"
    )
