"""residual_activation (transformer operators, step 8: activations fused with the residual connection, as a
PyTorch operator). CPU: the spec's cases against the classic mistakes of the fused kernel, played in torch
and judged as the grader judges (tests/cuda_rows.py): the exact (erf) GELU, act ignored, exp formulas that
overflow to NaN, the activation rounded before the add, 16-byte vectors without a tail; the stub, the
solution and the ladder's first kernel compile for sm_90 where torch's CUDA headers are installed. GPU
(`python -m pytest -m gpu -s tests/test_residual_activation.py`): the ladder's figures at 2^27 bfloat16
elements beside the unfused PyTorch formula and the copy bandwidth, the solution's grade, the stub failing.
The mistakes edited into the solution are graded by tests/test_exercise_mistakes.py (the spec's [[mistakes]])."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import ROOT, submission
from cuda_rows import cuda_cases, verdict, verdicts

from grader.checks.checking import load_reference
from grader.checks.hints import read_ladder
from grader.core import exprs
from grader.core.discovery import discover_exercises, resolve
from grader.run.grade import grade

SPEC = discover_exercises()["residual_activation"]
REFERENCE = load_reference(SPEC.folder / "reference.py")
STUB = SPEC.folder / "residual_activation.cu"
SOLUTION = ROOT / "solutions" / "residual_activation" / "residual_activation.cu"
LADDER = "residual_activation_thread_per_element.cu"  # the ladder's first kernel, a fixture
VECTOR_WIDTH = {torch.float32: 4, torch.bfloat16: 8}  # elements in 16 bytes


def gelu_tanh(v, naive=False):
    u = 0.7978845608028654 * (v + 0.044715 * v * v * v)
    if naive:  # (e^2u - 1) / (e^2u + 1): inf / inf once e^2u overflows
        e = torch.exp(2 * u)
        return 0.5 * v * (1 + (e - 1) / (e + 1))
    return 0.5 * v * (1 + (1 - 2 / (torch.exp(2 * u) + 1)))  # the solution's form: finite when exp overflows


def activation(v, act, *, erf=False, naive=False):
    if act == "silu":
        return v * torch.exp(v) / (1 + torch.exp(v)) if naive else v / (1 + torch.exp(-v))
    return F.gelu(v) if erf else gelu_tanh(v, naive)


def fused(x, residual, act, *, round_act=False, **mistake):
    """A kernel's out: float32 math rounded once to x's dtype; a classic mistake switched on by name."""
    a = activation(x.float(), act, **mistake)
    if round_act:  # the unfused formula: act(x) stored in x's dtype, then added
        a = a.to(x.dtype).float()
    return (residual.float() + a).to(x.dtype)


def play(*, always_gelu=False, vectors_only=False, **mistake):
    def run(t, p):
        out = fused(t["x"], t["residual"], "gelu" if always_gelu else p["act"], **mistake)
        n = out.numel()
        stop = n - n % VECTOR_WIDTH[out.dtype] if vectors_only else n  # no tail: the last n % VEC never written
        t["out"][:stop].copy_(out[:stop])

    return run


MISTAKES = {  # name: (play, a label fragment of a case it must fail, the verdict there)
    "the exact (erf) GELU": (play(erf=True), "n=1000 act=gelu", "mismatch"),
    "act ignored: always GELU": (play(always_gelu=True), "n=4099 act=silu", "mismatch"),
    "tanh as (e^2u - 1) / (e^2u + 1)": (play(naive=True), "act=gelu (x scale=30.0)", "mismatch"),
    "SiLU as x e^x / (1 + e^x)": (play(naive=True), "act=silu (x scale=30.0)", "mismatch"),
    "act(x) rounded to bfloat16 before the add": (play(round_act=True), "n=100003 act=gelu dtype=bfloat16", "mismatch"),
    "16-byte vectors, no tail": (play(vectors_only=True), "n=100003 act=silu dtype=bfloat16", "partial_write"),
    "16-byte vectors, no tail (shorter than a vector)": (play(vectors_only=True), "n=7 act=silu", "not_written"),
}


# --- the spec, the reference, the README ------------------------------------------------------------


def test_the_spec_names_the_activation_per_case_in_float32_and_bfloat16():
    cuda = SPEC.variants["cuda"]
    assert (cuda.kind, cuda.entry) == ("torch_op", "residual_activation")
    assert [a.name for a in cuda.args] == ["x", "residual", "act"] and cuda.returns_outputs
    cases = SPEC.cases + SPEC.performance.cases
    assert all(c.params.get("act") in ("gelu", "silu") for c in cases)  # the operator's third argument, every case
    assert {(c.params["act"], c.dtype) for c in SPEC.cases} == {
        (a, d) for a in ("gelu", "silu") for d in ("float32", "bfloat16")
    }
    assert any(c.params["n"] % 8 and c.dtype == "bfloat16" and c.params["n"] > 8 for c in cuda_cases(SPEC))


def test_the_reference_takes_act_by_keyword_and_refuses_another():
    x, r = torch.randn(5, dtype=torch.float64), torch.randn(5, dtype=torch.float64)
    assert torch.allclose(REFERENCE(x, r, act="silu"), r + x * torch.sigmoid(x))
    assert torch.allclose(REFERENCE(x, r, act="gelu"), r + gelu_tanh(x))
    with pytest.raises(ValueError, match="gelu"):
        REFERENCE(x, r, act="relu")


def test_the_largest_timed_size_moves_three_streams_of_half_a_gigabyte_or_more():
    largest = SPEC.performance.cases[-1]
    assert largest.dtype == "bfloat16"
    assert exprs.evaluate(SPEC.performance.bytes, {**largest.params, "elem": 2}) >= 256e6
    assert exprs.evaluate(SPEC.performance.bytes, {"n": 10, "elem": 4}) == 3 * 10 * 4


def test_the_readme_states_the_gelu_and_its_ladder_climbs():
    text = (SPEC.folder / "README.md").read_text()
    assert "tanh approximation" in text and "x / (1 + e^−x)" in text
    steps = read_ladder(SPEC, "cuda")
    assert [s.number for s in steps] == [1, 2] and all(s.roofline_pct for s in steps)
    assert steps[0].roofline_pct < steps[1].roofline_pct


# --- the classic mistakes, played on the CPU -----------------------------------------------------------


def test_float32_math_rounded_once_passes_every_case_overflow_included():
    assert set(verdicts(SPEC, play()).values()) == {"ok"}


@pytest.mark.parametrize("name", list(MISTAKES))
def test_each_classic_mistake_fails_on_the_case_built_for_it(name):
    run, fragment, code = MISTAKES[name]
    cases = [c for c in cuda_cases(SPEC) if fragment in c.label()]
    assert cases, f"no case has {fragment!r}"
    assert verdict(SPEC, cases[0], run) == code


def test_rounding_twice_is_harmless_in_float32():
    case = next(c for c in cuda_cases(SPEC) if c.label() == "n=1000003 act=gelu")
    assert verdict(SPEC, case, play(round_act=True)) == "ok"


# --- compiling without a GPU ----------------------------------------------------------------------------


@pytest.mark.nvcc
@pytest.mark.slow
@pytest.mark.solutions
def test_the_stub_the_solution_and_the_ladders_first_kernel_compile_for_sm_90():
    from torch_op_checks import compile_checks

    stub, *results = compile_checks([STUB, SOLUTION, submission(LADDER)])
    assert stub.ok, stub.log  # its kernel template is launched nowhere yet: no kernel in the report
    for result in results:
        assert result.ok, result.log
        assert result.resources and not any(r["spill_stores"] for r in result.resources), result.resources
    kernels = {r["kernel"] for r in results[0].resources}
    assert len(kernels) == 12, kernels  # the solution's: 3 dtypes x 2 activations x 16-byte or scalar


# --- on a GPU -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def built():
    """Every operator the GPU tests load, built side by side first."""
    from torch_op_checks import prebuild

    sources = {"solution": SOLUTION, "stub": STUB, LADDER: submission(LADDER)}
    prebuild(SPEC, list(sources.values()))
    return sources


@pytest.mark.gpu
@pytest.mark.solutions
@pytest.mark.slow  # a sweep (every ladder step timed): gpu and slow, out of the GPU tier
def test_the_ladders_figures_and_the_solution_beats_the_unfused_formula_near_copy_bandwidth(built):
    from torch_op_checks import op_caller, race_at_copy_bandwidth

    case = SPEC.performance.cases[-1]
    n = case.params["n"]
    tensors = {
        "x": torch.randn(n, device="cuda", dtype=torch.bfloat16),
        "residual": torch.randn(n, device="cuda", dtype=torch.bfloat16),
    }
    versions = {
        "1. a thread per element": built["residual_activation_thread_per_element.cu"],
        "2. 16-byte accesses (the solution)": built["solution"],
    }
    callers = {name: op_caller(SPEC, path) for name, path in versions.items()}
    exact = REFERENCE(tensors["x"].double(), tensors["residual"].double(), act="gelu")
    tol = SPEC.tolerance_of(case)
    for name, caller in callers.items():
        assert torch.allclose(caller(tensors, case.params).double(), exact, atol=tol.atol, rtol=tol.rtol), name
    del exact
    contestants = {name: (lambda c=c: c(tensors, case.params)) for name, c in callers.items()}
    contestants["residual + F.gelu(x) (unfused)"] = lambda: REFERENCE(tensors["x"], tensors["residual"], act="gelu")
    rates, copy_gbps = race_at_copy_bandwidth(SPEC, case, contestants, width=40)
    solution = rates["2. 16-byte accesses (the solution)"]
    assert solution >= 0.85 * copy_gbps and solution > rates["residual + F.gelu(x) (unfused)"]


@pytest.mark.gpu
@pytest.mark.solutions
def test_the_solution_passes_its_grade_printing_you_and_torch(built):
    from cuda_checks import figures

    result = grade(resolve(("residual_activation",)), source="solutions", seed=8, record=False)
    print(f"\nresidual_activation solution: {figures(result)}")
    assert result.status == "passed", result.verdict
    last = result.timings[-1]
    assert last.roofline_pct >= 85 and last.learner_rate > last.torch_rate, figures(result)


@pytest.mark.gpu
@pytest.mark.solutions
def test_the_ladders_first_kernel_passes_numerics_and_is_timed(built):
    from torch_op_checks import speed_verdict_of

    result = speed_verdict_of("residual_activation", built["residual_activation_thread_per_element.cu"], seed=8)
    checks = {c.name: c for c in result.checks}
    print(f"\nresidual_activation, a thread per element: {checks['speed'].message}")
    assert checks["numerics"].status == "passed", result.verdict


@pytest.mark.gpu
@pytest.mark.solutions
def test_the_stub_builds_runs_and_writes_nothing(built):
    result = grade(
        resolve(("residual_activation",)), source="stubs", seed=8, record=False, quick=True, sanitize_code=False
    )
    check = next(c for c in result.checks if c.status in ("failed", "error"))
    assert check.name == "numerics" and check.details.get("code") in ("not_written", "mismatch"), result.verdict
