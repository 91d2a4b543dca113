"""broadcast_ops (Triton, 100-day days 31 and 34): out = where(x > threshold, x * scale[col] + bias[row], leaky * x).

On the CPU: the spec's inputs (values exactly at the threshold, infinities, M != N), the solution graded
under the interpreter (passes) and the stub (fails), and a correct kernel passing the cases the classic mistakes
fail on, run in this process under the interpreter (tests/interpreted.py). The mistakes themselves (the spec's
[[mistakes]], each a fixture) are graded on the CPU and on a GPU by tests/test_exercise_mistakes.py. On a GPU
(`python -m pytest -m gpu -s tests/test_broadcast_ops.py`): the solution graded, its GB/s at 8192x8192 float32
and bfloat16 beside eager PyTorch's five kernels and the ladder's steps, and bf16_arithmetic without FP fusion."""

from __future__ import annotations

import pytest
import torch
from conftest import ROOT, submission
from interpreted import as_model, load_interpreted
from simulated_kernels import first_failure, trial_verdict

from grader.checks.inputs import generate
from grader.core.discovery import discover_exercises, resolve
from grader.core.spec import case_word
from grader.run.grade import grade

SPEC = discover_exercises()["broadcast_ops"]
SOLUTION = ROOT / "solutions" / "broadcast_ops" / "broadcast_ops.py"
SEED = 7


def case_with(fragment: str):
    found = [c for c in SPEC.cases if fragment in c.label() and not c.gpu_only]
    assert found, f"no CPU case has {fragment!r}: update the test to the spec"
    return found[0]


# --- the spec: shapes, thresholds, the inputs that break the mistakes ----------------------------------


def test_every_case_names_its_scalars_and_thresholds_are_exact_in_bfloat16():
    for case in SPEC.cases + SPEC.performance.cases:
        threshold = case.params["threshold"]
        assert isinstance(threshold, float) and isinstance(case.params["leaky"], float), case.label()
        assert torch.tensor(threshold, dtype=torch.bfloat16).item() == threshold, case.label()


def test_row_and_column_vectors_have_the_lengths_that_catch_a_swap():
    shapes = {(c.params["M"], c.params["N"]) for c in SPEC.cases if not c.gpu_only}
    assert {(3, 5), (5, 3), (1, 3001), (3001, 1)} <= shapes
    assert [t.shape for t in SPEC.inputs] == [["M", "N"], ["N"], ["M"]]  # x, scale (per column), bias (per row)


@pytest.mark.parametrize("fragment", ["N=100 threshold=0.0", "dtype=bfloat16 threshold=0.75"])
def test_every_third_value_sits_exactly_on_the_threshold_in_both_trials(fragment):
    case = case_with(fragment)
    for trial in range(2):
        x = generate(SPEC, case, SEED, trial)["x"].flatten()
        assert (x[::3] == case.params["threshold"]).all() and (x != case.params["threshold"]).sum() > x.numel() // 2


def test_the_infinities_case_has_both_signs_and_the_reference_keeps_them_finite_elsewhere():
    from grader.checks.checking import load_reference, reference_outputs

    case = case_with("with_infinities")
    made = generate(SPEC, case, SEED)
    assert torch.isposinf(made["x"]).any() and torch.isneginf(made["x"]).any()
    (want,) = reference_outputs(load_reference(SPEC.folder / "reference.py"), SPEC, made, case.params)
    assert not want.isnan().any() and torch.isinf(want).sum() == torch.isinf(made["x"]).sum()


def test_the_readme_ladder_places_a_learner_at_each_step():
    from grader.checks import hints

    steps = hints.read_ladder(SPEC, "triton")
    assert [s.number for s in steps] == [1, 2, 3] and all(s.roofline_pct for s in steps)


# --- the solution and the stub, graded as a learner's file is -------------------------------------------


# --- the cases the classic mistakes fail on (interpreted in this process) ---------------------------------


def test_a_correct_kernel_passes_the_cases_the_mistakes_fail_on():
    """The cases catch the mistakes, not the harness: the same tiles without a mistake pass the case each
    mistake's grade fails first (its first_case in the spec's [[mistakes]]: tests/test_exercise_mistakes.py)."""
    model = as_model(SPEC, load_interpreted(submission("broadcast_ops_square_tiles.py"), "broadcast_ops_square_tiles"))
    for text in sorted({text for mistake in SPEC.mistakes for text in mistake.first_case}):
        case = next(c for c in SPEC.cases if not c.gpu_only and case_word(text).search(c.label()))
        index = SPEC.cases.index(case)
        assert trial_verdict(SPEC, case, model, SEED + 1000 * index, 0) == "ok", case.label()


# --- on a GPU: the real kernels --------------------------------------------------------------------------------


def load_compiled(path, name):
    """A Triton file compiled for the GPU (not interpreted), loaded under its own module name."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.gpu
@pytest.mark.solutions
def test_the_solution_passes_and_prints_its_figures_beside_eager_pytorch():
    from cuda_checks import figures

    result = grade(resolve(("broadcast_ops",)), source="solutions", seed=SEED, record=False)
    assert result.status == "passed", result.verdict
    print(f"\nbroadcast_ops solution: {figures(result)}")


@pytest.mark.gpu
@pytest.mark.solutions
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.slow  # a sweep (every ladder step timed): gpu and slow, out of the GPU tier
def test_ladder_figures_at_8192_square_and_the_solution_beats_eager_near_copy_bandwidth(dtype):
    from grader.child import timing

    M = N = 8192
    x = torch.randn(M, N, device="cuda", dtype=dtype)
    scale, bias = torch.randn(N, device="cuda", dtype=dtype), torch.randn(M, device="cuda", dtype=dtype)
    out = torch.empty_like(x)
    want = torch.where(x > 0.0, x.float() * scale.float() + bias.float()[:, None], 0.01 * x.float())
    kernels = {
        "1. one program per row": load_compiled(submission("broadcast_ops_row_per_program.py"), "bo_rows"),
        "2. 32x32 tiles": load_compiled(submission("broadcast_ops_square_tiles.py"), "bo_square"),
        "3. solution": load_compiled(SOLUTION, "bo_solution"),
    }
    contestants = {name: (lambda k=k: k.broadcast_ops(x, scale, bias, out, 0.0, 0.01)) for name, k in kernels.items()}
    contestants["eager torch.where (5 kernels)"] = lambda: torch.where(x > 0.0, x * scale + bias[:, None], 0.01 * x)
    for name, run in kernels.items():
        out.fill_(float("nan"))
        run.broadcast_ops(x, scale, bias, out, 0.0, 0.01)
        assert torch.allclose(out.float(), want, atol=1e-5, rtol=8e-3 if dtype == torch.bfloat16 else 1e-6), name
    measured = timing.time_alternating(contestants)
    copy_gbps = timing.measure_copy_bandwidth()
    nbytes = (2 * M * N + M + N) * x.element_size()
    rates = {name: nbytes / (m["median_ms"] / 1000) / 1e9 for name, m in measured.items()}
    print(f"\nbroadcast_ops {M}x{N} {dtype} on {torch.cuda.get_device_name()} (copy {copy_gbps:.0f} GB/s):")
    for name, rate in rates.items():
        print(
            f"  {name:32s} {measured[name]['median_ms'] * 1000:8.1f} us  {rate:6.0f} GB/s  "
            f"{100 * rate / copy_gbps:4.0f}% of roofline"
        )
    assert rates["3. solution"] >= 0.85 * copy_gbps
    assert rates["3. solution"] > rates["eager torch.where (5 kernels)"]


@pytest.mark.gpu
def test_the_stub_fails_on_the_gpu():
    result = grade(resolve(("broadcast_ops",)), source="stubs", seed=SEED, record=False)
    assert first_failure(result).details.get("code") == "not_implemented", result.verdict


def bfloat16_ptx_ops(fp_fusion: str, monkeypatch) -> set[str]:
    """The floating-point instructions Triton emits for the bf16_arithmetic fixture on an sm_90 (compiled here,
    no GPU needed), with TRITON_DEFAULT_FP_FUSION set to `fp_fusion`."""
    import re

    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", fp_fusion)
    module = load_compiled(submission("broadcast_ops_bf16_arithmetic.py"), "bo_bf16_ptx")
    pointers = {f"{name}_ptr": "*bf16" for name in ("x", "scale", "bias", "out")}
    signature = {
        **pointers,
        **dict.fromkeys(("M", "N", "x_row_stride", "out_row_stride"), "i32"),
        "threshold": "fp32",
        "leaky": "fp32",
        "BLOCK_M": "constexpr",
        "BLOCK_N": "constexpr",
    }
    source = ASTSource(fn=module.broadcast_ops_kernel, signature=signature, constexprs={"BLOCK_M": 32, "BLOCK_N": 32})
    try:
        ptx = triton.compile(source, target=GPUTarget("cuda", 90, 32)).asm["ptx"]
    except Exception as error:  # a Triton without its NVIDIA backend's compiler here
        pytest.skip(f"Triton cannot compile for sm_90 on this machine: {error}")
    return set(re.findall(r"^\s*((?:fma|mul|add)\.rn\.bf16)", ptx, re.M))


def test_bfloat16_arithmetic_is_one_rounding_where_triton_fuses_and_two_where_it_does_not(monkeypatch):
    """Why bf16_arithmetic is no mistake on a GPU while Triton fuses floating-point operations (its default up to
    3.9; 3.10 turns it off): x * scale + bias becomes one bfloat16 FMA, rounded once, exactly the float32
    answer rounded to bfloat16, and the grade rightly passes it (it did, on an H200). Without fusion x * scale is
    rounded on its own, and the grade fails it (the GPU test below). The README says so."""
    assert bfloat16_ptx_ops("1", monkeypatch) == {"fma.rn.bf16"}
    assert bfloat16_ptx_ops("0", monkeypatch) == {"mul.rn.bf16", "add.rn.bf16"}


@pytest.mark.gpu
def test_bfloat16_arithmetic_fails_on_the_gpu_where_each_operation_is_rounded(monkeypatch):
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "0")  # the grading child inherits it
    result = grade(
        resolve(("broadcast_ops",)), submission=submission("broadcast_ops_bf16_arithmetic.py"), seed=SEED, record=False
    )
    check = first_failure(result)
    assert check.name == "numerics" and check.details.get("code") == "mismatch", result.verdict


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["square_tiles", "row_per_program"])
def test_the_ladder_steps_pass_numerics_on_the_gpu(name):
    result = grade(
        resolve(("broadcast_ops",)),
        submission=submission(f"broadcast_ops_{name}.py"),
        seed=SEED,
        record=False,
        quick=True,  # numerics and integrity only: what this test reads
    )
    assert next(c for c in result.checks if c.name == "numerics").status == "passed", result.verdict
