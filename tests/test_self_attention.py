"""self_attention (100-day days 8 and 15, transformer-ops step 10): single-head attention over (B, N, d) float32
in one raw CUDA kernel, causal or not, d in {32, 64, 128}.

CPU: the spec's cases and the README's ladder; the algorithms a kernel may honestly use (two passes per row,
the online softmax over tiles with exp2 and the scale folded into q, as the solution does) played in torch
pass every case with room to spare, and each classic mistake (no max subtraction, no 1/sqrt(d), the causal
diagonal masked, a padded tail tile taken for keys, scores in TF32) fails the case built for it; the stub and
the solution build for sm_90 (the solution without spills) and every ladder fixture compiles. GPU
(`python -m pytest -m gpu -s tests/test_self_attention.py`): the solution passes, printing its TFLOP/s beside
SDPA's float32 measured in the same process; the stub fails; the ladder's kernels pass numerics and print
their figures; the solution's any-d fallback is right for other d and misaligned pointers. The mistakes'
CUDA kernels are the spec's [[mistakes]] (tests/test_exercise_mistakes.py)."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import ROOT
from cuda_checks import build_without_spills, compile_fixtures, numerics
from simulated_kernels import (
    cpu_cases,
    exercise,
    figure_line,
    first_failure,
    grade_fixture,
    store,
    trial_data,
    trial_verdict,
    verdicts,
)

from grader.checks.hints import parse_ladder
from grader.core.discovery import resolve
from grader.core.records import PASSED
from grader.run.grade import grade
from grader.toolchain import build

SPEC = exercise("self_attention")
STUB = SPEC.folder / "self_attention.cu"
SOLUTION = ROOT / "solutions" / "self_attention" / "self_attention.cu"
LOG2E = 1.4426950408889634


def _tf32(x: torch.Tensor) -> torch.Tensor:
    """x rounded to TF32 (10 mantissa bits), as a tensor core's TF32 product reads it."""
    bits = x.float().contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)


def attend(q, k, v, causal: bool, mistake: str | None = None, tile: int = 64, base2: bool = True) -> torch.Tensor:
    """Attention in float32 the way a kernel of the ladder computes it: key tiles of `tile` rows, the online
    softmax across tiles (one tile of N rows: the two-pass kernel), exp2 with log2(e)/sqrt(d) folded into q (or
    exp with 1/sqrt(d)); with one classic mistake if asked."""
    n, d = q.shape[-2], q.shape[-1]
    scale = 1.0 if mistake == "no_scale" else 1 / math.sqrt(d)
    if mistake == "tf32":
        q, k = _tf32(q), _tf32(k)
    q = q * (scale * LOG2E if base2 else scale)
    exp = torch.exp2 if base2 else torch.exp
    rows = torch.arange(n)[:, None]
    m = torch.full(q.shape[:-1], -math.inf)
    l, acc = torch.zeros(q.shape[:-1]), torch.zeros(q.shape)
    for start in range(0, n, tile):
        k_tile, v_tile = k[..., start : start + tile, :], v[..., start : start + tile, :]
        if mistake == "unmasked_tail":  # the padding of the last tile taken for keys
            pad = (0, 0, 0, tile - k_tile.shape[-2])
            k_tile, v_tile = torch.nn.functional.pad(k_tile, pad), torch.nn.functional.pad(v_tile, pad)
        s = q @ k_tile.transpose(-1, -2)
        keys = torch.arange(start, start + k_tile.shape[-2])[None, :]
        if causal:
            s = s.masked_fill(keys >= rows if mistake == "causal_off_by_one" else keys > rows, -math.inf)
        if mistake == "no_max":
            m_new = torch.zeros_like(m)
        else:
            m_new = torch.maximum(m, s.amax(-1))
        base = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)  # rows that have seen no key yet
        alpha, p = exp(m - base), exp(s - base[..., None])
        l, acc, m = l * alpha + p.sum(-1), acc * alpha[..., None] + p @ v_tile, m_new
    return acc / l[..., None]


def play(**how):
    def model(inputs, outputs, params):
        store(outputs["out"], attend(inputs["q"], inputs["k"], inputs["v"], params["causal"], **how))

    return model


HONEST = {
    "two passes per row (exp, one tile of all keys)": play(tile=10**9, base2=False),
    "online softmax over 64-key tiles, exp2 (the solution)": play(),
}
MISTAKES = {  # name: (the play, a label fragment of a case it must fail)
    "no max subtraction": (play(mistake="no_max"), "q scale=30.0"),
    "no 1/sqrt(d) scale": (play(mistake="no_scale"), "N=17"),
    "the causal diagonal masked (key < row)": (play(mistake="causal_off_by_one"), "causal=True"),
    "a padded 32-key tail tile taken for keys": (play(mistake="unmasked_tail", tile=32), "N=1 d=64 causal=False"),
    "scores in TF32": (play(mistake="tf32"), "k offset=100.0"),
}
# These mistakes in CUDA (all but TF32) are the spec's [[mistakes]]: edits of the solution, graded on the CPU
# emulator and a GPU by tests/test_exercise_mistakes.py.


LADDER_FIXTURES = ["self_attention_two_pass.cu", "self_attention_online.cu", "self_attention_shared_tiles.cu"]


# --- the spec and the README ---------------------------------------------------------------------------


def test_the_entry_point_takes_device_pointers_the_sizes_and_causal():
    variant = SPEC.variant("cuda")
    assert variant.kind == "cuda" and [a.name for a in variant.args] == ["q", "k", "v", "out", "B", "N", "d", "causal"]
    assert [t.shape for t in SPEC.inputs + SPEC.outputs] == [["B", "N", "d"]] * 4


def test_cases_cover_one_key_ragged_lengths_every_d_causal_and_large_scores():
    params = [c.params for c in SPEC.cases]
    assert {p["d"] for p in params} == {32, 64, 128} and {p["causal"] for p in params} == {True, False}
    assert {1, 17, 333, 1000} <= {c.params["N"] for c in cpu_cases(SPEC)}
    assert all(p["N"] % 64 for p in params if p["N"] > 1)  # every tiled kernel meets a partial last tile
    assert any(p["N"] == 1 and p["causal"] for p in params)
    large = [c for c in cpu_cases(SPEC) if c.inputs.get("q", {}).get("scale") or c.inputs.get("k", {}).get("offset")]
    assert {c.params["causal"] for c in large} == {True, False}
    assert any(c.sanitize for c in SPEC.cases)
    verdict_case = SPEC.performance.cases[-1].params
    assert (verdict_case["B"], verdict_case["N"], verdict_case["d"], verdict_case["causal"]) == (16, 4096, 64, False)


def test_the_readme_ladder_climbs_from_one_thread_per_row_to_register_tiles():
    steps = parse_ladder((SPEC.folder / "README.md").read_text(), "cuda")
    assert [s.number for s in steps] == [1, 2, 3, 4]
    figures = [s.roofline_pct for s in steps]
    assert all(figures) and figures == sorted(figures)
    assert "Register tiles" in steps[-1].title


# --- kernels played on the CPU ---------------------------------------------------------------------------


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """The plays are small matrix products: one thread each, which a busy machine does not thrash."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("name", list(HONEST))
def test_honest_kernels_pass_every_case(name):
    found = verdicts(SPEC, HONEST[name])
    assert set(found.values()) == {"ok"}, found


@pytest.mark.parametrize("name", list(MISTAKES))
def test_each_classic_mistake_fails_the_case_built_for_it(name):
    model, fragment = MISTAKES[name]
    index, case = next((i, c) for i, c in enumerate(cpu_cases(SPEC)) if fragment in c.label())
    codes = [trial_verdict(SPEC, case, model, 17 + 1000 * index + t, t) for t in range(SPEC.trials_for(case))]
    assert "mismatch" in codes, (name, case.label(), codes)


def test_the_honest_error_leaves_room_under_the_tolerance():
    """The tightest case (scores of std 30, trial 2 at 1.5x): an honest kernel's error stays under a third of it."""
    case = next(c for c in cpu_cases(SPEC) if c.params["N"] == 333)
    values, (want,) = trial_data(SPEC, case, seed=17 + 1000 * cpu_cases(SPEC).index(case) + 1, trial=1)
    tol = SPEC.tolerance_of(case)
    for tile in (16, 64, 10**9):
        got = attend(values["q"], values["k"], values["v"], False, tile=tile).double()
        assert ((got - want).abs() / (tol.atol + tol.rtol * want.abs())).max() < 1 / 3, tile


# --- compiling without a GPU -------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.nvcc
@pytest.mark.solutions
def test_the_stub_and_the_solution_build_for_sm_90_and_the_solution_spills_nothing():
    build_without_spills([STUB, SOLUTION])
    kernels = {r["kernel"] for r in build.build_shared_library(SOLUTION, "sm_90", device_only=True).resources}
    assert any("attention_tiled" in k for k in kernels), kernels  # the tiled kernel, found again in the cache


@pytest.mark.slow
@pytest.mark.nvcc
def test_every_ladder_fixture_compiles():
    compile_fixtures(LADDER_FIXTURES)


# Without a GPU the solution runs on the CPU emulator, its cp.async translated: tests/test_grading_cpu_cuda.py grades
# it there (the same grade, seed 7), as every CUDA solution.


# --- on a GPU: the real kernels ----------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.solutions
def test_the_solution_passes_and_prints_its_tflops_beside_sdpa_float32():
    result = grade(resolve(("self_attention",)), source="solutions", seed=3, record=False)
    assert result.status == PASSED, result.verdict
    for t in result.timings:
        print(
            f"\n{t.case}: solution {t.learner_ms:.4g} ms {t.learner_rate:.1f} TFLOP/s ({t.roofline_pct or 0:.0f}% of "
            f"float32 cuBLAS); SDPA float32 {t.torch_ms:.4g} ms (solution / SDPA {t.torch_ms / t.learner_ms:.2f})"
        )
    assert (result.timings[-1].roofline_pct or 0) >= 50


@pytest.mark.gpu
def test_the_stub_fails_on_the_gpu_with_nothing_written():
    result = grade(resolve(("self_attention",)), source="stubs", seed=5, record=False, quick=True)
    assert first_failure(result).details.get("code") == "not_written", result.verdict


@pytest.mark.bench
@pytest.mark.gpu
@pytest.mark.parametrize("fixture", LADDER_FIXTURES)
def test_the_ladder_kernels_pass_numerics_and_print_their_figures(fixture):
    result = grade_fixture("self_attention", fixture)
    assert numerics(result).status == PASSED, result.verdict
    if result.timings:
        print("\n" + figure_line(f"self_attention {fixture}", result))


@pytest.mark.gpu
@pytest.mark.solutions
@pytest.mark.parametrize("d,offset", [(48, 0), (256, 0), (64, 1), (128, 3)])
def test_the_solutions_fallback_takes_other_d_and_misaligned_pointers(d, offset):
    """d outside {32, 64, 128}, or a pointer off a 16-byte boundary: the one-warp-per-row kernel."""
    from cuda_rows import cuda_caller

    caller = cuda_caller(SPEC, SOLUTION, role="solution")
    B, N = 2, 77
    for causal in (False, True):
        q, k, v = (torch.randn(B * N * d + offset, device="cuda")[offset:].view(B, N, d) for _ in range(3))
        out = torch.full((B, N, d), float("nan"), device="cuda")
        caller({"q": q, "k": k, "v": v, "out": out}, {"B": B, "N": N, "d": d, "causal": causal})
        want = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
        assert torch.allclose(out.double(), want, atol=1e-5, rtol=1e-4), (d, offset, causal)
