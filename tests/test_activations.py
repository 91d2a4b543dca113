"""activations (100-day plan, day 47; bias + GELU from day 41): four entry points of one Triton file, each a
version of the exercise graded against its own function of reference.py.

What the grader grew for it: a version may name the function of reference.py it is checked and timed
against (`reference = "gelu_tanh"` under [variants.gelu_tanh]), so several entry points of one file are
versions of one folder, picked with --lang.

CPU: that growth (load-time checks, the parent's judge using the version's function in a real grade of
bias_gelu); the solution's other entry points on the cases built against their mistakes, and each classic
mistake (the solution with a line or two changed) failing its case and passing a plain one, judged in this
process under the interpreter (tests/interpreted_kernels.py). GPU (`python -m pytest -m gpu -s
tests/test_activations.py`): each version beside its PyTorch anchor and the copy bandwidth at 8192x8192
float32 and 16384x8192 bfloat16, its grade and the stub failing there. The classic mistakes' full grades (on the
CPU and on a GPU) are the spec's [[mistakes]], graded by tests/test_exercise_mistakes.py."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import ROOT
from interpreted import load_module
from interpreted_kernels import case_named, load_interpreted, verdict

from grader.checks.checking import load_reference
from grader.core.discovery import ResolveError, discover_exercises, resolve
from grader.core.spec import SpecError, load_spec
from grader.run.grade import grade

SPEC = discover_exercises()["activations"]
SOLUTION = ROOT / "solutions" / "activations" / "activations.py"
STUB = SPEC.folder / "activations.py"
VERSIONS = ["gelu_erf", "gelu_tanh", "silu", "bias_gelu"]
PLAIN = "M=37 N=781"
TAIL_HALF = "M=33 N=600 dtype=float16 (x scale=4.0)"
WIDE = "M=64 N=1000 (x scale=30.0)"
LARGE = "M=64 N=1000 (x special=large)"

# name: (version, [(the solution's text, the mistaken text)], the case it fails, its verdict, a case it passes)
MISTAKES = {
    # GPT-2's tanh approximation where the exact GELU is asked: up to 4.7e-4 off
    "tanh_for_erf": (
        "gelu_erf",
        [("    return 0.5 * x * (1.0 + erf(x * SQRT1_2))", "    return gelu_tanh_f32(x)")],
        PLAIN,
        "mismatch",
        None,
    ),
    # erf held in float16, as a kernel computing in half precision does: steps of 2^-11 near -1, and
    # 1 + erf(x / sqrt 2) for x < -2 is smaller than a few of them
    "erf_in_float16": (
        "gelu_erf",
        [("(1.0 + erf(x * SQRT1_2))", "(1.0 + erf(x * SQRT1_2).to(tl.float16))")],
        TAIL_HALF,
        "mismatch",
        None,
    ),
    # sqrt(2 pi) for sqrt(2 / pi)
    "wrong_tanh_constant": (
        "gelu_tanh",
        [("SQRT_2_OVER_PI = tl.constexpr(0.7978845608028654)", "SQRT_2_OVER_PI = tl.constexpr(2.5066282746310002)")],
        PLAIN,
        "mismatch",
        None,
    ),
    # tanh(u) as (e^2u - 1) / (e^2u + 1): inf / inf = NaN once e^2u overflows (x = 3e4 gives u ~ 1e12)
    "tanh_by_exp": (
        "gelu_tanh",
        [
            (
                "    return x / (1.0 + tl.exp(-2.0 * u))  # = 0.5 x (1 + tanh(u))",
                "    e = tl.exp(2.0 * u)\n    return 0.5 * x * (1.0 + (e - 1.0) / (e + 1.0))",
            )
        ],
        LARGE,
        "mismatch",
        PLAIN,
    ),
    # x e^x / (1 + e^x): NaN past x = 88
    "silu_exp_overflow": (
        "silu",
        [("    return x / (1.0 + tl.exp(-x))  #", "    return x * tl.exp(x) / (1.0 + tl.exp(x))  #")],
        WIDE,
        "mismatch",
        PLAIN,
    ),
    # bias[row] for bias[col]: right only where M = N = 1
    "bias_by_row": (
        "bias_gelu",
        [
            (
                "bias = tl.load(bias_ptr + cols, mask=cols < n_cols)",
                "bias = tl.load(bias_ptr + rows, mask=rows < n_rows)",
            ),
            ("v = x + bias[None, :]", "v = x + bias[:, None]"),
        ],
        "M=7 N=1000",
        "mismatch",
        "M=1 N=1",
    ),
    # x + bias rounded to x's dtype before the GELU (the unfused F.gelu(x + bias)): GELU magnifies that
    # rounding ~16x at x = -4, where its value is tiny next to x
    "sum_in_input_dtype": (
        "bias_gelu",
        [("v = x + bias[None, :]", "v = (x + bias[None, :]).to(x_ptr.dtype.element_ty).to(tl.float32)")],
        TAIL_HALF,
        "mismatch",
        PLAIN,
    ),
}


def mistaken(name: str) -> str:
    text = SOLUTION.read_text()
    for old, new in MISTAKES[name][1]:
        assert text.count(old) == 1, f"{name}: {old!r} is not in the solution once: update MISTAKES"
        text = text.replace(old, new)
    return text


@pytest.fixture(scope="module")
def solution():
    return load_interpreted(SOLUTION, "activations_solution")


# --- the grader's growth: a version names its reference -------------------------------------------


def test_each_version_names_its_own_function_of_reference_py():
    assert {v.entry: v.reference for v in SPEC.variants.values()} == {name: name for name in VERSIONS}
    tanh = load_reference(SPEC.folder / "reference.py", "gelu_tanh")
    x = torch.linspace(-4, 4, 9, dtype=torch.float64)
    assert torch.equal(tanh(x, None), F.gelu(x, approximate="tanh"))
    assert discover_exercises()["softmax"].variants["triton"].reference == "reference"  # the default


def write_spec(tmp_path, reference_line: str):
    folder = tmp_path / "ex"
    folder.mkdir(parents=True)
    (folder / "reference.py").write_text("def double(x):\n    return 2 * x\n")
    (folder / "spec.toml").write_text(
        f'id = "ex"\n[variants.double]\nkind = "triton"\nstub = "k.py"\nentry = "double"\n{reference_line}\n'
        'args = ["x", "y"]\n[inputs.x]\nshape = ["n"]\n[outputs.y]\nshape = ["n"]\n[[cases]]\nn = 3\n'
        "[tolerance.float32]\natol = 0\nrtol = 0\n"
    )
    return folder


def test_a_reference_that_reference_py_lacks_is_named_with_the_fix_at_load(tmp_path):
    assert load_spec(write_spec(tmp_path / "a", 'reference = "double"')).variants["double"].reference == "double"
    with pytest.raises(
        SpecError, match=r"variants.double.reference = 'triple' is not a function of .*define `def triple"
    ):
        load_spec(write_spec(tmp_path / "b", 'reference = "triple"'))
    with pytest.raises(SpecError, match="name a function defined in reference.py"):
        load_spec(write_spec(tmp_path / "c", 'reference = "not a name"'))
    with pytest.raises(SpecError, match="has no function 'triple'"):
        load_reference(tmp_path / "a" / "ex" / "reference.py", "triple")


@pytest.mark.slow
@pytest.mark.solutions
def test_a_real_grade_judges_bias_gelu_against_its_own_reference():
    """The parent's judge draws x and bias, calls reference.py's bias_gelu on them and compares: the solution
    passes every CPU case (a judge using another version's function would see the bias missing)."""
    result = grade(resolve(("activations",), lang="bias_gelu"), source="solutions", seed=5, record=False, quick=True)
    assert result.lang == "bias_gelu"
    numerics = next(c for c in result.checks if c.name == "numerics")
    assert numerics.status == "passed", result.verdict
    assert "GPU-only case(s) skipped" in numerics.message


def test_a_bare_grade_or_a_py_file_asks_which_version():
    with pytest.raises(ResolveError, match=r"add --lang bias_gelu\|gelu_erf\|gelu_tanh\|silu"):
        resolve(("activations",))
    with pytest.raises(ResolveError, match=r"has 4 triton versions: add --lang bias_gelu\|gelu_erf\|gelu_tanh\|silu"):
        resolve(("activations",), lang="triton")  # what a --file mine.py asks for


# --- the learner's side: the stub, the solution, the classic mistakes ---------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_the_stub_imports_and_each_entry_says_what_to_write(version):
    stub = load_interpreted(STUB, "activations_stub")
    x = torch.randn(3, 5)
    args = (x, torch.randn(5), torch.empty_like(x)) if version == "bias_gelu" else (x, torch.empty_like(x))
    with pytest.raises(NotImplementedError, match="write .*kernel"):
        getattr(stub, version)(*args)


@pytest.mark.solutions
@pytest.mark.parametrize(
    "version, case",
    [
        ("gelu_erf", TAIL_HALF),
        ("gelu_erf", LARGE),
        ("gelu_tanh", TAIL_HALF),
        ("gelu_tanh", WIDE),
        ("silu", WIDE),
        ("silu", "M=3 N=5"),
        ("bias_gelu", "M=1000 N=7"),
    ],
)
def test_the_solution_passes_the_cases_built_against_the_mistakes(solution, version, case):
    assert verdict(SPEC, SPEC.variants[version], getattr(solution, version), case_named(SPEC, case)) == "ok"


@pytest.mark.solutions
@pytest.mark.parametrize("name", list(MISTAKES))
def test_a_classic_mistake_fails_on_its_case_and_passes_a_plain_one(tmp_path, name):
    version, _, failing, code, passing = MISTAKES[name]
    path = tmp_path / f"activations_{name}.py"
    path.write_text(mistaken(name))
    entry = getattr(load_interpreted(path, f"activations_{name}"), version)
    assert verdict(SPEC, SPEC.variants[version], entry, case_named(SPEC, failing)) == code
    if passing:
        assert verdict(SPEC, SPEC.variants[version], entry, case_named(SPEC, passing)) == "ok"


# --- GPU ------------------------------------------------------------------------------------------

ANCHORS = {  # what PyTorch runs for each version, timed beside it
    "gelu_erf": lambda x, b: F.gelu(x),
    "gelu_tanh": lambda x, b: F.gelu(x, approximate="tanh"),
    "silu": lambda x, b: F.silu(x),
    "bias_gelu": lambda x, b: F.gelu(x + b),
}


@pytest.mark.gpu
@pytest.mark.solutions
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_each_version_runs_near_copy_bandwidth_beside_its_torch_anchor(dtype):
    from grader.child import timing

    solution = load_module(SOLUTION, "activations_solution_gpu")
    M, N = (8192 if dtype == torch.float32 else 16_384), 8192  # the spec's two 537 MB timed sizes
    x, b = torch.randn(M, N, device="cuda", dtype=dtype), torch.randn(N, device="cuda", dtype=dtype)
    out = torch.empty_like(x)
    contestants = {}
    for version in VERSIONS:
        args = (x, b, out) if version == "bias_gelu" else (x, out)
        contestants[version] = lambda f=getattr(solution, version), a=args: f(*a)
        contestants[f"torch {version}"] = lambda f=ANCHORS[version]: f(x, b)
    for version in VERSIONS:
        out.fill_(float("nan"))
        contestants[version]()
        want = ANCHORS[version](x.double(), b.double())
        assert torch.allclose(out.double(), want, atol=1e-5, rtol=1e-2 if dtype == torch.bfloat16 else 1e-5), version
    measured = timing.time_alternating(contestants)
    copy_gbps = timing.measure_copy_bandwidth()
    nbytes = (2 * M * N + N) * x.element_size()
    gbps = {name: nbytes / (m["median_ms"] / 1000) / 1e9 for name, m in measured.items()}
    print(f"\nactivations {M}x{N} {dtype} on {torch.cuda.get_device_name()} (copy {copy_gbps:.0f} GB/s):")
    for version in VERSIONS:
        you, anchor = gbps[version], gbps[f"torch {version}"]
        print(
            f"  {version:10s} you {you:6.0f} GB/s ({100 * you / copy_gbps:3.0f}%), torch {anchor:6.0f} GB/s "
            f"({100 * anchor / copy_gbps:3.0f}%)"
        )
    assert gbps["bias_gelu"] > gbps["torch bias_gelu"]  # unfused: the sum is written and read back
    # the cheaper erf (11 instructions, not libdevice's ~28) keeps 16-bit GELUs memory-bound: bias_gelu bf16
    # reached 3,854 GB/s = 91% of the H200's copy (libdevice's erf: 2,712, 64%)
    below = [v for v in VERSIONS if gbps[v] < 0.85 * copy_gbps]
    assert not below, below


@pytest.mark.gpu
@pytest.mark.solutions
@pytest.mark.parametrize("version", VERSIONS)
def test_each_version_passes_its_grade_on_the_gpu(version):
    from simulated_kernels import figure_line

    result = grade(resolve(("activations",), lang=version), source="solutions", seed=5, record=False)
    assert result.status == "passed", result.verdict
    print("\n" + figure_line(f"activations --lang {version}", result))


@pytest.mark.gpu
@pytest.mark.parametrize("version", VERSIONS)
def test_the_stub_fails_every_version_on_the_gpu(version):
    result = grade(resolve(("activations",), lang=version), source="stubs", seed=5, record=False, quick=True)
    assert any(c.status in ("failed", "error") for c in result.checks), result.verdict
