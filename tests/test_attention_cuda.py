"""flash_attention_v1, CUDA version: a torch operator beside the Triton version, on the same cases.

CPU: the spec has both versions and the README a ladder for each; the stub and the solution compile for
sm_90 against torch's headers (nvcc's resource report lists the eight kernels: dtype x d x causal); the
grader reports the CUDA version's GPU checks skipped, never passed; the classic mistakes of the ladder's
first kernel (tests/fixtures/submissions/flash_attention_v1_minimal.cu) are played in torch against every
case of the spec and each fails one. GPU (`python -m pytest -m gpu -s tests/test_attention_cuda.py`): the
solution passes, printing its TFLOP/s beside SDPA's measured in the same process, with no extra memory;
the stub fails; the ladder's first kernel passes numerics; an operator that allocates the N x N scores
fails the memory check. The mistakes edited into the solution are graded by tests/test_exercise_mistakes.py
(the spec's [[mistakes]] with lang = "cuda")."""

from __future__ import annotations

import functools
import math
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from conftest import HAS_GPU, ROOT, _session_cache, submission

from grader.checks import memory
from grader.checks.checking import compare, load_reference, reference_outputs
from grader.checks.hints import parse_ladder
from grader.checks.inputs import generate, place
from grader.core.discovery import discover_exercises, resolve
from grader.core.records import FAILED, PASSED, SKIPPED
from grader.run.grade import grade
from grader.toolchain.build import compile_check_torch_op

SPEC = discover_exercises()["flash_attention_v1"]
REFERENCE = load_reference(SPEC.folder / "reference.py")
STUB = SPEC.folder / "flash_attention_v1.cu"
SOLUTION = ROOT / "solutions" / "flash_attention_v1" / "flash_attention_v1.cu"
KERNELS = {
    f"void flash_fwd_kernel<{t}, {d}, {c}>(Params)"
    for t in ("__half", "__nv_bfloat16")
    for d in (64, 128)
    for c in ("false", "true")
}


def checks_by_name(result):
    return {c.name: c for c in result.checks}


# --- the spec and the README -----------------------------------------------------------------------


def test_the_spec_has_a_triton_and_a_cuda_operator_version_on_the_same_cases():
    triton, cuda = SPEC.variants["triton"], SPEC.variants["cuda"]
    assert (triton.kind, cuda.kind) == ("triton", "torch_op")
    assert cuda.stub == "flash_attention_v1.cu" and cuda.entry == "flash_attention"
    assert [a.name for a in cuda.args] == ["q", "k", "v", "causal"]  # the operator returns out
    assert cuda.returns_outputs and cuda.timeout_s >= 600  # the first build compiles torch's headers
    assert all(cuda.accepts(c) and triton.accepts(c) for c in SPEC.cases + SPEC.performance.cases)
    assert resolve(("flash_attention_v1",)).variant.kind == "triton"  # default_lang: week 7's grade stays Triton
    assert resolve(("flash_attention_v1",), lang="cuda").variant.kind == "torch_op"


def test_the_readme_has_a_ladder_per_version_from_the_minimal_kernel_to_the_solution():
    text = (SPEC.folder / "README.md").read_text()
    cuda, triton = parse_ladder(text, "cuda"), parse_ladder(text, "triton")
    assert [s.title for s in cuda] == [
        "Minimal",
        "Tensor cores through WMMA",
        "mma.sync in registers",
        "Feed the tensor cores",
    ]
    assert all(s.roofline_pct for s in cuda) and [s.roofline_pct for s in cuda] == sorted(s.roofline_pct for s in cuda)
    assert [s.title for s in triton][0] == "Correct" and len(triton) == 3  # the Triton ladder is unchanged


# --- compiling without a GPU -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def compiled():
    """Stub and solution compiled once, side by side (each parses torch's headers: about half a minute),
    into the session's build cache, where the grades below find them."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KCOURSE_CACHE", str(_session_cache()))
        with ThreadPoolExecutor(2) as pool:
            stub, solution = pool.map(compile_check_torch_op, [STUB, SOLUTION])
    for result in (stub, solution):
        if result.skipped:
            pytest.skip(result.log)
    return {"stubs": stub, "solutions": solution}


@pytest.mark.nvcc
@pytest.mark.slow
@pytest.mark.solutions
def test_the_stub_and_the_solution_compile_for_sm_90_with_all_eight_kernels(compiled):
    for source, result in compiled.items():
        assert result.ok, f"{source}: {result.log}"
        assert {k["kernel"] for k in result.resources} == KERNELS and {k["arch"] for k in result.resources} == {"sm_90"}
    for kernel in compiled["solutions"].resources:  # 2 blocks of 128 threads an SM: at most 255 registers,
        assert kernel["registers"] <= 255  # and the few values spilled are outside the MMA loops
        assert kernel["spill_stores"] + kernel["spill_loads"] <= 512, kernel


@pytest.mark.skipif(HAS_GPU, reason="checks the no-GPU path")
@pytest.mark.nvcc
@pytest.mark.slow
@pytest.mark.solutions
@pytest.mark.parametrize("source", ["solutions", "stubs"])
def test_without_a_gpu_the_cuda_version_is_compiled_and_its_gpu_checks_reported_skipped(compiled, source):
    result = grade(resolve(("flash_attention_v1",), lang="cuda"), source=source, seed=7)
    checks = checks_by_name(result)
    assert checks["build"].status == PASSED and "flash_fwd_kernel<__nv_bfloat16, 128, false>" in checks["build"].message
    assert checks["numerics"].status == SKIPPED and "no GPU" in checks["numerics"].message
    assert checks["speed"].status == SKIPPED
    assert result.status == SKIPPED  # never passed


# --- the classic mistakes of the ladder's first kernel, played in torch -----------------------------

BLOCK_N = 32  # the minimal kernel's key tile


def attend(q, k, v, causal: bool, mistake: str | None = None) -> torch.Tensor:
    """The minimal kernel's algorithm in float32 on the CPU, one tile of BLOCK_N keys at a time (the fixture
    updates per key; a tile is the same online softmax), with one of its classic mistakes if asked."""
    if mistake == "ignores_strides":  # rows taken to be d apart, whatever the row stride
        q, k, v = (x.as_strided(x.shape, (x.stride(0), x.stride(1), x.shape[-1], 1)) for x in (q, k, v))
    q, k, v = (x.float() for x in (q, k, v))
    n, d = q.shape[-2], q.shape[-1]
    rows = torch.arange(n)[:, None]
    m = torch.full(q.shape[:-1], -math.inf)
    l, acc = torch.zeros(q.shape[:-1]), torch.zeros(q.shape)
    for start in range(0, n, BLOCK_N):
        keys = torch.arange(start, start + BLOCK_N)[None, :]
        k_tile, v_tile = (
            torch.nn.functional.pad(x[..., start : start + BLOCK_N, :], (0, 0, 0, max(0, start + BLOCK_N - n)))
            for x in (k, v)
        )  # zeros past the end, as the kernel's shared tiles
        s = q @ k_tile.transpose(-1, -2) / math.sqrt(d)
        hidden = keys >= n if mistake != "unmasked_tail" else torch.zeros_like(keys, dtype=torch.bool)
        if causal:
            hidden = hidden | (keys >= rows if mistake == "causal_off_by_one" else keys > rows)
        s = s.masked_fill(hidden, -math.inf)
        if mistake == "no_max":
            m_new, alpha = torch.zeros_like(m), torch.ones_like(m)
        else:
            m_new = torch.maximum(m, s.amax(-1))
            alpha = torch.exp(m - m_new).nan_to_num(0.0)  # a row with no key yet: -inf - (-inf)
        p = torch.exp(s - m_new[..., None])
        l = l * alpha + p.sum(-1)
        acc = (acc if mistake == "no_rescale" else acc * alpha[..., None]) + p @ v_tile
        m = m_new
    return acc / l[..., None]


# every kind of case: the CPU ones and the short GPU-only ones (bfloat16); the long ones cost seconds each here
PLAYED = [i for i, c in enumerate(SPEC.cases) if not c.gpu_only or c.params["N"] <= 333]


@functools.lru_cache(maxsize=None)
def case_data(index: int):
    """Case `index`'s inputs (trial 0) laid out as the grader lays them out, and the float64 reference."""
    case = SPEC.cases[index]
    values = generate(SPEC, case, seed=11)
    inputs = {name: place(x, case.inputs.get(name, {}).get("layout"), "cpu") for name, x in values.items()}
    return case, inputs, reference_outputs(REFERENCE, SPEC, values, case.params)[0]


def verdicts(mistake: str | None) -> dict[str, str]:
    """Case label -> the grader's comparison code, for the PLAYED cases of the spec."""
    found = {}
    for index in PLAYED:
        case, inputs, ref = case_data(index)
        out = attend(inputs["q"], inputs["k"], inputs["v"], case.params["causal"], mistake).to(ref.dtype)
        out = out.to(inputs["q"].dtype)  # rounded to the case's dtype, as the kernel stores it
        found[case.label()] = compare("out", out, ref, SPEC.tolerance_of(case), case.label()).code
    return found


def test_the_played_minimal_kernel_passes_every_case():
    found = verdicts(None)
    assert set(found.values()) == {"ok"} and len(found) >= 11, found


@pytest.mark.parametrize(
    "mistake,fails_on",
    [
        ("no_rescale", "N=1000"),  # many tiles (per key, as in the fixture, any row with two keys)
        ("no_max", "q scale=30.0"),  # scores of std 30: exp overflows float32 past 88, inf / inf
        ("unmasked_tail", "N=1 d=64"),  # the one real key and 31 zero-padded ones share the weight
        ("causal_off_by_one", "causal=True"),  # row 0 sees no key: 0 / 0
        ("ignores_strides", "layout=row_slice"),
    ],
)
def test_each_classic_mistake_fails_a_case_of_the_spec(mistake, fails_on):
    found = verdicts(mistake)
    failed = [label for label, code in found.items() if code != "ok"]
    assert any(fails_on in label for label in failed), (mistake, found)


# --- GPU: the real operators ---------------------------------------------------------------------------


def tflops(case: str, ms: float | None) -> float:
    """The spec's FLOP count for a timing record's case label at `ms` milliseconds, in TFLOP/s."""
    params = dict(item.split("=") for item in case.split(" (")[0].split())
    b, h, n, d = (int(params[x]) for x in "BHNd")
    flops = 4 * b * h * n * n * d * (0.5 if params["causal"] == "True" else 1.0)
    return flops / (ms * 1e-3) / 1e12 if ms else float("nan")


@pytest.mark.gpu
@pytest.mark.solutions
def test_cuda_solution_passes_with_its_tflops_beside_sdpa_and_no_extra_memory():
    result = grade(resolve(("flash_attention_v1",), lang="cuda"), source="solutions", seed=3)
    checks = checks_by_name(result)
    assert result.status == PASSED, result.verdict
    assert checks["memory"].status == PASSED, checks["memory"].message
    for t in result.timings:
        if t.learner_ms is not None:  # the sizes before the verdict's are run for their memory alone
            print(
                f"\n{t.case}: you {t.learner_ms:.4g} ms {tflops(t.case, t.learner_ms):.0f} TFLOP/s, SDPA {t.torch_ms:.4g} ms "
                f"{tflops(t.case, t.torch_ms):.0f} TFLOP/s (you / SDPA {t.torch_ms / t.learner_ms:.2f}); extra memory "
                f"{memory.size_text(t.learner_extra_bytes)} (limit {memory.size_text(t.extra_bytes_limit)})"
            )
        assert t.learner_extra_bytes < 2**20  # only out, which an operator returns: not scratch


@pytest.mark.gpu
@pytest.mark.solutions
def test_cuda_stub_fails_on_the_gpu_with_nothing_written():
    result = grade(resolve(("flash_attention_v1",), lang="cuda"), source="stubs", seed=5, quick=True)
    numerics = checks_by_name(result)["numerics"]
    assert result.status == FAILED and numerics.status == FAILED
    assert numerics.details["code"] == "not_written", numerics.message


@pytest.mark.gpu
@pytest.mark.solutions
def test_the_ladders_first_kernel_passes_numerics_and_is_timed():
    # as `kcourse grade` does: every size is run for the memory check, only the verdict's is timed (the minimal
    # kernel timed at every size beside the solution and torch took 108 s in the tier)
    result = grade(
        resolve(("flash_attention_v1",), lang="cuda"),
        submission=submission("flash_attention_v1_minimal.cu"),
        seed=5,
        timed_sizes="verdict",
    )
    checks = checks_by_name(result)
    assert checks["numerics"].status == PASSED, checks["numerics"].message
    assert checks["memory"].status == PASSED, checks["memory"].message
    t = result.timings[-1]
    print(
        f"\nminimal kernel, {t.case}: {t.learner_ms:.4g} ms {tflops(t.case, t.learner_ms):.1f} TFLOP/s "
        f"({t.roofline_pct or 0:.1f}% of roofline); speed: {checks['speed'].status}"
    )


def holding_the_scores(tmp_path):
    """The solution plus the float32 N x N scores a naive operator would allocate (never used)."""
    source = SOLUTION.read_text()
    marker = "    if (q.numel() == 0) return out;\n"
    assert marker in source
    scratch = "    at::Tensor scores = at::empty({q.size(0), q.size(1), q.size(2), q.size(2)}, q.options().dtype(at::kFloat));\n"
    path = tmp_path / "flash_attention_v1.cu"
    path.write_text(source.replace(marker, marker + scratch))
    return path


@pytest.mark.gpu
@pytest.mark.solutions
def test_an_operator_holding_the_scores_fails_the_memory_check(tmp_path):
    result = grade(resolve(("flash_attention_v1",), lang="cuda"), submission=holding_the_scores(tmp_path), seed=3)
    check = checks_by_name(result).get("memory")
    assert check is not None, [(c.name, c.status, c.message[:300]) for c in result.checks]
    assert check.status == FAILED and "do not materialise" in check.message, check.message
    print("\n" + check.message)
