"""Grading a class on a Dask cluster (the optional extra: `pip install kernel-course[cluster]`).

We write no scheduler: `dask.distributed` runs one task per (learner, exercise) on workers that have the
kit, and `dask-jobqueue` starts those workers through Slurm, PBS, SGE or LSF. A GPU worker declares the
Dask resource GPU=1 (one worker per GPU) and each task asks for it, so a GPU grades one submission at a
time. A task ships the learner's file (bytes: workers need not share a file system with the instructor),
grades it with batch.grade_row (the learner's code in a child process with its time limit, as everywhere)
and logs a "started" event; a worker that dies mid-task has the task rerun by the scheduler on another
worker, and the starts counted per task become the row's `attempts`. dask is imported here only, lazily."""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
import uuid
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from grader.commands import batch
from grader.core.discovery import Target
from grader.core.errors import KcourseError
from grader.run import warm_children

TOPIC = "kcourse-grade"
INSTALL = 'pip install "kernel-course[cluster]"'
RETRIES = 1  # an exception in the task itself (a worker's disk full, say) gets one more try
WAIT_FOR_WORKERS_S = 120


class ClusterError(KcourseError, RuntimeError):
    """The cluster could not be used; the message says what to do."""


def require_dask():
    try:
        import distributed
    except ImportError:
        raise ClusterError(
            f"--scheduler and --cluster grade through Dask, which is not installed: {INSTALL} "
            "(or .venv/bin/pip install 'dask[distributed]' dask-jobqueue); without them grade-batch "
            "grades on this machine"
        ) from None
    return distributed


# --- on the worker -------------------------------------------------------------------------------


@contextmanager
def gpu_slot(poll_s: float = 0.5) -> Iterator[str | None]:
    """Hold one GPU of this machine for one grade: the first whose lock file is free. Workers that all see
    every GPU (LocalCluster, a job with --nworkers N) so each take a different one; a lock held by a
    worker that dies is released with its process. None on a machine without a GPU."""
    gpus = batch.visible_gpus()
    if not gpus:
        yield None
        return
    lock_dir = Path(tempfile.gettempdir()) / f"kcourse-gpu-locks-{os.getuid()}"
    lock_dir.mkdir(exist_ok=True)
    while True:
        for gpu in gpus:
            handle = open(lock_dir / f"gpu-{gpu.replace('/', '_')}.lock", "w")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            try:
                yield gpu
            finally:
                handle.close()  # closing releases the lock
            return
        time.sleep(poll_s)  # more tasks than GPUs here: a worker without GPU=1 resources; wait for one


def grade_task(task: dict) -> dict:
    """Runs on a Dask worker: grade the shipped file with this worker's kit; return the gradebook row."""
    from distributed import get_worker

    from grader.core.discovery import resolve

    worker = get_worker()
    name = worker.address if worker.name in (None, "") else str(worker.name)  # LocalCluster's are 0, 1, ...
    event = {"key": task["key"], "name": task["name"], "on": name}
    worker.log_event(TOPIC, {**event, "state": "started"})
    try:
        target = resolve((task["exercise"],), lang=task["lang"])
        with tempfile.TemporaryDirectory(prefix="kcourse-task-") as folder:
            path = Path(folder) / target.variant.stub
            path.write_bytes(task["content"])
            with gpu_slot() as gpu:
                row = batch.grade_row(
                    target, path, task["seed"], task["timeout_s"], gpu, warm_children.for_this_process()
                )
    finally:
        worker.log_event(TOPIC, {**event, "state": "stopped"})
    row["worker"] = name
    return row


# --- on the instructor's machine -----------------------------------------------------------------


class DaskRunner:
    """batch.Runner on a Dask client: one task per job, results yielded as they finish."""

    def __init__(self, client, description: str = "", gpu: bool | None = None):
        """gpu: whether tasks ask for the GPU resource; None: if any worker now offers one."""
        self.client, self.gpu = client, gpu
        self.description = description or f"the Dask cluster at {client.scheduler.address}"

    def describe(self) -> str:
        return self.description

    def gpu_workers(self) -> bool:
        workers = self.client.scheduler_info().get("workers", {}).values()
        return any((w.get("resources") or {}).get("GPU") for w in workers)

    def run(self, work: list[tuple[batch.Job, Target]], seed, timeout_s, progress) -> Iterator[tuple[batch.Job, dict]]:
        from distributed import as_completed

        starts: dict[str, list[str]] = defaultdict(list)

        def on_event(event) -> None:
            message = event[1]
            if message.get("state") == "stopped":
                progress.stopped(message["name"])
                return
            starts[message["key"]].append(message.get("worker") or message["on"])  # dask adds the address
            progress.started(message["name"], message["on"])

        self.client.subscribe_topic(TOPIC, on_event)
        gpu = self.gpu if self.gpu is not None else self.gpu_workers()
        resources = {"GPU": 1} if gpu else None
        run_id = uuid.uuid4().hex[:8]
        futures = {}
        for job, target in work:
            task = _task(job, target, seed, timeout_s, f"grade-{run_id}-{len(futures)}")
            future = self.client.submit(
                grade_task, task, key=task["key"], pure=False, retries=RETRIES, resources=resources
            )
            futures[future] = (job, target)
        try:
            for future in as_completed(futures):
                job, target = futures.pop(future)
                row = _row_of(future, job, target)
                row["attempts"] = max(1, len(starts.get(future.key, [])))
                if row["attempts"] > 1:
                    row["workers"] = starts[future.key]
                future.release()
                yield job, row
        finally:
            self.client.unsubscribe_topic(TOPIC)
            for future in futures:  # interrupted: the cluster stops what is left
                future.cancel()


def _task(job: batch.Job, target: Target, seed, timeout_s, key: str) -> dict:
    return {
        "key": key,
        "name": job.name,
        "exercise": target.spec.id,
        "lang": target.variant.lang,
        "content": job.path.read_bytes(),
        "seed": seed,
        "timeout_s": timeout_s,
    }


def _row_of(future, job: batch.Job, target: Target) -> dict:
    """The task's row, or an error row saying why the cluster could not grade it (never the batch's end)."""
    try:
        return future.result()
    except Exception as exc:  # a worker-side failure: KilledWorker, a kit without this exercise, ...
        name = type(exc).__name__
        if name == "KilledWorker":
            why = (
                "every worker that took it died (killed, out of memory, node lost): run grade-batch again to "
                "retry it, and check the workers' logs"
            )
        else:
            why = f"{name}: {exc} — check that the workers run this kit's version (`kcourse env-check` there)"
        return batch.result_row(job.learner, target, None, f"the cluster could not grade this: {why}", batch.ERROR)
