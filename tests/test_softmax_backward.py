"""softmax_backward: y is a real softmax output (the spec's `transform`), the classic mistakes each fail
on the case built for them (CPU, Triton interpreter), and on a GPU the ladder's figures at 4096x4096
float32 (`python -m pytest -m gpu -s tests/test_softmax_backward.py`).

The mistakes are one fused kernel (tests/fixtures/submissions/softmax_backward_fused.py, the whole row
in registers) with one line changed, written to a file and graded like a learner's submission. The
kernels are fixtures because they pass the exercise: a learner's kit ships none, and there those tests skip."""

from __future__ import annotations

import importlib.util
import sys

import pytest
import torch
from conftest import ROOT, submission

from grader.checks.inputs import generate, transform_function
from grader.core.discovery import discover_exercises, resolve
from grader.core.spec import Case, SpecError, load_spec
from grader.run.grade import grade

MISTAKES = {
    # loads left in float16: the sum and dy - dot in float16 lose the answer when dy is near 60
    "float16_arithmetic": ("other=0.0).to(tl.float32)", "other=0.0)"),
    # the row length as y's row stride: right for contiguous y only
    "n_as_row_stride": ("y_ptr + row * y_row_stride + cols", "y_ptr + row * n_cols + cols"),
    # one stride for both inputs: right while y and dy are laid out alike
    "y_stride_for_dy": ("dy_ptr + row * dy_row_stride + cols", "dy_ptr + row * y_row_stride + cols"),
    # the input's stride for the output: right while dx is laid out like dy
    "dy_stride_for_dx": ("dx_ptr + row * dx_row_stride + cols", "dx_ptr + row * dy_row_stride + cols"),
    # masked columns loaded as 1: they add BLOCK - N to the sum
    "masked_columns_count": ("mask=mask, other=0.0)", "mask=mask, other=1.0)"),
}


def grade_source(tmp_path, text):
    path = tmp_path / "softmax_backward.py"
    path.write_text(text)
    return grade(resolve(("softmax_backward",)), submission=path, seed=5)


def failing(result):
    return next(c for c in result.checks if c.status in ("failed", "error"))


def fused() -> str:
    return submission("softmax_backward_fused.py").read_text()


def mistake(name):
    old, new = MISTAKES[name]
    assert old in fused(), f"{name}: the line to change is not in the fused kernel"
    return fused().replace(old, new)


# --- inputs: y is what a forward pass saved --------------------------------------------------------


def test_y_is_a_softmax_output_and_a_case_scale_peaks_its_rows():
    spec = discover_exercises()["softmax_backward"]
    y = generate(spec, Case({"M": 6, "N": 300}), 3)["y"].double()
    assert (y > 0).all() and torch.allclose(y.sum(-1), torch.ones(6, dtype=torch.float64))
    peaked = generate(spec, Case({"M": 6, "N": 300}, inputs={"y": {"scale": 10.0}}), 3)["y"]
    assert peaked.max(-1).values.min() > 5 * y.max(-1).values.max()  # one entry dominates each row


def test_masked_logits_give_exact_zeros_in_y_and_float16_rows_still_sum_to_one():
    spec = discover_exercises()["softmax_backward"]
    y = generate(spec, Case({"M": 8, "N": 333}, inputs={"y": {"special": "neg_inf_entries"}}), 4)["y"]
    assert (y == 0).any() and (y[:, 0] > 0).all()
    half = generate(spec, Case({"M": 8, "N": 1025, "dtype": "float16"}), 4)["y"]
    assert half.dtype == torch.float16 and torch.allclose(
        half.double().sum(-1), torch.ones(8, dtype=torch.float64), atol=1e-2
    )


def test_every_transform_a_spec_names_is_a_function_of_its_reference():
    for spec in discover_exercises().values():
        for tensor in spec.inputs:
            if tensor.transform:
                assert callable(transform_function(spec, tensor.transform)), f"{spec.id}: {tensor.name}"


def test_a_transform_that_reference_py_lacks_is_named_with_the_fix(tmp_path):
    folder = tmp_path / "ex"
    folder.mkdir()
    (folder / "reference.py").write_text("def reference(x):\n    return x\n")
    (folder / "spec.toml").write_text(
        'id = "ex"\n[variants.triton]\nstub = "b.py"\nentry = "f"\nargs = ["x", "y"]\n'
        '[inputs.x]\nshape = ["n"]\ntransform = "normalise"\n[outputs.y]\nshape = ["n"]\n[[cases]]\nn = 3\n'
        "[tolerance.float32]\natol = 0\nrtol = 0\n"
    )
    spec = load_spec(folder)
    with pytest.raises(SpecError, match=r"transform 'normalise' is not a function of .*define `def normalise\(x\)`"):
        generate(spec, spec.cases[0], 1)
    (folder / "spec.toml").write_text((folder / "spec.toml").read_text().replace('"normalise"', '"not a name"'))
    with pytest.raises(SpecError, match="name a function defined in reference.py"):
        load_spec(folder)


# --- the learner's side: a correct kernel passes, each classic mistake fails on its case ------------


@pytest.mark.slow
def test_one_block_per_row_passes_for_every_width_including_9001(tmp_path):
    """The README says a whole row in registers (BLOCK = next power of 2, no loop) is a correct design."""
    checks = {c.name: c for c in grade_source(tmp_path, fused()).checks}
    assert checks["numerics"].status == "passed", checks["numerics"].message


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, case, code",
    [
        ("float16_arithmetic", "offset=60.0", "mismatch"),
        ("n_as_row_stride", "y layout=row_slice", "mismatch"),
        ("y_stride_for_dy", "dy layout=row_slice", "mismatch"),
        ("dy_stride_for_dx", "dy layout=row_slice", "out_of_bounds"),  # dy's wider stride walks dx past its end
        ("masked_columns_count", "M=3 N=5", "mismatch"),
    ],
)
def test_a_classic_mistake_fails_on_its_case(tmp_path, name, case, code):
    check = failing(grade_source(tmp_path, mistake(name)))
    assert check.name == "numerics" and check.details["code"] == code, check.message
    assert case in check.message, check.message


# --- GPU: the ladder's figures ------------------------------------------------------------------


def load_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # Triton's JIT reads the kernels' source through the module
    spec.loader.exec_module(module)
    return module


@pytest.mark.gpu
@pytest.mark.solutions
@pytest.mark.parametrize("N", [781, 2000, 4096])
@pytest.mark.slow  # a sweep (every ladder step timed): gpu and slow, out of the GPU tier
def test_ladder_figures_and_the_solution_beats_torch_near_copy_bandwidth(N):
    from grader.child import timing

    two_pass = load_module(submission("softmax_backward_two_pass.py"), "sb_two_pass")
    one_read = load_module(submission("softmax_backward_fused.py"), "sb_fused")
    solution = load_module(ROOT / "solutions" / "softmax_backward" / "softmax_backward.py", "sb_solution")
    M = 4096
    y = torch.softmax(torch.randn(M, N, device="cuda"), dim=-1)
    dy = torch.randn(M, N, device="cuda")
    dx = torch.empty_like(y)
    want = torch._softmax_backward_data(dy, y, -1, y.dtype)
    contestants = {
        "1. two passes (loop, BLOCK 1024, 4 warps)": lambda: two_pass.softmax_backward(y, dy, dx),
        "2. fused (4 warps)": lambda: one_read.softmax_backward(y, dy, dx),
        "2. fused (8 warps)": lambda: one_read.softmax_backward(y, dy, dx, num_warps=8),
        "3. solution": lambda: solution.softmax_backward(y, dy, dx),
        "torch._softmax_backward_data": lambda: torch._softmax_backward_data(dy, y, -1, y.dtype),
    }
    for name, run in contestants.items():
        dx.zero_()
        run()
        if not name.startswith("torch"):
            assert torch.allclose(dx, want, atol=1e-6, rtol=1e-4), name
    measured = timing.time_alternating(contestants)
    copy_gbps = timing.measure_copy_bandwidth()
    gbps = {name: 3 * M * N * 4 / (m["median_ms"] / 1000) / 1e9 for name, m in measured.items()}
    print(f"\nsoftmax_backward {M}x{N} float32 on {torch.cuda.get_device_name()} (copy {copy_gbps:.0f} GB/s):")
    for name, rate in gbps.items():
        print(
            f"  {name:45s} {measured[name]['median_ms'] * 1000:7.1f} us  {rate:6.0f} GB/s  {100 * rate / copy_gbps:4.0f}% of roofline"
        )
    if N == 4096:  # the size the speed verdict is taken at (the spec's last timed size)
        assert gbps["3. solution"] >= 0.85 * copy_gbps
        assert gbps["3. solution"] > gbps["torch._softmax_backward_data"]
