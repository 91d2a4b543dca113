"""matmul_triton: its tolerances catch low-precision accumulation, and half-precision compute-bound
work is measured against cuBLAS in its own dtype (the ceilings the worker measures once per GPU)."""

import json

import pytest
import torch

from grader.checks.checking import compare, load_reference, reference_outputs
from grader.checks.inputs import generate
from grader.checks.speed import work_and_ceiling
from grader.child import timing, worker
from grader.core.discovery import discover_exercises


@pytest.fixture(scope="module")
def spec():
    return discover_exercises()["matmul_triton"]


def _case(spec, M, N, K, dtype):
    return next(
        c for c in spec.cases if c.params == {"M": M, "N": N, "K": K, "dtype": dtype} and not c.inputs and not c.outputs
    )


def _blocked(A, B, dtype, step=16):
    """A @ B with the running sum kept in `dtype` (what out_dtype=tl.float16 or a 16-bit accumulator does)."""
    acc = torch.zeros(A.shape[0], B.shape[1], dtype=dtype)
    for k in range(0, A.shape[1], step):
        acc = (acc.float() + A[:, k : k + step].float() @ B[k : k + step].float()).to(dtype)
    return acc


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_float32_accumulation_passes_and_16_bit_accumulation_fails(spec, dtype):
    case = _case(spec, 130, 200, 1000, dtype)
    reference = load_reference(spec.folder / "reference.py")
    tol = spec.tolerance_of(case)
    for trial in range(2):  # trial 2's inputs are scaled by 1.5: outputs 2.25 times larger
        inputs = generate(spec, case, seed=3 + trial, trial=trial)
        (want,) = reference_outputs(reference, spec, inputs)
        A, B = inputs["A"], inputs["B"]
        right = (A.float() @ B.float()).to(A.dtype)  # float32 sums, one rounding at the end
        assert compare("C", right, want, tol, case.label()).ok
        wrong = compare("C", _blocked(A, B, A.dtype), want, tol, case.label())
        assert not wrong.ok and wrong.code == "mismatch"


def test_bfloat16_cases_run_on_the_gpu_only(spec):
    # the Triton interpreter multiplies bfloat16 bit patterns in tl.dot: a correct kernel would fail there
    assert all(c.gpu_only for c in spec.cases if c.dtype == "bfloat16")
    assert any(not c.gpu_only for c in spec.cases if c.dtype == "float16")
    assert spec.performance.cases[-1].params == {"M": 8192, "N": 8192, "K": 8192, "dtype": "bfloat16"}


def test_half_precision_is_measured_against_cublas_in_its_dtype(spec):
    variant = spec.variants["triton"]
    device = {"matmul_tflops": 50.0, "matmul_tflops_bfloat16": 700.0, "matmul_tflops_float16": 690.0}
    bf16, fp16 = spec.performance.cases[-1], spec.performance.cases[0]
    assert work_and_ceiling(spec, variant, bf16, device) == (2 * 8192**3 / 1e12, 700.0, "TFLOP/s")
    assert work_and_ceiling(spec, variant, fp16, device)[1] == 690.0
    fp32 = discover_exercises()["matmul"]
    assert work_and_ceiling(fp32, fp32.variants["cuda"], fp32.performance.cases[-1], device)[1] == 50.0
    # a device record from before half-precision ceilings were measured: no percentage rather than a wrong one
    assert work_and_ceiling(spec, variant, bf16, {"matmul_tflops": 50.0})[1] is None


def test_device_ceilings_measure_only_what_the_saved_entry_lacks(tmp_path, monkeypatch):
    monkeypatch.setenv("KCOURSE_HOME", str(tmp_path))
    (tmp_path / "device_ceilings.json").write_text(json.dumps({"GPU A": {"copy_gbps": 3000.0, "matmul_tflops": 51.0}}))
    asked = []
    monkeypatch.setattr(timing, "measure_ceilings", lambda names: asked.append(list(names)) or {n: 1.0 for n in names})
    got = worker.device_ceilings("GPU A")
    assert asked == [["matmul_tflops_float16", "matmul_tflops_bfloat16"]]
    assert got == {
        "copy_gbps": 3000.0,
        "matmul_tflops": 51.0,
        "matmul_tflops_float16": 1.0,
        "matmul_tflops_bfloat16": 1.0,
    }
    assert worker.device_ceilings("GPU A") == got and len(asked) == 1  # kept: measured once per GPU model
    worker.device_ceilings("GPU B")
    assert asked[-1] == list(timing.CEILINGS)


def test_ceilings_measured_while_other_processes_hold_the_gpu_are_used_but_not_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("KCOURSE_HOME", str(tmp_path))
    monkeypatch.setattr(timing, "measure_ceilings", lambda names: {n: 7.0 for n in names})
    monkeypatch.setattr(timing, "memory_held_by_others", lambda: 20 << 30)  # another grade on the GPU
    assert worker.device_ceilings("GPU A")["matmul_tflops"] == 7.0
    assert not (tmp_path / "device_ceilings.json").exists()
    monkeypatch.setattr(timing, "memory_held_by_others", lambda: 0)
    worker.device_ceilings("GPU A")
    assert json.loads((tmp_path / "device_ceilings.json").read_text())["GPU A"]["copy_gbps"] == 7.0


@pytest.mark.solutions  # the instructor's files: absent from a learner's kit
def test_split_k_takes_few_tiles_over_a_long_k_and_sums_the_slices_right(spec):
    from conftest import ROOT
    from interpreted import interpreter_on, load_interpreted

    module = load_interpreted(ROOT / "solutions" / "matmul_triton" / "matmul_triton.py", "matmul_triton_split_k")
    assert module.splits_for(768, 256, 131072, 132) == 11  # the capstone's weight gradient: 12 tiles -> 132 programs
    assert module.splits_for(131072, 768, 256, 132) == 1  # its forward: 2,048 tiles already fill the GPU
    assert module.splits_for(8192, 8192, 8192, 132) == 1
    assert module.splits_for(64, 64, 512, 132) == 1  # too short a K to cut
    assert any(c.params["K"] == 2500 and c.params["M"] * c.params["N"] <= 128 * 128 for c in spec.cases)

    def no(*args):
        raise AssertionError("a one-tile, long-K product took the unsplit kernel")

    module.with_pointers = module.with_tma = no
    torch.manual_seed(0)
    grad, x = torch.randn(4500, 100, dtype=torch.float16), torch.randn(4500, 33, dtype=torch.float16)
    wide = torch.full((100, 40), float("nan"), dtype=torch.float16)
    C = wide[:, :33]  # a row slice: C's row stride is not N
    with interpreter_on():
        module.matmul(grad.t(), x, C)  # A = grad^T, a transposed view, as autograd hands it over
    want = grad.t().double() @ x.double()
    assert module.splits_for(100, 33, 4500, 4) == 4  # the interpreter's 4 "SMs": four slices of 1,152
    assert ((C.double() - want).abs() <= 1e-2 + 1e-3 * want.abs()).all()
    assert wide[:, 33:].isnan().all()  # nothing written past N
