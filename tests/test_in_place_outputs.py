"""What the grader grew for adamw: tensors an entry point updates in place (an optimizer step's parameters
and moments). An output with the name of an input is that input updated in place: the kernel is handed a
copy that starts as the input's values (not poison), the reference takes the input and returns the updated
value, and the input itself must stay untouched. On a GPU the timed runs step the copy again and again, so
the output checked after timing is one fresh step from the start (worker.time_cases)."""

from __future__ import annotations

import pytest
import torch

from grader.checks.inputs import in_place_names, make_outputs, unwritten, written_outside
from grader.core.discovery import Target
from grader.core.spec import Case, SpecError, load_spec
from grader.run.grade import grade

AXPY_SPEC = """
id = "axpy"
[variants.triton]
stub = "axpy.py"
entry = "axpy"
args = ["a", "x", "y"]
[inputs.x]
shape = ["n"]
[inputs.y]
shape = ["n"]
[outputs.y]
shape = ["n"]
[[cases]]
n = 1
a = 2.5
[[cases]]
n = 1001
a = -0.5
[tolerance.float32]
atol = 1e-6
rtol = 1e-6
[performance]
bytes = "3 * n * elem"
[[performance.cases]]
n = 1_048_576
a = 2.5
"""

AXPY_KERNEL = """
import triton
import triton.language as tl


@triton.jit
def axpy_kernel(x_ptr, y_ptr, a, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, {update}, mask=mask)


def axpy(a, x, y):
    axpy_kernel[(triton.cdiv(x.numel(), 256),)](x, y, a, x.numel(), BLOCK=256)
"""


def _axpy_folder(tmp_path):
    folder = tmp_path / "axpy"
    folder.mkdir()
    (folder / "spec.toml").write_text(AXPY_SPEC)
    (folder / "reference.py").write_text("def reference(x, y, *, a):\n    return y + a * x\n")
    return folder


def test_an_output_named_like_an_input_starts_as_its_values_and_the_others_as_poison(tmp_path):
    spec = load_spec(_axpy_folder(tmp_path))
    assert in_place_names(spec) == ["y"]
    case = Case({"n": 5, "a": 1.0})
    inputs = {"x": torch.arange(5.0), "y": torch.arange(5.0) + 10}
    y = make_outputs(spec, case, "cpu", inputs)["y"]
    assert torch.equal(y, inputs["y"]) and y.data_ptr() != inputs["y"].data_ptr()  # a copy, not the input
    assert not written_outside(y)  # its guard is still poisoned: a store past its end is still seen
    assert bool(unwritten(make_outputs(spec, case, "cpu")["y"]).all())  # without the inputs: poison, as before


def test_an_in_place_output_in_a_row_slice_layout_starts_as_its_input_through_its_strides(tmp_path):
    spec = load_spec(_axpy_folder(tmp_path))
    wide = Case({"n": 4, "a": 1.0}, outputs={"y": {"layout": "row_slice"}})
    inputs = {"x": torch.ones(4), "y": torch.arange(4.0)}
    y = make_outputs(spec, wide, "cpu", inputs)["y"]
    assert torch.equal(y, inputs["y"]) and not written_outside(y)


def test_an_in_place_output_whose_shape_differs_from_its_input_is_rejected(tmp_path):
    folder = _axpy_folder(tmp_path)
    text = (folder / "spec.toml").read_text().replace('[outputs.y]\nshape = ["n"]', '[outputs.y]\nshape = ["n", 2]')
    (folder / "spec.toml").write_text(text)
    with pytest.raises(SpecError, match="updated in place"):
        load_spec(folder)


def _grade(tmp_path, update: str):
    spec = load_spec(_axpy_folder(tmp_path))
    path = tmp_path / "axpy_try.py"
    path.write_text(AXPY_KERNEL.format(update=update))
    return grade(Target(spec, spec.variant("triton")), submission=path, seed=3, record=False)


@pytest.mark.slow
def test_an_in_place_kernel_is_graded_end_to_end(tmp_path):
    # on a GPU also timed: the output checked after the timed runs is one step from the start, not many
    result = _grade(tmp_path, "y + a * x")
    assert not [c for c in result.checks if c.status in ("failed", "error")], result.verdict
    assert next(c for c in result.checks if c.name == "integrity").status == "passed"
