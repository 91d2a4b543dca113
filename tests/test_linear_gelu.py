"""linear_gelu (Triton, 100-day challenge day 51): out = gelu(x @ w + b) in one kernel, the bias and the GELU
applied to the float32 tile in the matmul's epilogue. Two versions of one file: gelu_erf (the default) and
gelu_tanh, each graded against its own function of reference.py.

CPU: the numerics in torch on every case small enough, bfloat16 included (torch rounds float32 -> bfloat16 to
nearest, as the GPU does; the interpreter truncates, which is why those cases are GPU-only): float32 sums
rounded once pass, a 16-bit accumulator and a 16-bit pre-activation (eager PyTorch's) fail. The solution
graded for real under the interpreter (both of its kernels run: TMA on the aligned cases, pointers on the
rest), the stub failing, the unfused two-kernel fixture passing the numerics, and each classic mistake (the
solution with a line or two changed) failing the case built for it with the message a learner reads.
GPU (`python -m pytest -m gpu -s tests/test_linear_gelu.py`): the solution, its pointer kernel alone, the
unfused fixture, eager PyTorch and cuBLAS's bare GEMM timed side by side (the README ladder's figures), and
full grades of the solution, the fixture and the stub. The classic mistakes' full grades (on the CPU and on a GPU)
are the spec's [[mistakes]], graded by tests/test_exercise_mistakes.py."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import ROOT
from interpreted import load_interpreted, load_module
from interpreted_kernels import case_named as cases_named
from triton_judging import judge

from grader.checks.checking import Comparison, compare, load_reference, reference_outputs
from grader.checks.inputs import generate
from grader.core.discovery import discover_exercises, resolve
from grader.core.spec import Case
from grader.run.grade import grade

SPEC = discover_exercises()["linear_gelu"]
SOLUTION = ROOT / "solutions" / "linear_gelu" / "linear_gelu.py"
UNFUSED = ROOT / "tests" / "fixtures" / "submissions" / "linear_gelu_unfused.py"
VERSIONS = ["gelu_erf", "gelu_tanh"]
ONE = "M=1 N=1 K=1 dtype=float16"
SMALL = "M=3 N=5 K=7 dtype=float16"
PLAIN = "M=37 N=781 K=129 dtype=float16"
LONG = "M=33 N=100 K=4104 dtype=float16"
W_T = "M=37 N=781 K=129 dtype=float16 (w layout=transposed)"
OUT_SLICE = "M=29 N=600 K=77 dtype=float16 (out layout=row_slice)"
WIDE = "M=33 N=600 K=64 dtype=float16 (x scale=4.0)"
# numpy's warnings from interpreted kernels: e^-2u = inf is the tanh GELU's right answer (t / inf = -0) far
# left; inf / inf is the tanh_by_exp mistake, which the tests assert as NaN in the verdict
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp", "ignore:invalid value encountered")
PLAYED = 2 * 10**8  # cases up to this M N K are played in torch: all but the three large GPU-only ones

# name: (version, [(the solution's text, the mistaken text)], the case it fails, its verdict, a case it passes)
MISTAKES = {
    # b[row] broadcast across the columns: right only where M = N = 1
    "bias_by_row": (
        "gelu_erf",
        [
            ("(acc, b_ptr, cols, N, TANH)", "(acc, b_ptr, rows, N, TANH)"),  # pointer kernel
            ("off_n + tl.arange(0, BLOCK_N), N, TANH)", "off_m + tl.arange(0, BLOCK_M), N, TANH)"),
            ("t = acc + bias[None, :]", "t = acc + bias[:, None]"),
        ],
        SMALL,
        "mismatch",
        ONE,
    ),
    # GPT-2's approximation where the exact GELU is asked: up to 4.7e-4 off at t = -2.7
    "tanh_for_erf": (
        "gelu_erf",
        [("    return 0.5 * t * (1.0 + tl.math.erf(t * SQRT1_2))", "    return gelu_tanh_f32(t)")],
        PLAIN,
        "mismatch",
        None,
    ),
    # the K tail loaded unmasked: with w stored N x K the loads run on into the next row's values, and w's last row
    # past the tensor's end into whatever the interpreter's heap holds there: its column comes out wrong, or as the
    # output's poison (never written), as the heap lies that run
    "no_k_mask": (
        "gelu_erf",
        [('"EVEN_K": lambda args: args["K"] % args["BLOCK_K"] == 0', '"EVEN_K": lambda args: True')],
        W_T,
        ("mismatch", "partial_write"),
        None,
    ),
    # the running sum rounded to the inputs' 16 bits after every BLOCK_K step (what a 16-bit accumulator does)
    "16_bit_accumulator": (
        "gelu_erf",
        [("acc = tl.dot(a, b, acc)", "acc = tl.dot(a, b, acc).to(a.dtype).to(tl.float32)")],
        LONG,
        "mismatch",
        None,
    ),
    # tanh(u) as (e^2u - 1) / (e^2u + 1): inf / inf = NaN once t passes ~10
    "tanh_by_exp": (
        "gelu_tanh",
        [
            (
                "    return t / (1.0 + tl.exp(-2.0 * u))",
                "    e = tl.exp(2.0 * u)\n    return 0.5 * t * (1.0 + (e - 1.0) / (e + 1.0))",
            )
        ],
        WIDE,
        "mismatch",
        SMALL,
    ),
    # out's rows stepped by N, not by its row stride: stores land in the row slice's padding
    "out_rows_at_stride_n": (
        "gelu_erf",
        [("rows[:, None] * stride_om", "rows[:, None] * N")],
        OUT_SLICE,
        "out_of_bounds",
        PLAIN,
    ),
}


def mistaken(name: str) -> str:
    """The solution with mistake `name` written in (every occurrence: both kernels share the epilogue's lines)."""
    text = SOLUTION.read_text()
    for old, new in MISTAKES[name][1]:
        assert old in text, f"{name}: {old!r} is not in the solution: update MISTAKES"
        text = text.replace(old, new)
    return text


def case_named(label: str) -> Case:
    return cases_named(SPEC, label)


def judged(version: str, entry, case: Case, seed: int = 7) -> Comparison:
    """The grader's comparison for `entry` (called as the grader calls it) over every trial of `case`."""
    return judge(SPEC, entry, case, seed, version=version)


# --- the numerics, played in torch (bfloat16 included) ------------------------------------------------


def gelu(t, version):
    return F.gelu(t, approximate="tanh" if version == "gelu_tanh" else "none")


def played(version, *, accumulate_in=None, round_t=False):
    """What a kernel writes: float32 sums (or sums kept in `accumulate_in`, 16 at a time), + b, the GELU in
    float32 (or of t rounded to the dtype first, as eager PyTorch's two kernels do), rounded once."""

    def run(x, w, b, out):
        if accumulate_in is None:
            t = x.float() @ w.float()
        else:
            t = torch.zeros(out.shape, dtype=accumulate_in)
            for k in range(0, x.shape[1], 16):
                t = (t.float() + x[:, k : k + 16].float() @ w[k : k + 16].float()).to(accumulate_in)
            t = t.float()
        t = t + b.float()
        if round_t:
            t = t.to(out.dtype).float()
        out.copy_(gelu(t, version))

    return run


def played_cases():
    return [c for c in SPEC.cases if c.params["M"] * c.params["N"] * c.params["K"] <= PLAYED]


@pytest.mark.parametrize("version", VERSIONS)
def test_float32_sums_rounded_once_pass_every_case_bfloat16_included(version):
    cases = played_cases()
    assert {"float16", "bfloat16"} <= {c.dtype for c in cases} and any(c.params["K"] > 4096 for c in cases)
    got = {c.label(): judged(version, played(version), c).code or "ok" for c in cases}
    assert got == {c.label(): "ok" for c in cases}


def worst_over_tolerance(case: Case, run) -> float:
    """max |got - want| / (atol + rtol |want|) over the case's first trial."""
    values = generate(SPEC, case, 7, 0)
    out = torch.empty(case.params["M"], case.params["N"], dtype=values["x"].dtype)
    run(values["x"], values["w"], values["b"], out)
    (want,) = reference_outputs(load_reference(SPEC.folder / "reference.py", "linear_gelu"), SPEC, values, case.params)
    tol = SPEC.tolerance_of(case)
    return float(((out.double() - want).abs() / (tol.atol + tol.rtol * want.abs())).max())


@pytest.mark.parametrize("label", [LONG, "M=130 N=200 K=1000 dtype=bfloat16"])
def test_a_16_bit_accumulator_fails_the_long_sums_by_a_wide_margin(label):
    case = case_named(label)
    assert worst_over_tolerance(case, played("gelu_erf")) < 1
    assert worst_over_tolerance(case, played("gelu_erf", accumulate_in=getattr(torch, case.dtype))) > 10


def test_a_16_bit_pre_activation_fails_as_eager_pytorch_does():
    """t rounded to the dtype before the GELU (eager's F.linear then F.gelu, or a 16-bit temporary between two
    kernels): the left tail magnifies that rounding past the tolerance in every bfloat16 case."""
    for case in [c for c in played_cases() if c.dtype == "bfloat16"]:
        result = judged("gelu_erf", played("gelu_erf", round_t=True), case)
        assert result.code == "mismatch" and "elements of out wrong" in result.message, case.label()


# --- the real kernels under the Triton interpreter ----------------------------------------------------


def test_two_versions_of_one_file_and_erf_is_the_default():
    assert {v.lang: (v.entry, v.reference) for v in SPEC.variants.values()} == {
        "gelu_erf": ("linear_gelu", "linear_gelu"),
        "gelu_tanh": ("linear_gelu_tanh", "linear_gelu_tanh"),
    }
    assert resolve(("linear_gelu",)).variant.lang == "gelu_erf"
    assert all(c.gpu_only for c in SPEC.cases if c.dtype == "bfloat16")  # the interpreter truncates bfloat16
    verdict_size = SPEC.performance.cases[-1]
    assert verdict_size.params == {"M": 8192, "N": 14_336, "K": 4096, "dtype": "bfloat16"}
    assert SPEC.performance.is_compute_bound


def test_the_ladder_has_four_steps_with_estimated_figures():
    from grader.checks import hints

    steps = hints.read_ladder(SPEC, "triton")
    assert len(steps) == 4 and all(s.roofline_pct for s in steps)


@pytest.fixture(scope="module")
def solution():
    return load_interpreted(SOLUTION, "linear_gelu_solution")


@pytest.mark.slow
@pytest.mark.solutions
@pytest.mark.parametrize("label", [WIDE, W_T, LONG])
def test_the_tanh_version_passes_the_cases_built_against_its_mistakes(solution, label):
    """WIDE: t to about 30 (the tanh form's inf / inf), through the TMA kernel; W_T and LONG: the pointer kernel."""
    result = judged("gelu_tanh", solution.linear_gelu_tanh, case_named(label))
    assert result.ok, result.message


@pytest.mark.slow
@pytest.mark.solutions  # the instructor's files: absent from a learner's kit
@pytest.mark.parametrize("label", [SMALL, WIDE])
def test_the_unfused_two_kernel_fixture_passes_the_numerics(label):
    """It keeps t in float32: only the speed bar (GPU) can tell it from a fused kernel."""
    unfused = load_interpreted(UNFUSED, "linear_gelu_unfused")
    for version in VERSIONS:
        result = judged(version, getattr(unfused, SPEC.variants[version].entry), case_named(label))
        assert result.ok, result.message


@pytest.mark.slow
@pytest.mark.solutions
@pytest.mark.parametrize("name", list(MISTAKES))
def test_a_classic_mistake_fails_on_its_case_and_passes_a_plain_one(tmp_path, name):
    version, _, failing, code, passing = MISTAKES[name]
    path = tmp_path / f"linear_gelu_{name}.py"
    path.write_text(mistaken(name))
    entry = getattr(load_interpreted(path, f"linear_gelu_{name}"), SPEC.variants[version].entry)
    result = judged(version, entry, case_named(failing))
    assert result.code in ((code,) if isinstance(code, str) else code) and failing in result.message, result.message
    if name == "tanh_by_exp":
        assert " NaN (first at index " in result.message, result.message  # "128 NaN": computed, not left unwritten
    if passing:
        assert judged(version, entry, case_named(passing)).ok


@pytest.mark.slow
@pytest.mark.solutions
def test_a_misplaced_bias_fails_a_real_grade_with_the_case_and_the_first_wrong_element(tmp_path):
    path = tmp_path / "linear_gelu.py"
    path.write_text(mistaken("bias_by_row"))
    result = grade(resolve(("linear_gelu",)), submission=path, seed=5, record=False, quick=True)
    check = next(c for c in result.checks if c.name == "numerics")
    assert check.status == "failed" and check.details["code"] == "mismatch", check.message
    assert check.message.startswith(SMALL) and "elements of out wrong" in check.message
    assert "first at index" in check.message


def test_day51_of_the_100_day_plan_grades_both_versions():
    from grader.core.plans import load_plans

    day = load_plans()["challenge-100-day"].unit("day51")
    assert [(e.id, e.lang) for e in day.exercises] == [("linear_gelu", "gelu_erf"), ("linear_gelu", "gelu_tanh")]
    assert not day.planned and "The kit checks" in day.deliverable


# --- GPU: the fused solution beside two kernels and cuBLAS; full grades -----------------------------------


@pytest.mark.gpu
@pytest.mark.solutions
@pytest.mark.slow  # a frontier benchmark at full size, the GPU held alone for tens of seconds: the whole GPU suite
@pytest.mark.parametrize("dtype, M, N, K", [(torch.bfloat16, 8192, 14_336, 4096), (torch.float16, 4096, 4096, 4096)])
def test_the_fused_solution_beside_two_kernels_eager_pytorch_and_cublas(dtype, M, N, K):
    from grader.child import timing

    solution = load_module(SOLUTION, "linear_gelu_solution_gpu")
    unfused = load_module(UNFUSED, "linear_gelu_unfused_gpu")
    x = torch.randn(M, K, device="cuda", dtype=dtype)
    w = (torch.randn(K, N, device="cuda") / K**0.5).to(dtype)
    b = torch.randn(N, device="cuda", dtype=dtype)
    out = torch.empty(M, N, device="cuda", dtype=dtype)
    want = F.gelu(x.double() @ w.double() + b.double())
    contestants = {
        "solution (fused; TMA or pointers, the faster)": lambda: solution.linear_gelu(x, w, b, out),
        "steps 3-4: the fused pointer kernel alone": lambda: solution.with_pointers(x, w, b, out, False),
        "step 1: GEMM, then bias + GELU (fixture)": lambda: unfused.linear_gelu(x, w, b, out),
        "eager PyTorch: F.gelu(F.linear(x, w.T, b))": lambda: F.gelu(F.linear(x, w.T, b)),
        "cuBLAS GEMM alone (x @ w)": lambda: x @ w,
    }
    tol = SPEC.tolerance_of(Case(params={"M": M, "N": N, "K": K, "dtype": str(dtype).removeprefix("torch.")}))
    for name in list(contestants)[:3]:
        out.fill_(float("nan"))
        contestants[name]()
        assert compare("out", out, want, tol, name).ok, compare("out", out, want, tol, name).message
    eager = compare("out", F.gelu(F.linear(x, w.T, b)), want, tol, "eager")
    measured = timing.time_alternating(contestants)
    rates = {name: 2 * M * N * K / (m["median_ms"] / 1000) / 1e12 for name, m in measured.items()}
    cublas = rates["cuBLAS GEMM alone (x @ w)"]
    print(
        f"\nlinear_gelu {M}x{N}x{K} {str(dtype)[6:]} on {torch.cuda.get_device_name()} (TFLOP/s of 2MNK; "
        f"% of cuBLAS's bare GEMM; eager PyTorch's numerics: {'pass' if eager.ok else 'FAIL: ' + eager.message}):"
    )
    for name, rate in rates.items():
        print(f"  {name:48s} {measured[name]['median_ms']:8.3f} ms  {rate:6.0f} TFLOP/s  {100 * rate / cublas:4.0f}%")
    best = rates["solution (fused; TMA or pointers, the faster)"]
    assert best >= 0.7 * cublas
    # the same grade of GEMM, fused or followed by a second kernel: the pre-activation's round trip costs
    assert rates["steps 3-4: the fused pointer kernel alone"] > rates["step 1: GEMM, then bias + GELU (fixture)"]


@pytest.mark.gpu
@pytest.mark.solutions
@pytest.mark.parametrize("version", VERSIONS)
def test_each_version_of_the_solution_passes_its_grade_on_the_gpu(version):
    from simulated_kernels import figure_line

    result = grade(resolve(("linear_gelu",), lang=version), source="solutions", seed=5, record=False)
    print("\n" + figure_line(f"linear_gelu --lang {version}", result))
    assert result.status == "passed", result.verdict


@pytest.mark.gpu
def test_the_unfused_fixture_passes_the_numerics_and_is_slower_than_the_solution_on_the_gpu():
    from grader.reports.console import format_timing

    result = grade(resolve(("linear_gelu",)), submission=UNFUSED, seed=5, record=False)
    speed = next(c for c in result.checks if c.name == "speed")
    print(f"\nlinear_gelu unfused (two Triton kernels): {speed.message}")
    for t in result.timings:  # "torch" is eager PyTorch: cuBLAS's GEMM with the bias, then F.gelu
        print(f"  {format_timing(t)}")
    assert next(c for c in result.checks if c.name == "numerics").status == "passed", result.verdict
    assert speed.details["ratio"] < 1, speed.message


@pytest.mark.gpu
@pytest.mark.parametrize("version", VERSIONS)
def test_the_stub_fails_every_version_on_the_gpu(version):
    result = grade(resolve(("linear_gelu",), lang=version), source="stubs", seed=5, record=False, quick=True)
    numerics = next(c for c in result.checks if c.name == "numerics")
    assert numerics.details.get("code") == "not_implemented", result.verdict
