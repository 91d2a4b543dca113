"""End to end on the CPU, CUDA exercises: compiled by nvcc, then run on the CPU emulator (grader/cuda_cpu): every
solution passes numerics there, every stub fails them, a file the emulator cannot run is reported skipped. (Apart
from test_grading_cpu.py so that pytest-xdist's loadfile runs the two files' grades on both workers.)"""

import pytest

pytestmark = pytest.mark.solutions

from conftest import HAS_GPU

from grader.core.discovery import all_targets, resolve
from grader.run.grade import grade

cpu_only = pytest.mark.skipif(HAS_GPU, reason="checks the no-GPU path")


def checks_by_name(result):
    return {c.name: c for c in result.checks}


# A stub that is correct by design (the exercise is its speed): it passes numerics wherever it runs.
CORRECT_STUBS = {"occupancy"}


@pytest.mark.emulator
@pytest.mark.slow
@cpu_only
@pytest.mark.nvcc
@pytest.mark.parametrize(
    "target", [t for t in all_targets() if t.variant.kind in ("cuda", "cuda_host")], ids=lambda t: t.key
)
@pytest.mark.parametrize("source", ["solutions", "stubs"])
def test_cuda_exercise_without_gpu_runs_on_the_cpu_emulator_or_says_why_not(target, source):
    """Without a GPU a CUDA file is compiled by nvcc, then its kernels run on the CPU emulator (grader/cuda_cpu):
    every solution passes numerics there, every stub fails them; a file the emulator cannot run (tensor cores)
    gets its numerics skipped with the reason, never passed."""
    result = grade(target, source=source, seed=7)
    checks = checks_by_name(result)
    # a library the spec links (cuBLAS) or requires (ThunderKittens, without KCOURSE_TK_ROOT) is not here
    if checks["build"].details.get("code") in ("library_missing", "requirement_missing"):
        assert result.status == "skipped" and checks["numerics"].status == "skipped"
        pytest.skip(checks["build"].message)
    assert checks["build"].status == "passed", checks["build"].message
    assert any(w in checks["build"].message for w in ("registers", "no kernels"))  # nvcc's resource report (a file
    #                                                                                  of library calls has no kernel)
    if result.emulation.startswith("compile only"):  # e.g. a file with Hopper's wgmma
        assert checks["numerics"].status == "skipped" and "no GPU" in checks["numerics"].message
        assert result.status == "skipped"
        return
    if source == "solutions" or target.spec.id in CORRECT_STUBS:
        assert result.status == "passed", result.verdict
        assert checks["speed"].status == "skipped" and "CPU emulator" in checks["speed"].message
    else:
        assert result.status == "failed" and checks["numerics"].status == "failed", result.verdict


@pytest.mark.slow
@cpu_only
@pytest.mark.nvcc
def test_with_the_emulator_off_a_cuda_file_is_only_compiled_and_reported_skipped(monkeypatch):
    monkeypatch.setenv("KCOURSE_CUDA_CPU", "off")
    result = grade(resolve(("reduction",), lang="cuda"), source="solutions", seed=7)
    checks = checks_by_name(result)
    assert checks["build"].status == "passed"
    assert checks["numerics"].status == "skipped" and "no GPU" in checks["numerics"].message
    assert result.status == "skipped" and "KCOURSE_CUDA_CPU=off" in result.emulation


@pytest.mark.slow
@cpu_only
def test_torch_op_without_gpu_is_never_reported_passed():
    result = grade(resolve(("gelu_op",)), source="solutions", seed=7)
    assert result.status in ("skipped", "error")
    assert checks_by_name(result)["numerics"].status == "skipped"
