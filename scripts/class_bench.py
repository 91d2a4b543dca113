"""A synthetic class graded end to end, once per worker count, through `kcourse grade-batch --cluster local`
(a LocalCluster of worker processes; one per GPU on a GPU machine, --workers N CPU workers without one).

Each learner submits three exercises: vector_add (Triton: the interpreter on a CPU) and reduction, matmul
(CUDA: compile checks on a CPU, the full grade on a GPU). Most submit the solutions; every 10th learner's
Triton kernel hangs, every 10th + 3 crashes, every 10th + 5 has a CUDA compile error. Prints seconds and
grades per minute for each worker count; each run starts from an empty gradebook.

  .venv/bin/python scripts/class_bench.py --learners 100 --workers 1 4 --timeout 10
  .venv/bin/python scripts/class_bench.py --learners 20 --scheduler tcp://HOST:8786   # a running cluster
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "submissions"
EXERCISES = ("vector_add", "reduction", "matmul")


def make_class(folder: Path, learners: int) -> Path:
    """Every learner has all three files; --exercises picks which are graded."""
    for i in range(learners):
        learner = folder / f"learner{i:03d}"
        learner.mkdir(parents=True)
        shutil.copy(ROOT / "solutions/vector_add/vector_add.py", learner)
        shutil.copy(ROOT / "solutions/reduction/reduction.cu", learner)
        shutil.copy(ROOT / "solutions/matmul/matmul.cu", learner)
        if i % 10 == 0:
            shutil.copy(FIXTURES / "vector_add_hangs.py", learner / "vector_add.py")
        if i % 10 == 3:
            shutil.copy(FIXTURES / "vector_add_segfault.py", learner / "vector_add.py")
        if i % 10 == 5:
            shutil.copy(FIXTURES / "reduction_broken.cu", learner / "reduction.cu")
        if i % 4 == 1:
            (learner / "pseudonym").write_text(f"Warp Speed {i}\n")
    return folder


def grade(submissions: Path, out: Path, timeout: float, exercises: list[str], cluster_args: list[str]) -> float:
    """One grade-batch run; the variants a learner has no file for (vector_add.cu, ...) are rows "missing"."""
    command = [
        sys.executable,
        "-m",
        "grader",
        "grade-batch",
        str(submissions),
        "--out",
        str(out),
        "--timeout",
        str(timeout),
        *[a for e in exercises for a in ("--only", e)],
        *cluster_args,
    ]
    started = time.monotonic()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--learners", type=int, default=100)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("--exercises", nargs="+", choices=EXERCISES, default=list(EXERCISES))
    parser.add_argument("--scheduler", help="Grade on this running Dask scheduler instead of a LocalCluster.")
    parser.add_argument("--keep", type=Path, help="Copy each run's gradebook folder here (named after the run).")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kcourse-class-") as folder:
        submissions = make_class(Path(folder) / "submissions", args.learners)
        grades = args.learners * len(args.exercises)
        runs = (
            [["--scheduler", args.scheduler]]
            if args.scheduler
            else [["--cluster", "local", "--workers", str(n)] for n in args.workers]
        )
        for cluster_args in runs:
            out = Path(folder) / f"book-{'-'.join(cluster_args[1:]).replace('/', '_')}"
            seconds = grade(submissions, out, args.timeout, args.exercises, cluster_args)
            print(
                f"{args.learners} learners × {len(args.exercises)} exercises ({' '.join(cluster_args)}): {seconds:.0f} s, "
                f"{60 * grades / seconds:.1f} grades/min",
                flush=True,
            )
            if args.keep:
                shutil.copytree(out, args.keep / out.name, dirs_exist_ok=True)


if __name__ == "__main__":
    main()
