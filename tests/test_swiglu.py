"""swiglu (100-day plan, day 41: fused kernels): out = silu(x) * y in one Triton kernel.

CPU: the solution passes a real grade under the interpreter; each classic mistake (the solution with one
line changed) fails the case built for it and passes a plain case, judged in this process under the
interpreter as a grade judges (tests/interpreted_kernels.py); bfloat16, which the interpreter rounds by
truncation, is played in torch against the spec's bfloat16 cases: one rounding passes, a sigmoid or silu
rounded to bfloat16 first fails. GPU (`python -m pytest -m gpu -s tests/test_swiglu.py`): the solution
beside the eager `F.silu(x) * y` and the copy bandwidth at the two 704 MB sizes, its grade and the stub failing
there. The classic mistakes' full grades (on the CPU and on a GPU) are the spec's [[mistakes]], graded by
tests/test_exercise_mistakes.py."""

from __future__ import annotations

import importlib.util
import sys

import pytest
import torch
import torch.nn.functional as F
from conftest import ROOT
from interpreted_kernels import case_named, load_interpreted, verdict

from grader.core.discovery import discover_exercises, resolve
from grader.run.grade import grade

SPEC = discover_exercises()["swiglu"]
VARIANT = SPEC.variants["triton"]
SOLUTION = ROOT / "solutions" / "swiglu" / "swiglu.py"
STUB = SPEC.folder / "swiglu.py"
PLAIN = "M=37 H=781"
PLAIN_HALF = "M=64 H=1025 dtype=float16"
HALVES = "M=37 H=781 (x layout=row_slice; y layout=row_slice)"
LARGE = "M=64 H=1000 (x scale=30.0)"
LARGE_HALF = "M=64 H=1000 dtype=float16 (x scale=30.0)"

# name: (the solution's line, the mistaken line, the case it fails, its verdict, a case it still passes)
MISTAKES = {
    # every tensor taken as one flat range: right while contiguous, wrong for the halves of gate_up
    "flat_ignores_strides": (
        "    if _rows_are_one_range(x, y, out) and n_rows * n_cols + BLOCK < 2**31:",
        "    if n_rows * n_cols + BLOCK < 2**31:",
        HALVES,
        "mismatch",
        PLAIN,
    ),
    # the store unmasked: the last block writes past the end (into the grader's guard)
    "store_without_mask": (
        "tl.store(out_ptr + row * out_row_stride + cols, (silu * y).to(out_ptr.dtype.element_ty), mask=mask)",
        "tl.store(out_ptr + row * out_row_stride + cols, (silu * y).to(out_ptr.dtype.element_ty))",
        "M=3 H=5",
        "out_of_bounds",
        None,
    ),
    # x e^x / (1 + e^x): inf / inf = NaN once e^x overflows float32 (x > 88)
    "exp_overflow": (
        "silu = x / (1.0 + tl.exp(-x))",
        "silu = x * tl.exp(x) / (1.0 + tl.exp(x))",
        LARGE,
        "mismatch",
        PLAIN,
    ),
    # e^-x kept in the input's dtype: in float16 it overflows below x = -11.1, and silu there is 0, not ~1e-4
    "exp_in_input_dtype": (
        "silu = x / (1.0 + tl.exp(-x))",
        "silu = x / (1.0 + tl.exp(-x).to(x_ptr.dtype.element_ty))",
        LARGE_HALF,
        "mismatch",
        LARGE,
    ),
    # the sigmoid rounded to the input's dtype: a second rounding (2u > 1.5u), and in float16 a subnormal
    # sigmoid for x < -9.7, a few % off
    "sigmoid_in_input_dtype": (
        "silu = x / (1.0 + tl.exp(-x))",
        "silu = x * tl.sigmoid(x).to(x_ptr.dtype.element_ty)",
        LARGE_HALF,
        "mismatch",
        LARGE,
    ),
}


def mistaken(name: str) -> str:
    old, new, *_ = MISTAKES[name]
    text = SOLUTION.read_text()
    assert text.count(old) == 1, f"{name}: {old!r} is not in the solution once: update MISTAKES"
    return text.replace(old, new)


def interpreted(name: str, text: str, tmp_path):
    path = tmp_path / f"swiglu_{name}.py"
    path.write_text(text)
    return load_interpreted(path, f"swiglu_{name}")


# --- CPU ------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.solutions
def test_the_solution_passes_a_real_grade_on_the_cpu():
    result = grade(resolve(("swiglu",)), source="solutions", seed=5, record=False, quick=True)
    numerics = next(c for c in result.checks if c.name == "numerics")
    assert numerics.status == "passed", result.verdict
    assert "GPU-only case(s) skipped" in numerics.message  # the bfloat16 cases and the large ones


def test_the_stub_imports_and_says_what_to_write(tmp_path):
    stub = load_interpreted(STUB, "swiglu_stub")
    x = torch.randn(3, 5)
    with pytest.raises(NotImplementedError, match="swiglu_kernel"):
        stub.swiglu(x, x, torch.empty_like(x))


@pytest.mark.solutions
@pytest.mark.parametrize("name", list(MISTAKES))
def test_a_classic_mistake_fails_on_its_case_and_passes_a_plain_one(tmp_path, name):
    *_, failing, code, passing = MISTAKES[name]
    module = interpreted(name, mistaken(name), tmp_path)
    assert verdict(SPEC, VARIANT, module.swiglu, case_named(SPEC, failing)) == code
    if passing:
        assert verdict(SPEC, VARIANT, module.swiglu, case_named(SPEC, passing)) == "ok"


# bfloat16 under the interpreter is truncated, so the roundings are played in torch: (x, y, out) -> None
BF16_KERNELS = {
    "one rounding (the solution)": lambda x, y, out: out.copy_(F.silu(x.float()) * y.float()),
    "sigmoid rounded to bfloat16": lambda x, y, out: out.copy_(
        x.float() * torch.sigmoid(x.float()).to(x.dtype).float() * y.float()
    ),
    "silu rounded to bfloat16 (eager F.silu(x) * y)": lambda x, y, out: out.copy_(F.silu(x) * y),
    "everything in bfloat16": lambda x, y, out: out.copy_(x * torch.sigmoid(x.float()).to(x.dtype) * y),
}


@pytest.mark.parametrize("name", list(BF16_KERNELS))
def test_bfloat16_asks_for_one_rounding(name):
    case = case_named(SPEC, "M=128 H=2000 dtype=bfloat16")
    want = "ok" if name.startswith("one rounding") else "mismatch"
    assert verdict(SPEC, VARIANT, BF16_KERNELS[name], case) == want


# --- GPU ------------------------------------------------------------------------------------------


def load_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # Triton's JIT reads the kernels' source through the module
    spec.loader.exec_module(module)
    return module


@pytest.mark.gpu
@pytest.mark.solutions
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_solution_beats_eager_near_copy_bandwidth(dtype):
    from grader.child import timing

    solution = load_module(SOLUTION, "swiglu_solution")
    M, H = (4096 if dtype == torch.float32 else 8192), 14_336  # the spec's two 704 MB timed sizes
    x, y = torch.randn(M, H, device="cuda", dtype=dtype), torch.randn(M, H, device="cuda", dtype=dtype)
    out = torch.empty_like(x)
    want = (F.silu(x.float()) * y.float()).to(dtype)
    bpr = -(-H // 1024)  # blocks per row

    def rows_of_1024():  # ladder step 1: one program per (row, 1024 columns), 4 warps, through the row strides
        solution.swiglu_kernel[(M * bpr,)](x, y, out, H, H, H, H, bpr, BLOCK=1024, num_warps=4)

    contestants = {
        "1. a program per row block (1024, 4 warps)": rows_of_1024,
        "2. solution (flat, 4096, 8 warps)": lambda: solution.swiglu(x, y, out),
        "torch F.silu(x) * y": lambda: F.silu(x) * y,
    }
    for name, run in contestants.items():
        if not name.startswith("torch"):
            out.fill_(float("nan"))
            run()
            assert torch.equal(out, want) or torch.allclose(out.float(), want.float(), atol=1e-6, rtol=1e-2), name
    measured = timing.time_alternating(contestants)
    copy_gbps = timing.measure_copy_bandwidth()
    gbps = {name: 3 * M * H * x.element_size() / (m["median_ms"] / 1000) / 1e9 for name, m in measured.items()}
    print(f"\nswiglu {M}x{H} {dtype} on {torch.cuda.get_device_name()} (copy {copy_gbps:.0f} GB/s):")
    for name, rate in gbps.items():
        print(
            f"  {name:45s} {measured[name]['median_ms'] * 1000:8.1f} us  {rate:6.0f} GB/s  "
            f"{100 * rate / copy_gbps:4.0f}% of roofline"
        )
    you, torch_rate = gbps["2. solution (flat, 4096, 8 warps)"], gbps["torch F.silu(x) * y"]
    print(f"  you {you:.0f} GB/s, torch {torch_rate:.0f} GB/s")
    assert you >= 0.85 * copy_gbps
    assert you > torch_rate


@pytest.mark.gpu
@pytest.mark.solutions
def test_the_solution_passes_its_grade_on_the_gpu():
    from simulated_kernels import figure_line

    result = grade(resolve(("swiglu",)), source="solutions", seed=5, record=False)
    assert result.status == "passed", result.verdict
    print("\n" + figure_line("swiglu solution", result))


@pytest.mark.gpu
def test_the_stub_fails_on_the_gpu():
    result = grade(resolve(("swiglu",)), source="stubs", seed=5, record=False, quick=True)
    assert any(c.status in ("failed", "error") for c in result.checks), result.verdict
