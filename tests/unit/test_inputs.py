"""Input drawing and layouts (grader/checks/inputs.py): seeded, reproducible draws, the case's value options, the
layouts a kernel must handle, poisoned outputs with their guard, and the raw files between the processes."""

from __future__ import annotations

import pytest
import torch

from grader.checks import inputs
from grader.checks.inputs import (
    GUARD,
    INPUT_TAIL,
    ROW_SLICE_PAD,
    empty_laid_out,
    generate,
    in_place_names,
    load_tensor,
    make_outputs,
    place,
    poison,
    save_tensor,
    stand_ins,
    unwritten,
    with_nan_tail,
    written_outside,
)
from grader.core.spec import Case, SpecError, load_spec

from .conftest import toy_spec, toy_with

MATRIX_SPEC = """\
id = "mat"
[variants.triton]
kind = "triton"
stub = "mat.py"
entry = "mat"
args = ["x", "out"]
[inputs.x]
shape = ["M", "N"]
[outputs.out]
shape = ["M", "N"]
[[cases]]
M = 3
N = 4
[tolerance.float32]
atol = 1e-6
rtol = 1e-6
"""


@pytest.fixture
def matrix(exercise_dir):
    return load_spec(exercise_dir(MATRIX_SPEC, "def reference(x):\n    return x\n", name="mat"))


# --- drawing -------------------------------------------------------------------------------------


def test_the_same_seed_draws_the_same_inputs_and_another_seed_others(toy):
    case = toy.cases[1]
    first, again, other = generate(toy, case, 7), generate(toy, case, 7), generate(toy, case, 8)
    assert all(torch.equal(first[n], again[n]) for n in first)
    assert not torch.equal(first["a"], other["a"])
    assert not torch.equal(first["a"], first["b"])  # each tensor has its own stream


def test_inputs_come_contiguous_in_the_case_dtype_with_the_spec_shape(toy):
    drawn = generate(toy, toy.cases[1], 1)
    assert {n: (tuple(t.shape), t.dtype, t.is_contiguous()) for n, t in drawn.items()} == {
        "a": ((37,), torch.float32, True),
        "b": ((37,), torch.float32, True),
    }
    assert bool((drawn["a"] != 0).all())  # zeros would hide unwritten outputs


def test_a_later_trial_scales_the_same_draw_so_answers_differ(toy):
    """Trial t multiplies the draw by 1 + 0.5 t: a cached previous answer is far from this one."""
    case = toy.cases[1]
    assert torch.equal(generate(toy, case, 3, trial=1)["a"], generate(toy, case, 3, trial=0)["a"] * 1.5)


def test_a_draw_does_not_depend_on_how_many_threads_drew_its_chunks(monkeypatch):
    monkeypatch.setattr(inputs, "CHUNK", 1000)
    monkeypatch.setattr(inputs.hostload, "cpu_share", lambda: 1)
    alone = inputs._draw(4500, 5, "normal")
    monkeypatch.setattr(inputs.hostload, "cpu_share", lambda: 3)
    assert torch.equal(alone, inputs._draw(4500, 5, "normal"))


@pytest.mark.parametrize("init, low, high", [("uniform", 0.0, 1.0), ("positive", 0.5, 1.5)])
def test_bounded_inits_stay_in_their_range(init, low, high):
    x = inputs._draw(10_000, 1, init)
    assert low <= float(x.min()) and float(x.max()) < high


def test_integer_inputs_are_small_and_never_zero_and_bytes_cover_all_values(exercise_dir):
    spec = load_spec(
        exercise_dir(
            toy_spec(
                replace={
                    '[inputs.a]\nshape = ["n"]': '[inputs.a]\nshape = ["n"]\ndtype = "int32"',
                    '[inputs.b]\nshape = ["n"]': '[inputs.b]\nshape = ["n"]\ndtype = "uint8"',
                }
            )
        )
    )
    drawn = generate(spec, Case({"n": 4000}), 2)
    assert drawn["a"].dtype == torch.int32 and 1 <= int(drawn["a"].min()) and int(drawn["a"].max()) < 100
    assert drawn["b"].dtype == torch.uint8 and int(drawn["b"].min()) == 0 and int(drawn["b"].max()) == 255


def test_scale_and_offset_move_the_draw(toy):
    plain = generate(toy, Case({"n": 37}), 4)["a"]
    moved = generate(toy, Case({"n": 37}, inputs={"a": {"scale": 2.0, "offset": 100}}), 4)["a"]
    assert torch.allclose(moved, plain * 2 + 100)


def test_neg_inf_entries_leave_each_row_a_finite_first_entry(matrix):
    x = generate(matrix, Case({"M": 64, "N": 16}, inputs={"x": {"special": "neg_inf_entries"}}), 1)["x"]
    assert bool(torch.isneginf(x).any()) and bool(torch.isfinite(x[:, 0]).all())


def test_neg_inf_rows_mask_whole_rows(matrix):
    x = generate(matrix, Case({"M": 9, "N": 4}, inputs={"x": {"special": "neg_inf_rows"}}), 1)["x"]
    masked = torch.isneginf(x).all(dim=1)
    assert masked.tolist() == [True, False, False, True, False, False, True, False, False]


def test_large_special_puts_the_top_of_the_range_in_a_few_places(matrix):
    x = generate(matrix, Case({"M": 16, "N": 64}, inputs={"x": {"special": "large"}}), 1)["x"]
    assert 0 < int((x == 3e4).sum()) <= 16


def test_an_unknown_special_is_refused():
    with pytest.raises(ValueError, match="unknown special inputs 'nan'"):
        inputs._apply_special(torch.ones(2, 2), "nan", 0)


TRANSFORMS = """\
import torch

def reference(a, b):
    return a + b

def softmax(x):
    return torch.softmax(x, dim=-1)

def plus_n(x, *, n, a):
    return x * 0 + n + a

def pair(x):
    return {"a": x, "b": -x}

def lonely(x):
    return {"a": x}

not_a_function = 3
"""


def transformed_toy(exercise_dir, a: str, b: str | None = None):
    lines = {'[inputs.a]\nshape = ["n"]': f'[inputs.a]\nshape = ["n"]\ntransform = "{a}"'}
    if b:
        lines['[inputs.b]\nshape = ["n"]'] = f'[inputs.b]\nshape = ["n"]\ntransform = "{b}"'
    return load_spec(exercise_dir(toy_spec(replace=lines), TRANSFORMS))


def test_a_transform_passes_the_draw_through_reference_py(exercise_dir):
    a = generate(transformed_toy(exercise_dir, "softmax"), Case({"n": 37}), 1)["a"]
    assert a.dtype == torch.float32 and float(a.sum()) == pytest.approx(1.0) and bool((a > 0).all())


def test_a_transform_gets_case_parameters_and_earlier_inputs_by_keyword(exercise_dir):
    drawn = generate(transformed_toy(exercise_dir, "softmax", b="plus_n"), Case({"n": 6}), 1)
    assert torch.allclose(drawn["b"], drawn["a"] + 6)


def test_a_transform_returning_a_dict_feeds_each_input_its_entry(exercise_dir):
    drawn = generate(transformed_toy(exercise_dir, "pair", b="pair"), Case({"n": 6}), 1)
    assert torch.equal(drawn["b"], -drawn["a"])


def test_a_dict_transform_without_an_inputs_entry_names_what_it_returned(exercise_dir):
    with pytest.raises(SpecError, match=r"returned entries \['a'\], none named 'b'"):
        generate(transformed_toy(exercise_dir, "lonely", b="lonely"), Case({"n": 6}), 1)


def test_a_transform_that_is_not_a_function_is_a_spec_error(exercise_dir):
    with pytest.raises(SpecError, match="transform 'not_a_function' is not a function of"):
        generate(transformed_toy(exercise_dir, "not_a_function"), Case({"n": 6}), 1)


# --- layouts -------------------------------------------------------------------------------------

VALUES = torch.arange(12, dtype=torch.float32).reshape(3, 4) + 1


def test_a_row_slice_has_a_row_stride_wider_than_its_rows():
    view = place(VALUES, "row_slice", "cpu")
    assert torch.equal(view, VALUES) and view.stride() == (4 + ROW_SLICE_PAD, 1)
    assert not view.is_contiguous()


def test_a_transposed_layout_is_stored_column_major():
    view = place(VALUES, "transposed", "cpu")
    assert torch.equal(view, VALUES) and view.stride() == (1, 3)


def test_an_interleaved_layout_swaps_dimensions_one_and_two_in_memory():
    x = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).reshape(2, 3, 4, 5)
    view = place(x, "interleaved", "cpu")
    assert torch.equal(view, x) and view.stride() == (60, 5, 15, 1)  # heads (dim 1) side by side in a row


@pytest.mark.parametrize("layout", [None, "contiguous"])
def test_no_layout_is_contiguous(layout):
    view = place(VALUES.t(), layout, "cpu")
    assert view.is_contiguous() and torch.equal(view, VALUES.t())


def test_an_unknown_layout_is_refused():
    with pytest.raises(ValueError, match="unknown layout 'diagonal'"):
        place(VALUES, "diagonal", "cpu")


@pytest.mark.parametrize("layout", [None, "row_slice", "transposed"])
def test_stand_ins_have_the_shapes_dtypes_and_strides_of_a_trials_tensors(matrix, layout):
    """compile_steps.compile_first compiles on stand-ins: Triton specialises on strides, so a stand-in laid out
    otherwise than the trial's tensor would compile a kernel the trial never runs."""
    case = Case({"M": 3, "N": 4}, inputs={"x": {"layout": layout}}, outputs={"out": {"layout": layout}})
    trial = {"x": place(generate(matrix, case, 1)["x"], layout, "cpu"), **make_outputs(matrix, case, "cpu")}
    stand_in = stand_ins(matrix, case, "cpu")
    layout_of = lambda t: (t.shape, t.dtype, t.stride())  # noqa: E731
    assert {n: layout_of(t) for n, t in stand_in.items()} == {n: layout_of(t) for n, t in trial.items()}


def test_an_interleaved_stand_in_is_laid_out_as_an_interleaved_input():
    x = torch.zeros(2, 3, 4, 5, dtype=torch.bfloat16)
    _, stand_in = empty_laid_out([2, 3, 4, 5], torch.bfloat16, "interleaved", "cpu")
    assert stand_in.stride() == place(x, "interleaved", "cpu").stride()


def test_an_interpreted_float_input_is_followed_by_plain_nans_and_others_are_left_as_they_are():
    x = with_nan_tail(VALUES.clone())
    assert torch.equal(x, VALUES) and x.is_contiguous()
    past = x.new_empty(0).set_(x.untyped_storage())[VALUES.numel() :]  # what a load past its end reads
    assert past.numel() == INPUT_TAIL and past.isnan().all()
    assert not unwritten(past.to(torch.float16)).any()  # a plain NaN: read past an input, not an output's poison
    ints, transposed = torch.arange(6), place(VALUES, "transposed", "cpu")
    assert with_nan_tail(ints) is ints and with_nan_tail(transposed) is transposed


# --- poisoned outputs ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.uint8]
)
def test_a_poisoned_tensor_reads_as_unwritten_until_written(dtype):
    t = poison(torch.empty(4, dtype=dtype))
    assert bool(unwritten(t).all())
    t[1] = 3
    assert unwritten(t).tolist() == [True, False, True, True]


def test_a_computed_nan_is_not_mistaken_for_an_unwritten_element():
    t = poison(torch.empty(2))
    t[0] = torch.tensor(0.0) / torch.tensor(0.0)
    assert unwritten(t).tolist() == [False, True]


def test_the_allocators_free_poison_also_reads_as_unwritten():
    block = inputs.free_poison_block(torch.empty(3))
    assert bool(unwritten(block.view(torch.float32)).all()) and bool(unwritten(block.view(torch.float16)).all())


def test_a_contiguous_output_is_poisoned_with_a_guard_after_it(toy):
    out = make_outputs(toy, toy.cases[0], "cpu")["c"]
    assert out.shape == (5,) and bool(unwritten(out).all())
    assert out.untyped_storage().nbytes() == (5 + GUARD) * 4
    assert not written_outside(out)


def test_a_store_past_the_end_of_an_output_shows_in_its_guard(toy):
    out = make_outputs(toy, toy.cases[0], "cpu")["c"]
    out.fill_(1.0)
    assert not written_outside(out)
    torch.empty(0).set_(out.untyped_storage())[5] = 1.0  # index n: a missing bounds check
    assert written_outside(out)


def test_a_store_in_a_row_slices_padding_shows(matrix):
    out = make_outputs(matrix, Case({"M": 3, "N": 4}, outputs={"out": {"layout": "row_slice"}}), "cpu")["out"]
    assert out.stride() == (4 + ROW_SLICE_PAD, 1)
    out.fill_(1.0)
    assert not written_outside(out)
    out.as_strided((3, 4), (4, 1)).fill_(2.0)  # rows stepped by the width, not the stride
    assert written_outside(out)


def test_transposed_and_interleaved_outputs_have_their_layout(matrix):
    out = make_outputs(matrix, Case({"M": 3, "N": 4}, outputs={"out": {"layout": "transposed"}}), "cpu")["out"]
    assert out.shape == (3, 4) and out.stride() == (1, 3) and bool(unwritten(out).all())


def test_an_output_named_like_an_input_is_updated_in_place_from_its_values(exercise_dir):
    spec = load_spec(
        exercise_dir(toy_with(output_c='[outputs.a]\nshape = ["n"]'), "def reference(a, b):\n    return a + b, a\n")
    )
    assert in_place_names(spec) == ["a"]
    drawn = generate(spec, spec.cases[0], 1)
    outs = make_outputs(spec, spec.cases[0], "cpu", drawn)
    assert torch.equal(outs["a"], drawn["a"]) and outs["a"].data_ptr() != drawn["a"].data_ptr()
    assert bool(unwritten(outs["c"]).all())


# --- files between the processes -----------------------------------------------------------------


@pytest.mark.parametrize(
    "tensor",
    [
        torch.randn(3, 5),
        torch.randn(4).to(torch.bfloat16),
        torch.arange(6).reshape(2, 3),
        torch.empty(0, 3),
        torch.randn(4, 3).t(),
    ],
)
def test_a_tensor_survives_the_raw_file_round_trip(tmp_path, tensor):
    meta = save_tensor(tensor, tmp_path / "t.bin")
    back = load_tensor(meta)
    assert back.dtype == tensor.dtype and torch.equal(back, tensor)


def test_a_file_whose_size_disagrees_with_its_header_is_refused(tmp_path):
    meta = save_tensor(torch.randn(4), tmp_path / "t.bin")
    with pytest.raises(ValueError, match="holds 4 elements, expected 5"):
        load_tensor(meta, expected_numel=5)
    (tmp_path / "t.bin").write_bytes(b"\0" * 12)
    with pytest.raises(ValueError, match="has 12 bytes for 4"):
        load_tensor(meta)


def test_an_integer_input_can_be_a_row_slice():
    view = place(torch.arange(12, dtype=torch.int32).reshape(3, 4), "row_slice", "cpu")
    assert view.stride() == (4 + ROW_SLICE_PAD, 1)
