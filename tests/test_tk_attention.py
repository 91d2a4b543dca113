"""tk_attention, the ThunderKittens track's attention forward: bf16 softmax(q k^T / sqrt(d)) v on Hopper tiles.

On the CPU: the spec's cases break the classic mistakes (ragged N, causal and not, d = 64 and 128, large scores);
the stub, the solution and the ladder's WGMMA rung compile for sm_90a without spills; the grader's CPU path
compiles and skips the run; the solution's own blocking (192 query rows, 128-key blocks, base-2 online softmax,
p in bf16), played in torch, passes every CPU case, and each classic mistake played the same way fails on the
case built for it. On a Hopper GPU: the solution passes at 60% of SDPA or more, within the O(N) memory limit;
the stub fails (nothing written); the rung passes numerics. The mistakes edited into the solution are graded
by tests/test_exercise_mistakes.py (the spec's [[mistakes]]).

ThunderKittens is found from KCOURSE_TK_ROOT, else ../shared/thirdparty/ThunderKittens beside the repository;
where neither is, the compile tests skip and say so."""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from conftest import HAS_GPU, ROOT, _session_cache
from cuda_checks import figures, numerics
from cuda_rows import verdict
from tk_checks import NO_TK, TK, with_tk  # noqa: F401 (with_tk: a fixture the tests use)

from grader.core.discovery import discover_exercises, resolve
from grader.run.grade import grade
from grader.toolchain import build, thunderkittens

SPEC = discover_exercises()["tk_attention"]
STUB = ROOT / "exercises" / "tk_attention" / "tk_attention.cu"
SOLUTION = ROOT / "solutions" / "tk_attention" / "tk_attention.cu"
RUNG = ROOT / "solutions" / "tk_attention" / "ladder" / "step2_wgmma.cu"
# --- the spec --------------------------------------------------------------------------------------------


def test_the_cases_cover_ragged_lengths_both_head_dims_causal_and_large_scores():
    cases = SPEC.cases
    assert all(c.dtype == "bfloat16" and c.params["d"] in (64, 128) for c in cases + SPEC.performance.cases)
    assert {1, 17, 100, 333, 1000, 1537, 4099} <= {c.params["N"] for c in cases}  # none a multiple of 64
    for d in (64, 128):
        assert {c.params["causal"] for c in cases if c.params["d"] == d} == {False, True}
    assert any(c.inputs.get("q", {}).get("scale") == 30.0 for c in cases if not c.gpu_only)
    assert any(c.inputs.get("k", {}).get("offset") == 100.0 for c in cases if not c.gpu_only)


def test_speed_is_judged_at_sdpas_size_with_an_o_n_memory_limit():
    last = SPEC.performance.cases[-1].params
    assert (last["B"], last["H"], last["N"], last["d"], last["causal"]) == (4, 32, 4096, 128, False)
    assert {(c.params["d"], c.params["causal"]) for c in SPEC.performance.cases} == {
        (64, False),
        (64, True),
        (128, True),
        (128, False),
    }
    assert SPEC.performance.bound == "compute" and SPEC.performance.max_extra_bytes


# --- compiling for sm_90a ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def builds():
    """The stub, the solution and the WGMMA rung compiled for sm_90a (about 10 s each), once."""
    if TK is None:
        pytest.skip(NO_TK)
    if build.find_nvcc() is None:
        pytest.skip("nvcc not found: install the CUDA Toolkit")
    sources = [STUB] + [s for s in (SOLUTION, RUNG) if s.exists()]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(thunderkittens.ENV_VAR, str(TK))
        patch.setenv("KCOURSE_CACHE", str(_session_cache()))  # the grades below find these builds
        with ThreadPoolExecutor(2) as pool:
            results = pool.map(
                lambda s: build.build_shared_library(s, None, requires=["thunderkittens"], device_only=not HAS_GPU),
                sources,
            )
            return dict(zip(sources, results))


@pytest.mark.slow
def test_the_stub_the_solution_and_the_rung_compile_for_sm_90a_without_spills(builds):
    for source, built in builds.items():
        assert built.ok and built.arch == "sm_90a", f"{source.name}: {built.log}"
        assert len(built.resources) == 4, built.resources  # d = 64, 128 x causal or not
        assert not any(k["spill_stores"] or k["stack_bytes"] for k in built.resources), (source.name, built.resources)
    if SOLUTION in builds:  # 512 threads, one block an SM: 128 registers at launch, setmaxnreg moves them
        assert [k["registers"] for k in builds[SOLUTION].resources] == [128] * 4


@pytest.mark.slow
@pytest.mark.nvcc
@pytest.mark.solutions
def test_on_a_cpu_the_grade_compiles_for_sm_90a_and_skips_the_run(with_tk, builds):
    result = grade(resolve(("tk_attention",)), source="solutions", seed=3, record=False, quick=True)
    build_check = next(c for c in result.checks if c.name == "build")
    assert build_check.status == "passed" and "compiled for sm_90a" in build_check.message
    if not torch.cuda.is_available():
        assert numerics(result).status == "skipped" and numerics(result).details["code"] == "no_gpu"


@pytest.mark.slow
@pytest.mark.nvcc
def test_the_stub_compiles_and_does_not_pass(with_tk, builds):
    result = grade(resolve(("tk_attention",)), source="stubs", seed=3, record=False, quick=True)
    assert next(c for c in result.checks if c.name == "build").status == "passed"
    assert result.status != "passed", result.verdict


# --- the solution's blocking and the classic mistakes, played in torch on the spec's cases --------------------

LOG2E = 1.4426950408889634


def blocked_attention(
    t,
    p,
    *,
    q_rows=192,
    kv_rows=128,
    scale=None,
    subtract_max=True,
    mask_past_n=True,
    diagonal=0,
    rescale=True,
    query_blocks=None,
):
    """The solution's arithmetic: blocks of q_rows queries (causal: key blocks up to the block's last real
    query), kv_rows-key blocks read zero-padded past N (TMA), scores masked to -inf, a base-2 online softmax in
    float32, p rounded to bf16 for P V, rows past N not stored. The keywords are the classic mistakes."""
    q, k, v, out = t["q"].float(), t["k"].float(), t["v"].float(), t["out"]
    n, d, causal = p["N"], p["d"], bool(p["causal"])
    c = LOG2E * (scale if scale is not None else d**-0.5)
    padded = -(-n // kv_rows) * kv_rows
    k = torch.nn.functional.pad(k, (0, 0, 0, padded - n))
    v = torch.nn.functional.pad(v, (0, 0, 0, padded - n))
    blocks = query_blocks(n) if query_blocks else -(-n // q_rows)
    for qb in range(blocks):
        rows = torch.arange(qb * q_rows, min(n, (qb + 1) * q_rows))
        key_blocks = (int(rows[-1]) // kv_rows + 1) if causal else padded // kv_rows
        m = torch.full(q.shape[:2] + (len(rows), 1), -math.inf)
        l, o = torch.zeros_like(m), torch.zeros(q.shape[:2] + (len(rows), d))
        for b in range(key_blocks):
            keys = torch.arange(b * kv_rows, (b + 1) * kv_rows)
            s = q[:, :, rows] @ k[:, :, keys].transpose(-1, -2)
            masked = torch.zeros(len(rows), kv_rows, dtype=torch.bool)
            if mask_past_n:
                masked |= keys[None, :] >= n
            if causal:
                masked |= keys[None, :] > rows[:, None] + diagonal
            s = s.masked_fill(masked, -math.inf)
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            shift, old = (m_new * c, m * c) if subtract_max else (0.0, 0.0)
            prob = torch.exp2(s * c - shift)
            alpha = torch.exp2(old - shift) if subtract_max else torch.ones_like(m)
            l = l * alpha + prob.sum(-1, keepdim=True)
            o = (o * alpha if rescale else o) + prob.bfloat16().float() @ v[:, :, keys]
            m = m_new
        out[:, :, rows] = (o / l).to(out.dtype)


def _case(N: int, causal: bool, d: int | None = None):
    return next(
        c
        for c in SPEC.cases
        if c.params["N"] == N and c.params["causal"] == causal and (d is None or c.params["d"] == d) and not c.gpu_only
    )


def test_the_solutions_blocking_played_in_torch_passes_every_cpu_case():
    for case in SPEC.cases:
        if not case.gpu_only:
            assert verdict(SPEC, case, blocked_attention) == "ok", case.label()


def test_the_stubs_blocking_played_in_torch_passes_too():  # 64 query rows, 64-key tiles: the first steps
    def stub_blocks(t, p):
        blocked_attention(t, p, q_rows=64, kv_rows=64)

    for case in SPEC.cases:
        if not case.gpu_only:
            assert verdict(SPEC, case, stub_blocks) == "ok", case.label()


MISTAKES = {  # name: (how the mistaken kernel computes, the case it fails on, the verdict codes)
    "no_max_subtraction": (dict(subtract_max=False), (333, False), ("mismatch",)),  # exp overflows: inf / inf
    "scale_one_over_d": (dict(scale=None), (100, False), ("mismatch",)),  # set per case below
    "keys_past_n_unmasked": (dict(mask_past_n=False), (100, False), ("mismatch",)),
    "diagonal_masked_too": (dict(diagonal=-1), (17, True), ("mismatch",)),  # row 0 sees no key: NaN
    "diagonal_off_by_one": (dict(diagonal=1), (300, True), ("mismatch",)),
    "no_rescale_by_alpha": (dict(rescale=False), (1000, False), ("mismatch",)),
    "blocks_rounded_down": (dict(query_blocks=lambda n: n // 192), (333, False), ("partial_write",)),
    "no_block_for_short_n": (dict(query_blocks=lambda n: n // 192), (17, True), ("not_written",)),
}


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_each_classic_mistake_fails_on_the_case_built_for_it(mistake):
    knobs, (n, causal), codes = MISTAKES[mistake]
    case = _case(n, causal)
    if mistake == "scale_one_over_d":
        knobs = dict(scale=1.0 / case.params["d"])
    assert verdict(SPEC, case, lambda t, p: blocked_attention(t, p, **knobs)) in codes, mistake


# --- on a Hopper GPU ---------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.solutions
def test_the_solution_passes_at_60_percent_of_sdpa_within_the_memory_limit(with_tk):
    result = grade(resolve(("tk_attention",)), source="solutions", seed=5, record=False)
    print(f"\ntk_attention on {torch.cuda.get_device_name()}: {figures(result)}")
    assert result.status == "passed", result.verdict
    assert next(c for c in result.checks if c.name == "memory").status == "passed", result.verdict
    verdict_size = result.timings[-1]
    assert verdict_size.learner_rate >= 0.6 * verdict_size.torch_rate, figures(result)


@pytest.mark.gpu
def test_the_stub_compiles_runs_and_fails_numerics_on_the_gpu(with_tk):
    result = grade(resolve(("tk_attention",)), source="stubs", seed=5, record=False, quick=True)
    check = next(c for c in result.checks if c.status in ("failed", "error"))
    assert check.name == "numerics" and check.details.get("code") == "not_written", result.verdict


@pytest.mark.gpu
@pytest.mark.solutions
def test_the_wgmma_rung_passes_numerics(with_tk):
    result = grade(resolve(("tk_attention",)), submission=RUNG, seed=5, record=False, quick=True)
    assert numerics(result).status == "passed", result.verdict
