"""What the tests of CUDA exercises bound as PyTorch operators (kind torch_op) share: compiling sources
for sm_90 against torch's headers (skipped where torch or the toolkit lacks its CUDA headers), building
several operators at once before a GPU test grades them, and calling one the way the grader does.

torch's extension builder takes about a minute an operator (torch's headers), one at a time in a
process; a test that grades six sources would spend most of its device time compiling. `prebuild` builds
them side by side in subprocesses, into the session's build cache, where the grades that follow find them."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import ROOT, _session_cache

from grader.core.spec import ExerciseSpec
from grader.toolchain.build import compile_check_torch_op

_BUILD = (
    "import sys; from pathlib import Path; from grader.core.discovery import discover_exercises; "
    "from grader.child.loading import load; "
    "load(discover_exercises()[sys.argv[1]].variants['cuda'], Path(sys.argv[2]), None, 'learner')"
)


def compile_checks(sources: list[Path]) -> list:
    """Each source compiled (not linked) for sm_90 with nvcc's resource report, in order; the first
    alone, so that a machine whose toolkit lacks a header torch's include skips after one short try."""
    import torch

    if torch.version.cuda is None:  # a CPU build of torch ships no CUDA headers (c10/cuda's generated macros)
        pytest.skip("torch is a CPU build: its CUDA headers are absent, so operators cannot be compile-checked here")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KCOURSE_CACHE", str(_session_cache()))
        first = compile_check_torch_op(sources[0])
        if first.skipped:
            pytest.skip(first.log)
        with ThreadPoolExecutor(min(4, os.cpu_count() or 1)) as pool:
            rest = list(pool.map(compile_check_torch_op, sources[1:]))
    return [first, *rest]


def prebuild(spec: ExerciseSpec, sources: list[Path]) -> None:
    """Build every source as the grader's worker loads it, in parallel subprocesses sharing the session's
    build cache (the operator's name follows the file's content, its build folder the name)."""
    env = {**os.environ, "KCOURSE_CACHE": str(_session_cache())}
    jobs = [
        subprocess.Popen(
            [sys.executable, "-c", _BUILD, spec.id, str(source)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for source in sources
    ]
    for source, job in zip(sources, jobs):
        output = job.communicate()[0]
        assert job.returncode == 0, f"{source.name} did not build:\n{output[-4000:]}"


def prebuild_with_edits(
    spec: ExerciseSpec, sources: dict[str, Path], solution: Path, gpu_edits: dict[str, tuple], folder: Path
) -> dict[str, Path]:
    """Every operator the GPU tests load, built side by side first: `sources` (name: file) and the solution
    with each GPU edit (name: (old, new, verdict codes)) as a file of its own in `folder`, by the same names."""
    from cuda_rows import edited

    sources = dict(sources)
    for index, (name, (old, new, _)) in enumerate(gpu_edits.items()):
        sources[name] = edited(solution, old, new, folder, f"{spec.id}_edit{index}.cu")
    prebuild(spec, list(sources.values()))
    return sources


def race_at_copy_bandwidth(spec: ExerciseSpec, case, contestants: dict, width: int) -> tuple[dict[str, float], float]:
    """Times `contestants` (name: a call) alternately at `case` and prints each one's time, GB/s (the spec's bytes,
    2-byte elements) and share of the copy bandwidth, names padded to `width`. Returns their GB/s and the copy's."""
    import torch
    from cuda_rows import gbps

    from grader.child import timing
    from grader.core import exprs

    measured = timing.time_alternating(contestants)
    copy_gbps = timing.measure_copy_bandwidth()
    moved = exprs.evaluate(spec.performance.bytes, {**case.params, "elem": 2})
    rates = {name: gbps(moved, m["median_ms"]) for name, m in measured.items()}
    print(f"\n{spec.id} {case.label()} on {torch.cuda.get_device_name()} (copy {copy_gbps:.0f} GB/s):")
    for name, rate in rates.items():
        print(
            f"  {name:{width}s} {measured[name]['median_ms'] * 1000:8.1f} us  {rate:6.0f} GB/s  "
            f"{100 * rate / copy_gbps:4.0f}% of roofline"
        )
    return rates, copy_gbps


def op_caller(spec: ExerciseSpec, source: Path):
    """`source`'s operator, loaded as the grader loads it: call it with (tensors, params); it returns out."""
    from grader.child import loading

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KCOURSE_CACHE", str(_session_cache()))
        return loading.load(spec.variants["cuda"], source, None, "learner")


def speed_verdict_of(exercise_id: str, source: Path, seed: int):
    """A grade of `source` as `kcourse grade` makes it, the speed verdict's size alone timed, without the sanitizer
    (a ladder step's test reads its numerics and speed verdict; the prebuilt operator is loaded, not rebuilt)."""
    from grader.core.discovery import resolve
    from grader.run.grade import grade

    target = resolve((exercise_id,))
    return grade(target, submission=source, seed=seed, record=False, sanitize_code=False, timed_sizes="verdict")
