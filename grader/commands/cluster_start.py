"""Where grade-batch's Dask workers come from: a running scheduler (--scheduler tcp://HOST:8786), a
LocalCluster (--cluster local: one worker per GPU here, or N CPU workers), or a batch system through
dask-jobqueue (--cluster slurm|pbs|sge|lsf: jobs of --gpus-per-job GPUs, one worker per GPU, each
declaring the Dask resource GPU=1). Settings we do not expose (network interface, scratch folder, extra
directives) come from dask-jobqueue's own configuration file, ~/.config/dask/jobqueue.yaml."""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass

import click

BATCH_SYSTEMS = ("slurm", "pbs", "sge", "lsf")
CLASSES = {"slurm": "SLURMCluster", "pbs": "PBSCluster", "sge": "SGECluster", "lsf": "LSFCluster"}


@dataclass
class ClusterOptions:
    scheduler: str | None = None
    cluster: str | None = None  # local | slurm | pbs | sge | lsf
    workers: int | None = None  # --cluster local without a GPU: CPU workers
    jobs: int = 1
    gpus_per_job: int = 1
    queue: str | None = None
    account: str | None = None
    walltime: str = "01:00:00"
    cores_per_gpu: int = 4
    memory_per_gpu: str = "32GB"
    dry_run: bool = False
    python: str = sys.executable

    @property
    def wanted(self) -> bool:
        return bool(self.scheduler or self.cluster)

    def check(self) -> None:
        if self.scheduler and self.cluster:
            raise click.UsageError("give --scheduler (a running cluster) or --cluster (start one), not both")
        if self.dry_run and self.cluster not in BATCH_SYSTEMS:
            raise click.UsageError(
                f"--dry-run prints a batch system's job script: use it with --cluster {'|'.join(BATCH_SYSTEMS)}"
            )


def cluster_options(command):
    """grade-batch's options for grading on a Dask cluster."""
    for option in reversed(
        [
            click.option(
                "--scheduler",
                metavar="tcp://HOST:8786",
                help="Grade on this running Dask scheduler's "
                "workers (one per GPU, started with --resources GPU=1; see docs/grading-a-class.md).",
            ),
            click.option(
                "--cluster",
                type=click.Choice(["local", *BATCH_SYSTEMS]),
                help="Start Dask workers: local (one "
                "per GPU here, or --workers CPU workers) or through a batch system (dask-jobqueue).",
            ),
            click.option("--jobs", type=click.IntRange(1), default=1, show_default=True, help="Batch jobs to submit."),
            click.option(
                "--gpus-per-job",
                type=click.IntRange(1),
                default=1,
                show_default=True,
                help="GPUs per batch job (one worker each).",
            ),
            click.option("--queue", help="Batch queue / partition (Slurm -p)."),
            click.option("--account", help="Account / project to charge (Slurm -A)."),
            click.option("--walltime", default="01:00:00", show_default=True, help="Each job's time limit, HH:MM:SS."),
            click.option("--cores-per-gpu", type=click.IntRange(1), default=4, show_default=True),
            click.option("--memory-per-gpu", default="32GB", show_default=True, help="Host memory per GPU."),
            click.option("--dry-run", is_flag=True, help="Print the batch job script and submit nothing."),
        ]
    ):
        command = option(command)
    return command


def jobqueue_kwargs(opts: ClusterOptions) -> dict:
    """dask-jobqueue's arguments for one job of opts.gpus_per_job GPUs, one worker (process) per GPU."""
    gpus = opts.gpus_per_job
    cores, memory = gpus * opts.cores_per_gpu, _times(opts.memory_per_gpu, gpus)
    kwargs = {
        "queue": opts.queue,
        "walltime": opts.walltime,
        "cores": cores,
        "memory": memory,
        "processes": gpus,
        "job_name": "kcourse-grader",
        "python": opts.python,
        "worker_extra_args": ["--resources", "GPU=1"],
        "job_script_prologue": [f"cd {_course_root()}"],
    }
    if opts.cluster == "slurm":
        kwargs.update(account=opts.account, job_extra_directives=[f"--gres=gpu:{gpus}"])
    elif opts.cluster == "pbs":
        kwargs.update(account=opts.account, resource_spec=f"select=1:ncpus={cores}:ngpus={gpus}:mem={memory}")
    elif opts.cluster == "sge":
        kwargs.update(project=opts.account, resource_spec=f"gpu={gpus}")
    elif opts.cluster == "lsf":
        kwargs.update(
            project=opts.account,
            walltime=":".join(opts.walltime.split(":")[:2]),
            job_extra_directives=[f'-gpu "num={gpus}"'],
        )
    return {k: v for k, v in kwargs.items() if v is not None}


def _times(memory: str, n: int) -> str:
    digits = "".join(c for c in memory if c.isdigit() or c == ".")
    try:
        return f"{float(digits) * n:g}{memory[len(digits) :]}"
    except ValueError:
        raise click.BadParameter(f"{memory!r}: give an amount such as 32GB", param_hint="--memory-per-gpu") from None


def _course_root() -> str:
    from grader.core.paths import course_root

    return str(course_root())


def start(opts: ClusterOptions, echo=click.echo):
    """A cluster.DaskRunner on the requested cluster and the things to close afterwards; (None, []) after
    --dry-run. Raises cluster.ClusterError when dask is missing or no worker joins."""
    from grader.commands.cluster import DaskRunner, require_dask

    distributed = require_dask()
    if opts.scheduler:
        client = distributed.Client(opts.scheduler, timeout="30s")
        _wait_for_workers(client, opts.scheduler)
        return DaskRunner(client, f"the Dask cluster at {opts.scheduler} ({_workers(client)})"), [client]
    if opts.cluster == "local":
        cluster, gpus = _local_cluster(distributed, opts.workers)
        client = distributed.Client(cluster)
        _wait_for_workers(client, cluster.scheduler_address)
        return DaskRunner(client, f"a local Dask cluster ({_workers(client)})", gpu=gpus > 0), [client, cluster]
    cluster = _jobqueue_cluster(opts)
    echo(f"job script ({opts.cluster}, {opts.jobs} job(s) of {opts.gpus_per_job} GPU(s)):\n{cluster.job_script()}")
    if opts.dry_run:
        cluster.close()
        return None, []
    cluster.scale(jobs=opts.jobs)  # tasks wait in the scheduler until the queue starts the jobs
    description = f"{opts.jobs} {opts.cluster} job(s) of {opts.gpus_per_job} GPU(s), as the queue starts them"
    client = distributed.Client(cluster)
    return DaskRunner(client, description, gpu=True), [client, cluster]


def _local_cluster(distributed, workers: int | None):
    from grader.commands.batch import gpu_count

    gpus = gpu_count()
    if gpus:
        return distributed.LocalCluster(
            n_workers=gpus,
            threads_per_worker=1,
            processes=True,
            resources={"GPU": 1},
            dashboard_address=None,
            silence_logs=logging.ERROR,
        ), gpus
    count = workers or max(1, (os.cpu_count() or 2) // 2)
    return distributed.LocalCluster(
        n_workers=count, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=logging.ERROR
    ), 0


def _jobqueue_cluster(opts: ClusterOptions):
    from grader.commands.cluster import ClusterError

    try:
        import dask_jobqueue
    except ImportError:
        raise ClusterError(
            f"--cluster {opts.cluster} submits workers through dask-jobqueue, which is not "
            'installed: pip install "kernel-course[cluster]"'
        ) from None
    return getattr(dask_jobqueue, CLASSES[opts.cluster])(**jobqueue_kwargs(opts))


def _wait_for_workers(client, address: str) -> None:
    from grader.commands.cluster import WAIT_FOR_WORKERS_S, ClusterError

    try:
        client.wait_for_workers(1, timeout=WAIT_FOR_WORKERS_S)
    except TimeoutError:
        raise ClusterError(
            f"no worker joined the scheduler at {address} within {WAIT_FOR_WORKERS_S} s: start one per "
            f"GPU where the kit is installed, e.g. `CUDA_VISIBLE_DEVICES=0 dask worker {address} "
            "--nthreads 1 --resources GPU=1` (or check the batch queue)"
        ) from None


def _workers(client) -> str:
    workers = client.scheduler_info().get("workers", {}).values()
    gpus = sum(int((w.get("resources") or {}).get("GPU", 0)) for w in workers)
    return f"{len(workers)} worker(s), {gpus} GPU(s)" if gpus else f"{len(workers)} CPU worker(s)"


def close(things: list) -> None:
    for thing in things:
        try:
            thing.close()
        except Exception:  # closing after an error: the first error is the one to show
            pass
