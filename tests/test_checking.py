import torch

from grader.checks.checking import compare, looks_cached, make_inputs, make_outputs
from grader.checks.inputs import free_poison_block, generate, place, poison
from grader.checks.inputs import make_outputs as outputs_in_layout
from grader.core.discovery import discover_exercises
from grader.core.spec import Case, Tolerance

TOL = Tolerance(atol=1e-6, rtol=1e-5)


def test_inputs_are_random_never_zero_and_fresh_per_seed():
    spec = discover_exercises()["softmax"]
    case = Case({"M": 7, "N": 13})
    first, second = make_inputs(spec, case, 1, "cpu")["x"], make_inputs(spec, case, 2, "cpu")["x"]
    assert (first != 0).all()
    assert not torch.equal(first, second)
    assert torch.equal(first, make_inputs(spec, case, 1, "cpu")["x"])  # a seed reproduces a failure


def test_outputs_start_poisoned_with_nan():
    spec = discover_exercises()["softmax"]
    out = make_outputs(spec, Case({"M": 2, "N": 3}), "cpu")["out"]
    assert torch.isnan(out).all()


def test_an_output_in_a_block_poisoned_for_another_dtype_is_still_never_written():
    # H200: the FA v2 CUDA stub (which writes nothing) returned a float16 `out` in the block poisoned for its
    # float32 `lse`, and heard "62 of 64 elements never written — does your last block handle the tail?"
    for made_for in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        block = free_poison_block(torch.empty(3, dtype=made_for))
        assert block.numel() * block.element_size() == 512  # a whole allocator block, not the tensor's 6-24 bytes
        for read_as in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
            landed = block.view(read_as)[: 64 // read_as.itemsize]
            result = compare("out", landed, torch.ones(landed.numel(), dtype=torch.float64), TOL, "N=1")
            assert result.code == "not_written", (made_for, read_as, result.message)


def test_partly_written_output_names_the_count_and_first_index():
    ref = torch.ones(1000, dtype=torch.float64)
    out = torch.ones(1000)
    poison(out[990:])
    result = compare("c", out, ref, TOL, "n=1000")
    assert not result.ok and result.code == "partial_write"
    assert "10 of 1000 elements of c never written (first at index 990)" in result.message
    assert "tail" in result.message


def test_nothing_written_reads_as_not_implemented():
    result = compare("c", poison(torch.empty(4)), torch.ones(4, dtype=torch.float64), TOL, "n=4")
    assert result.code == "not_written" and "not implemented yet" in result.message


def test_nan_never_passes_even_where_the_reference_is_nan_free():
    ref = torch.tensor([1.0, 2.0], dtype=torch.float64)
    out = torch.tensor([1.0, float("inf")])
    assert not compare("y", out, ref, Tolerance(1e9, 1e9), "x").ok


def test_mismatch_reports_max_errors_and_the_first_bad_2d_index():
    ref = torch.zeros(3, 4, dtype=torch.float64) + 1
    out = torch.ones(3, 4)
    out[1, 2] = 1.5
    result = compare("C", out, ref, TOL, "M=3 N=4")
    assert result.code == "mismatch"
    assert "1 of 12 elements of C wrong" in result.message
    assert "first at index [1, 2]: got 1.5, expected 1" in result.message
    assert result.details["max_abs_error"] == 0.5


def test_values_within_tolerance_pass():
    ref = torch.linspace(1, 2, 50, dtype=torch.float64)
    assert compare("y", (ref * (1 + 5e-6)).float(), ref, TOL, "n=50").ok


def test_a_computed_nan_is_a_wrong_value_not_an_unwritten_one():
    ref = torch.ones(8, dtype=torch.float64)
    out = torch.ones(8)
    out[3] = torch.tensor(float("inf")) - torch.tensor(float("inf"))  # an overflow's NaN, not the poison
    result = compare("y", out, ref, TOL, "n=8")
    assert result.code == "mismatch" and result.details["nan"] == 1 and "1 NaN (first at index 3" in result.message


def test_inputs_are_the_same_however_many_threads_draw_them(monkeypatch):
    spec = discover_exercises()["reduction"]
    case = Case({"n": (1 << 22) * 2 + 5})
    first = generate(spec, case, 7)["x"]
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    assert torch.equal(first, generate(spec, case, 7)["x"])


def test_a_case_can_shift_and_scale_inputs_to_break_unstable_code():
    spec = discover_exercises()["softmax"]
    plain = generate(spec, Case({"M": 4, "N": 64}), 3)["x"]
    shifted = generate(spec, Case({"M": 4, "N": 64}, inputs={"x": {"offset": 1000.0, "scale": 10.0}}), 3)["x"]
    assert torch.allclose(shifted, plain * 10 + 1000)


def test_each_trial_moves_the_answer_far_from_the_previous_one():
    spec = discover_exercises()["reduction"]
    case = Case({"n": 1000})
    assert torch.allclose(generate(spec, case, 5, trial=1)["x"], 1.5 * generate(spec, case, 5, trial=0)["x"])


def test_row_slice_layout_has_a_row_stride_wider_than_the_row():
    values = torch.randn(3, 5)
    view = place(values, "row_slice", "cpu")
    assert view.stride(0) > 5 and torch.equal(view, values)
    spec = discover_exercises()["softmax"]
    out = outputs_in_layout(spec, Case({"M": 3, "N": 5}, outputs={"out": {"layout": "row_slice"}}), "cpu")["out"]
    assert out.stride(0) > 5 and torch.isnan(out).all()


def test_interleaved_layout_is_a_fused_qkv_projections_slice_heads_side_by_side_in_each_row():
    values = torch.randn(2, 3, 7, 4)  # (B, H, N, d)
    view = place(values, "interleaved", "cpu")
    assert torch.equal(view, values) and view.stride() == (7 * 3 * 4, 4, 3 * 4, 1)  # head stride d, row stride H d
    spec = discover_exercises()["flash_attention_v2"]
    case = Case(
        {"B": 2, "H": 3, "N": 7, "d": 64, "dtype": "float16", "causal": True},
        outputs={"out": {"layout": "interleaved"}},
    )
    out = outputs_in_layout(spec, case, "cpu")["out"]
    assert out.shape == (2, 3, 7, 64) and out.stride() == (7 * 3 * 64, 64, 3 * 64, 1) and torch.isnan(out).all()


def test_float32_sum_tolerance_grows_with_the_square_root_of_its_length():
    spec = discover_exercises()["reduction"]
    small = spec.tolerance_of(Case({"n": 4097})).rtol
    large = spec.tolerance_of(Case({"n": 268_435_459})).rtol
    assert small == spec.tolerance_for("float32").rtol  # the floor: a short sum is held to rtol
    assert 3e-5 < large < 3e-3  # an honest per-block-atomics sum at 2^28 (3e-5 off) passes


def test_caching_is_named_only_when_the_previous_answer_is_far_from_this_one():
    tol = Tolerance(0.0, 2e-5)
    previous, now = torch.tensor([1.0000e8], dtype=torch.float64), torch.tensor([1.00005e8], dtype=torch.float64)
    slightly_off = torch.tensor([1.0000e8])
    assert not looks_cached(slightly_off, previous, now, tol)  # two sums 5e-5 apart: rounding, not caching
    assert looks_cached(torch.tensor([1.0e8]), previous, previous * 1.5, tol)


def _whole_tensor_max_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    err = (out.double() - ref.double()).abs()
    return float(torch.where(torch.isfinite(err), err, torch.zeros_like(err)).max())


def test_a_passing_output_is_checked_in_chunks_with_the_whole_tensors_verdict_and_error(monkeypatch):
    from grader.checks import checking

    monkeypatch.setattr(checking, "CHUNK", 7)  # 100 elements: 15 chunks, the last one short
    ref = torch.randn(10, 10, dtype=torch.float64)
    out = ref.float()
    out[9, 9] += 5e-6  # the largest error sits in the short last chunk
    result = compare("y", out, ref, Tolerance(atol=1e-5, rtol=0), "case")
    assert result.ok and result.details["max_abs_error"] == _whole_tensor_max_error(out, ref)
    out[9, 9] += 1.0  # and a wrong element there is caught
    wrong = compare("y", out, ref, Tolerance(atol=1e-5, rtol=0), "case")
    assert not wrong.ok and wrong.details["first_index"] == 99 and wrong.details["wrong"] == 1


def test_against_a_narrowed_reference_the_verdict_and_error_are_the_float64_ones():
    """A bf16 output against its reference handed back as float32 (checking.narrowed, rtol >= NARROW_RTOL): judged in
    float32, the same verdict and the same max error to float32's precision; one element past the bound still fails."""
    ref = torch.randn(4096, dtype=torch.float64)
    out = ref.to(torch.bfloat16)
    tol = Tolerance(atol=1e-2, rtol=1e-2)
    exact, narrow = compare("y", out, ref, tol, "case"), compare("y", out, ref.float(), tol, "case")
    assert exact.ok and narrow.ok
    assert abs(narrow.details["max_abs_error"] - exact.details["max_abs_error"]) <= 1e-6
    out[7] = ref[7] + 2 * (1e-2 + 1e-2 * abs(float(ref[7])))
    assert not compare("y", out, ref.float(), tol, "case").ok


def test_a_tolerance_below_the_narrowing_rtol_is_judged_in_float64_even_against_a_float32_reference():
    """An error of 1 + 2^-23 + 2^-30 against atol = 1 + 2^-23 (rtol 0): float64 sees it past the bound, float32
    would round it onto the bound and pass it."""
    atol = 1.0 + 2**-23
    ref = torch.full((8,), -(2**-30), dtype=torch.float32)
    out = ref.clone()
    out[3] = atol
    assert not compare("y", out, ref, Tolerance(atol=atol, rtol=0), "case").ok


def test_a_float64_output_is_not_changed_by_its_check():
    ref = torch.randn(64, dtype=torch.float64)
    out = ref + 1e-9
    kept = out.clone()
    assert compare("y", out, ref, TOL, "case").ok
    assert torch.equal(out, kept)


def test_equal_infinities_and_expected_nans_still_pass_and_a_nan_where_a_number_is_expected_fails():
    ref = torch.tensor([1.0, float("inf"), float("nan"), -float("inf")], dtype=torch.float64)
    assert compare("y", ref.float(), ref, TOL, "case").ok  # the whole-tensor path decides these
    got = ref.float()
    got[0] = float("nan")
    assert not compare("y", got, ref, TOL, "case").ok
