"""rope (100-day challenge day 20: a RoPE kernel bound as a PyTorch operator, benchmarked against the
PyTorch formula). CPU: the spec's cases against the classic mistakes of a RoPE kernel, played in torch and
judged as the grader judges (tests/cuda_rows.py): the interleaved convention, rows found as if x were
contiguous, 16-byte loads that do not check alignment, the formula in bfloat16; the stub, the solution and
the ladder's first kernel compile for sm_90 where torch's CUDA headers are installed. GPU (`python -m pytest
-m gpu -s tests/test_rope.py`): the ladder's figures at 4x8192x32x128 bfloat16 beside the PyTorch formula and
the copy bandwidth, the solution's grade, the stub failing. The mistakes edited into the solution are graded
by tests/test_exercise_mistakes.py (the spec's [[mistakes]])."""

from __future__ import annotations

import pytest
import torch
from conftest import ROOT, submission
from cuda_rows import cuda_cases, verdict, verdicts

from grader.checks.checking import load_reference
from grader.checks.hints import read_ladder
from grader.checks.inputs import generate, transform_function
from grader.core import exprs
from grader.core.discovery import discover_exercises, resolve
from grader.run.grade import grade

SPEC = discover_exercises()["rope"]
REFERENCE = load_reference(SPEC.folder / "reference.py")
STUB = SPEC.folder / "rope.cu"
SOLUTION = ROOT / "solutions" / "rope" / "rope.cu"
LADDER = "rope_thread_per_pair.cu"  # the ladder's first kernel, a fixture
VECTOR_WIDTH = {torch.float32: 4, torch.float16: 8, torch.bfloat16: 8}  # elements in 16 bytes


def rotated(x, cos, sin, *, interleaved=False, backwards=False):
    """A kernel's out: float32 math on the float32 tables, rounded once to x's dtype; a classic mistake
    switched on by name."""
    xf, half = x.float(), x.shape[-1] // 2
    x1, x2 = (xf[..., 0::2], xf[..., 1::2]) if interleaved else (xf[..., :half], xf[..., half:])
    c, s = cos[:, None, :], sin[:, None, :]  # (N, 1, d/2): broadcast over B and H
    if backwards:
        s = -s
    lo, hi = x1 * c - x2 * s, x2 * c + x1 * s
    out = torch.stack((lo, hi), dim=-1).flatten(-2) if interleaved else torch.cat((lo, hi), dim=-1)
    return out.to(x.dtype)


def play(**mistake):
    def run(t, p):
        t["out"].copy_(rotated(t["x"], t["cos"], t["sin"], **mistake))

    return run


def rows_as_if_contiguous(t, p):
    """x's rows found at ((b N + n) H + h) d: on a strided view, other rows and the NaN padding."""
    x = t["x"]
    t["out"].copy_(
        rotated(x.as_strided(x.shape, torch.empty(x.shape).stride(), x.storage_offset()), t["cos"], t["sin"])
    )


def misaligned(x: torch.Tensor, offset: int) -> bool:
    """Whether some head row of x, `offset` elements in, starts off a 16-byte boundary."""
    b, n, h = (torch.arange(size) for size in x.shape[:3])
    starts = b[:, None, None] * x.stride(0) + n[None, :, None] * x.stride(1) + h[None, None, :] * x.stride(2)
    return bool(((x.data_ptr() + (starts + offset) * x.element_size()) % 16 != 0).any())


def vector_loads(*, check_half: bool, check_rows: bool):
    """16-byte loads of both halves of each row; a load off a 16-byte boundary is a CUDA error
    (misaligned address). A correct kernel checks both d/2 and the rows before taking that path."""

    def run(t, p):
        x, half = t["x"], t["x"].shape[-1] // 2
        vec = VECTOR_WIDTH[x.dtype]
        takes_path = (half % vec == 0 or not check_half) and (not check_rows or not misaligned(x, 0))
        if takes_path and (misaligned(x, 0) or misaligned(x, half)):
            return "cuda_error"
        return play()(t, p)

    return run


def formula_in_dtype(t, p):
    """The PyTorch formula in x's dtype (tables rounded to it, each product rounded), as the anchor runs."""
    t["out"].copy_(REFERENCE(t["x"], t["cos"], t["sin"]))


MISTAKES = {  # name: (play, a label fragment of a case it must fail, the verdict there)
    "interleaved pairs (2i, 2i + 1)": (play(interleaved=True), "B=2 N=37 H=3 d=64", "mismatch"),
    "rotated backwards (the sign of sin)": (play(backwards=True), "B=2 N=37 H=3 d=64", "mismatch"),
    "rows found as if x were contiguous": (rows_as_if_contiguous, "layout=row_slice", "mismatch"),
    "16-byte loads whenever d/2 allows": (
        vector_loads(check_half=True, check_rows=False),
        "bfloat16 (x layout=row_slice)",
        "cuda_error",
    ),
    "16-byte loads whenever the rows are aligned": (
        vector_loads(check_half=False, check_rows=True),
        "d=72",
        "cuda_error",
    ),
    "the formula in bfloat16": (formula_in_dtype, "B=3 N=100 H=7 d=128 dtype=bfloat16", "mismatch"),
}


# --- the spec, the reference, the README ------------------------------------------------------------


def test_the_spec_takes_q_by_its_strides_with_float32_tables_in_three_dtypes():
    cuda = SPEC.variants["cuda"]
    assert (cuda.kind, cuda.entry, [a.name for a in cuda.args]) == ("torch_op", "rope", ["x", "cos", "sin"])
    assert cuda.returns_outputs and cuda.timeout_s >= 600  # the first build compiles torch's headers
    tables = {t.name: t for t in SPEC.inputs if t.name in ("cos", "sin")}
    assert all(t.dtype == "float32" and t.transform == "rope_tables" for t in tables.values())
    assert {c.dtype for c in SPEC.cases} == {"float32", "float16", "bfloat16"}
    assert {64, 128} <= {c.params["d"] for c in SPEC.cases}
    assert any(c.params["N"] % 2 and c.params["H"] % 2 and c.params["B"] > 1 for c in cuda_cases(SPEC))
    assert {c.dtype for c in cuda_cases(SPEC) if c.inputs.get("x", {}).get("layout") == "row_slice"} == {
        "float32",
        "bfloat16",
    }


def test_the_tables_are_the_rope_angles_of_each_position():
    case = next(c for c in SPEC.cases if c.label() == "B=1 N=129 H=5 d=128")
    tables = generate(SPEC, case, seed=1)
    assert tables["cos"].shape == tables["sin"].shape == (129, 64) and tables["cos"].dtype == torch.float32
    cos, sin = tables["cos"].double(), tables["sin"].double()
    assert torch.allclose(cos * cos + sin * sin, torch.ones_like(cos), atol=1e-6)
    assert torch.equal(tables["cos"][0], torch.ones(64)) and torch.equal(tables["sin"][0], torch.zeros(64))
    assert torch.allclose(sin[5, 1], torch.tensor(5 * 10000 ** (-2 / 128), dtype=torch.float64).sin(), atol=1e-7)
    assert torch.equal(generate(SPEC, case, seed=2, trial=1)["cos"], tables["cos"])  # fixed by N and d


def test_the_reference_is_rotate_half_and_keeps_each_pairs_length():
    drawn = torch.Generator().manual_seed(7)
    x = torch.randn(2, 5, 3, 8, dtype=torch.float64, generator=drawn)
    angles = torch.rand(5, 4, dtype=torch.float64, generator=drawn) * 6
    out = REFERENCE(x, angles.cos(), angles.sin())
    # rotated() computes in float32, as a kernel does: an output near 0 (x1 cos ≈ x2 sin) is off by ~1e-7 absolute
    # (unseeded, the default atol of 1e-8 failed that way in 29 of 400 draws)
    assert torch.allclose(out, rotated(x, angles.cos(), angles.sin()), rtol=1e-5, atol=1e-6)
    pair_norms = lambda t: t[..., :4] ** 2 + t[..., 4:] ** 2  # noqa: E731
    assert torch.allclose(pair_norms(out), pair_norms(x))


def test_the_largest_timed_size_moves_half_a_gigabyte_and_bytes_count_x_out_and_the_tables():
    largest = SPEC.performance.cases[-1]
    names = {**largest.params, "elem": 2}
    assert largest.dtype == "bfloat16" and exprs.evaluate(SPEC.performance.bytes, names) >= 256e6
    params = {"B": 2, "N": 3, "H": 5, "d": 8, "elem": 4}
    assert exprs.evaluate(SPEC.performance.bytes, params) == 2 * 2 * 3 * 5 * 8 * 4 + 2 * 3 * 4 * 4


def test_the_readme_states_layout_and_convention_and_its_ladder_climbs():
    text = (SPEC.folder / "README.md").read_text()
    assert "(B, N, H, d)" in text and "rotate_half" in text and "interleaved" in text
    steps = read_ladder(SPEC, "cuda")
    assert [s.number for s in steps] == [1, 2, 3] and all(s.roofline_pct for s in steps)
    assert [s.roofline_pct for s in steps] == sorted(s.roofline_pct for s in steps)


# --- the classic mistakes, played on the CPU -----------------------------------------------------------


def test_a_float32_kernel_rounding_once_passes_every_case():
    assert set(verdicts(SPEC, play()).values()) == {"ok"}


def test_the_pytorch_formula_passes_in_float32():
    float32 = [c for c in cuda_cases(SPEC) if c.dtype == "float32"]
    assert {verdict(SPEC, c, formula_in_dtype) for c in float32} == {"ok"}


@pytest.mark.parametrize("name", list(MISTAKES))
def test_each_classic_mistake_fails_on_the_case_built_for_it(name):
    run, fragment, code = MISTAKES[name]
    cases = [c for c in cuda_cases(SPEC) if fragment in c.label()]
    assert cases, f"no case has {fragment!r}"
    assert verdict(SPEC, cases[0], run) == code


# --- compiling without a GPU ----------------------------------------------------------------------------

LADDER_EDITS = {  # the ladder's step 2, the solution edited: name: (its text, the replacement, no verdict)
    "no 16-byte accesses (the ladder's step 2)": ("if (vector_path_ok(x, cos, sin, s, VEC))", "if (false)", None),
}


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
    kernels = {r["kernel"] for r in results[0].resources}  # the solution's: 3 dtypes x 16-byte or scalar
    assert len(kernels) == 6, kernels


@pytest.mark.solutions
def test_the_ladders_edits_apply_to_the_solution():
    from cuda_checks import solution_edits_apply

    solution_edits_apply(SOLUTION, LADDER_EDITS)


# --- on a GPU -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Every operator the GPU tests load, built side by side first; the ladder's edits as files of their own."""
    from torch_op_checks import prebuild_with_edits

    folder = tmp_path_factory.mktemp("rope_edits")
    sources = {"solution": SOLUTION, "stub": STUB, LADDER: submission(LADDER)}
    return prebuild_with_edits(SPEC, sources, SOLUTION, LADDER_EDITS, folder)


def largest_inputs():
    case = SPEC.performance.cases[-1]
    B, N, H, d = (case.params[k] for k in ("B", "N", "H", "d"))
    tables = transform_function(SPEC, "rope_tables")(None, N=N, d=d)
    cos, sin = (tables[k].to("cuda", torch.float32) for k in ("cos", "sin"))
    x = torch.randn(B, N, H, d, device="cuda", dtype=torch.bfloat16)
    return case, {"x": x, "cos": cos, "sin": sin}


@pytest.mark.gpu
@pytest.mark.solutions
@pytest.mark.slow  # a sweep (every ladder step timed): gpu and slow, out of the GPU tier
def test_the_ladders_figures_and_the_solution_beats_the_formula_near_copy_bandwidth(built):
    from torch_op_checks import op_caller, race_at_copy_bandwidth

    case, tensors = largest_inputs()
    versions = {
        "1. a thread per pair (64-bit index math)": built["rope_thread_per_pair.cu"],
        "2. rows, scalar accesses": built["no 16-byte accesses (the ladder's step 2)"],
        "3. 16-byte accesses (the solution)": built["solution"],
    }
    callers = {name: op_caller(SPEC, path) for name, path in versions.items()}
    exact = REFERENCE(*(t.double() for t in tensors.values()))
    tol = SPEC.tolerance_of(case)
    for name, caller in callers.items():
        got = caller(tensors, case.params)
        assert torch.allclose(got.double(), exact, atol=tol.atol, rtol=tol.rtol), name
    del exact
    contestants = {name: (lambda c=c: c(tensors, case.params)) for name, c in callers.items()}
    contestants["the PyTorch formula (reference.py, bfloat16)"] = lambda: REFERENCE(**tensors)
    rates, copy_gbps = race_at_copy_bandwidth(SPEC, case, contestants, width=48)
    solution = rates["3. 16-byte accesses (the solution)"]
    assert solution >= 0.85 * copy_gbps and solution > rates["the PyTorch formula (reference.py, bfloat16)"]


@pytest.mark.gpu
@pytest.mark.solutions
def test_the_solution_passes_its_grade_printing_you_and_torch(built):
    from cuda_checks import figures

    result = grade(resolve(("rope",)), source="solutions", seed=20, record=False)
    print(f"\nrope solution: {figures(result)}")
    assert result.status == "passed", result.verdict
    last = result.timings[-1]
    assert last.roofline_pct >= 85 and last.learner_rate > last.torch_rate, figures(result)


@pytest.mark.gpu
@pytest.mark.solutions
def test_the_ladders_first_kernel_passes_numerics_and_is_timed(built):
    from torch_op_checks import speed_verdict_of

    result = speed_verdict_of("rope", built["rope_thread_per_pair.cu"], seed=20)
    checks = {c.name: c for c in result.checks}
    print(f"\nrope, a thread per pair: {checks['speed'].message}")
    assert checks["numerics"].status == "passed", result.verdict


@pytest.mark.gpu
@pytest.mark.solutions
def test_the_stub_builds_runs_and_writes_nothing(built):
    result = grade(resolve(("rope",)), source="stubs", seed=20, record=False, quick=True, sanitize_code=False)
    check = next(c for c in result.checks if c.status in ("failed", "error"))
    assert check.name == "numerics" and check.details.get("code") in ("not_written", "mismatch"), result.verdict
