import subprocess
import sys

import pytest

pytestmark = pytest.mark.solutions

from conftest import ROOT, submission

from grader.toolchain import build


@pytest.mark.nvcc
def test_solution_compiles_with_a_resource_report_and_hits_the_cache_next_time():
    source = ROOT / "solutions" / "reduction" / "reduction.cu"
    first = build.build_shared_library(source)
    assert first.ok, first.log
    assert first.resources and first.resources[0]["registers"] > 0
    assert "sum_kernel" in first.resources[0]["kernel"]
    second = build.build_shared_library(source)
    assert second.cached and second.library == first.library


@pytest.mark.nvcc
def test_cache_hit_in_a_new_process_is_fast():
    source = ROOT / "solutions" / "reduction" / "reduction.cu"
    assert build.build_shared_library(source).ok
    code = (
        "import time, pathlib; t = time.perf_counter(); from grader.toolchain import build; "
        f"r = build.build_shared_library(pathlib.Path({str(source)!r})); "
        "print(r.cached, time.perf_counter() - t)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout.split()
    assert out[0] == "True" and float(out[1]) < 0.5


@pytest.mark.nvcc
def test_compile_errors_point_at_the_learners_file_and_line():
    result = build.build_shared_library(submission("reduction_broken.cu"))
    assert not result.ok
    assert "reduction_broken.cu:5: error:" in result.log
    assert "undefined_function" in result.log
    assert "ninja" not in result.log


def test_ptxas_report_is_parsed_per_kernel():
    log = (
        "ptxas info    : Compiling entry function '_Z3fooPf' for 'sm_90'\n"
        "ptxas info    : Function properties for _Z3fooPf\n"
        "    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
        "ptxas info    : Used 255 registers, used 1 barriers, 2048 bytes smem, 360 bytes cmem[0]\n"
    )
    [kernel] = build.parse_resources(log)
    assert kernel["registers"] == 255 and kernel["smem_bytes"] == 2048 and kernel["spill_stores"] == 4
    assert "spilled" in build.format_resources([kernel])


def test_missing_nvcc_says_how_to_get_it(monkeypatch):
    monkeypatch.setattr(build, "find_nvcc", lambda: None)
    result = build.build_shared_library(ROOT / "solutions" / "reduction" / "reduction.cu")
    assert not result.ok and "CUDA Toolkit" in result.log
