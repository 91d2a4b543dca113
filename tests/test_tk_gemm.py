"""tk_gemm, the ThunderKittens track's GEMM ladder: bf16 C = A @ B from warp MMA to a persistent WGMMA kernel.

On the CPU: the spec keeps to the sizes the kernels tile, the stub, the solution and every rung of the ladder
(solutions/tk_gemm/ladder/) compile for sm_90a with ThunderKittens, `kcourse compare` shows the ladder (compiled
only), and the classic mistakes, played in torch on the spec's cases, fail. On a Hopper GPU: the solution
passes at 70% of cuBLAS or more (printed beside torch.matmul, same process), every rung passes numerics, the stub
fails. The mistakes edited into the solution are graded by tests/test_exercise_mistakes.py (the spec's
[[mistakes]]).

ThunderKittens is found from KCOURSE_TK_ROOT, else ../shared/thirdparty/ThunderKittens beside the repository;
where neither is, the compile tests skip and say so."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from conftest import HAS_GPU, ROOT, _session_cache
from cuda_checks import figures, numerics
from cuda_rows import verdict
from tk_checks import NO_TK, TK, with_tk  # noqa: F401 (with_tk: a fixture the tests use)

from grader.commands import compare
from grader.core.discovery import discover_exercises, resolve
from grader.run.grade import grade
from grader.toolchain import build, thunderkittens

SPEC = discover_exercises()["tk_gemm"]
STUB = ROOT / "exercises" / "tk_gemm" / "tk_gemm.cu"
SOLUTION = ROOT / "solutions" / "tk_gemm" / "tk_gemm.cu"
LADDER = sorted((ROOT / "solutions" / "tk_gemm" / "ladder").glob("step*.cu"))
# --- the spec --------------------------------------------------------------------------------------------


def test_every_case_keeps_n_and_k_to_the_tiles_and_m_is_ragged():
    for case in SPEC.cases + SPEC.performance.cases:
        p = case.params
        assert p["N"] % 256 == 0 and p["K"] % 64 == 0 and case.dtype == "bfloat16", case.label()
    assert {1, 383, 1000, 3301} <= {c.params["M"] for c in SPEC.cases}  # tiles of C hanging past M
    timed = {(c.params["M"], c.params["N"], c.params["K"]) for c in SPEC.performance.cases}
    assert {(4096, 4096, 4096), (8192, 8192, 8192)} <= timed and SPEC.performance.bound == "compute"


def test_an_arch_specific_target_is_built_without_generic_ptx():
    # nvcc 13 reads -arch=sm_90a as sm_90a code plus compute_90 PTX, where wgmma and setmaxnreg do not assemble
    assert build.arch_flags("sm_90a") == ["-gencode=arch=compute_90a,code=sm_90a"]
    assert build.arch_flags("sm_90") == ["-arch=sm_90"]


# --- compiling for sm_90a ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def builds():
    """The stub, the solution and every rung, compiled for sm_90a (10-60 s each: a few at a time, once)."""
    if TK is None:
        pytest.skip(NO_TK)
    if build.find_nvcc() is None:
        pytest.skip("nvcc not found: install the CUDA Toolkit")
    sources = [STUB] + ([SOLUTION] if SOLUTION.exists() else []) + LADDER
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(thunderkittens.ENV_VAR, str(TK))
        patch.setenv("KCOURSE_CACHE", str(_session_cache()))  # compare's grades below find these builds
        with ThreadPoolExecutor(3) as pool:
            results = pool.map(
                lambda s: build.build_shared_library(s, None, requires=["thunderkittens"], device_only=not HAS_GPU),
                sources,
            )
            return dict(zip(sources, results))


@pytest.mark.slow
def test_the_stub_the_solution_and_every_rung_compile_for_sm_90a_without_spills(builds):
    for source, built in builds.items():
        assert built.ok and built.arch == "sm_90a", f"{source.name}: {built.log}"
        assert not any(k["spill_stores"] for k in built.resources), (source.name, built.resources)
    if SOLUTION in builds:
        assert [k["registers"] for k in builds[SOLUTION].resources] == [168]  # 384 threads, one block an SM


@pytest.mark.slow
@pytest.mark.nvcc
@pytest.mark.solutions
def test_compare_shows_the_ladder_compiled_only_on_a_cpu(builds, with_tk):
    if HAS_GPU:
        pytest.skip("on a GPU, compare times every rung: solutions/tk_gemm/ladder_bench.py does that")
    files = LADDER + [SOLUTION]
    record, results = compare.compare("tk_gemm", compare.entries_for_files("tk_gemm", files), seed=3)
    assert [r["label"] for r in record["rows"]] == [f.name for f in files]
    assert all(r["numerics"] == "skipped" and r["status"] == "skipped" for r in record["rows"]), record["rows"]
    assert all(next(c for c in res.checks if c.name == "build").status == "passed" for res in results)
    assert "compiled only" in compare.format_comparison(record)


# --- the classic mistakes, played in torch on the spec's cases --------------------------------------------


def _case(M: int, N: int, K: int):
    return next(c for c in SPEC.cases if (c.params["M"], c.params["N"], c.params["K"]) == (M, N, K))


def honest(t, p):  # float32 sums, rounded to bf16 once
    t["C"].copy_(t["A"].float() @ t["B"].float())


def bf16_running_sum(t, p):  # the accumulator rounded to bf16 after each 64-wide slice of K
    A, B = t["A"].float(), t["B"].float()
    acc = torch.zeros(p["M"], p["N"], dtype=torch.bfloat16)
    for k in range(0, p["K"], 64):
        acc = (acc.float() + A[:, k : k + 64] @ B[k : k + 64]).to(torch.bfloat16)
    t["C"].copy_(acc)


def last_slice_dropped(t, p):  # a pipeline's loop that stops one slice of K early
    k = p["K"] - 64
    t["C"].copy_(t["A"][:, :k].float() @ t["B"][:k].float())


def square_grid(t, p):  # the educational kernels' launch: a grid of M x M, for N = M
    n = min(p["M"], p["N"])
    t["C"][:, :n].copy_(t["A"].float() @ t["B"][:, :n].float())


def whole_row_tiles_only(t, p):  # a grid of M / 128 block-rows, rounded down: the partial last one is lost
    m = 128 * (p["M"] // 128)
    t["C"][:m].copy_(t["A"][:m].float() @ t["B"].float())


def one_tile_per_block(t, p, sms: int = 132):  # a persistent grid without the loop over tasks
    C = t["A"].float() @ t["B"].float()
    tiles = [(r, c) for c in range(p["N"] // 256) for r in range(p["M"] // 128)][:sms]
    for r, c in tiles:
        t["C"][r * 128 : (r + 1) * 128, c * 256 : (c + 1) * 256].copy_(
            C[r * 128 : (r + 1) * 128, c * 256 : (c + 1) * 256]
        )


def test_an_honest_float32_kernel_passes_the_small_cases():
    for case in SPEC.cases:
        p = case.params
        if not case.gpu_only and p["M"] * p["N"] * p["K"] <= 2**27:  # the larger ones are slow on the CPU here
            assert verdict(SPEC, case, honest) == "ok", case.label()


@pytest.mark.parametrize(
    "play, size, codes",
    [
        (bf16_running_sum, (256, 512, 320), ("mismatch",)),
        (last_slice_dropped, (1, 256, 64), ("mismatch",)),
        (whole_row_tiles_only, (383, 256, 1024), ("partial_write",)),
        (whole_row_tiles_only, (1, 256, 64), ("not_written",)),
        (square_grid, (128, 1024, 128), ("partial_write",)),
        (one_tile_per_block, (2048, 2304, 128), ("partial_write",)),
    ],
)
def test_each_classic_mistake_fails_on_the_case_built_for_it(play, size, codes):
    assert verdict(SPEC, _case(*size), play) in codes, play.__name__


# --- on a Hopper GPU ---------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.solutions
def test_the_solution_passes_at_70_percent_of_cublas_beside_torch(with_tk):
    result = grade(resolve(("tk_gemm",)), source="solutions", seed=5, record=False)
    print(f"\ntk_gemm on {torch.cuda.get_device_name()}: {figures(result)}")
    assert result.status == "passed", result.verdict
    for t in result.timings:
        if t.case.startswith(("M=4096", "M=8192")):
            assert t.learner_rate >= 0.7 * t.torch_rate, figures(result)


@pytest.mark.gpu
def test_the_stub_compiles_runs_and_fails_numerics_on_the_gpu(with_tk):
    result = grade(resolve(("tk_gemm",)), source="stubs", seed=5, record=False, quick=True)
    check = next(c for c in result.checks if c.status in ("failed", "error"))
    assert check.name == "numerics" and check.details.get("code") == "not_written", result.verdict


@pytest.mark.gpu
@pytest.mark.solutions
@pytest.mark.parametrize("rung", LADDER, ids=lambda p: p.stem)
def test_every_rung_of_the_ladder_passes_numerics(with_tk, rung):
    result = grade(resolve(("tk_gemm",)), submission=rung, seed=5, record=False, quick=True)
    assert numerics(result).status == "passed", result.verdict
