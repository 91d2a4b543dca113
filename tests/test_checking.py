import torch

from grader.checking import compare, make_inputs, make_outputs
from grader.discovery import discover_exercises
from grader.spec import Case, Tolerance

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


def test_partly_written_output_names_the_count_and_first_index():
    ref = torch.ones(1000, dtype=torch.float64)
    out = torch.ones(1000)
    out[990:] = float("nan")
    result = compare("c", out, ref, TOL, "n=1000")
    assert not result.ok and result.code == "partial_write"
    assert "10 of 1000 elements of c never written (first at index 990)" in result.message
    assert "tail" in result.message


def test_nothing_written_reads_as_not_implemented():
    result = compare("c", torch.full((4,), float("nan")), torch.ones(4, dtype=torch.float64), TOL, "n=4")
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
