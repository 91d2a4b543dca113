"""The picture of where an output went wrong (grader/checks/output_map.py), and that a failing comparison carries
it to the terminal: a tail never written is a stripe at the right, NaN rows are rows of N, a wrong element is █."""

from __future__ import annotations

import torch

from grader.checks import output_map
from grader.checks.checking import compare
from grader.checks.inputs import poison
from grader.core.records import Check
from grader.core.spec import Tolerance
from grader.reports.console import format_check

TOL = Tolerance(atol=1e-6, rtol=1e-5)


def grid_of(comparison) -> list[str]:
    return [line.strip() for line in comparison.details["map"][1:]]


def test_a_tail_block_never_written_is_a_stripe_at_the_right_of_every_row():
    ref = torch.randn(40, 100)
    out = ref.clone()
    poison(out[:, 96:])  # the last 4 columns of every row: a tail the kernel's last block skipped
    comparison = compare("out", out, ref, TOL, "M=40 N=100")
    assert comparison.code == "partial_write"
    rows = grid_of(comparison)
    assert len(rows) == 8 and all(row.endswith("░") and set(row[:-2]) == {"·"} for row in rows), rows
    assert "(40×100)" in comparison.details["map"][0] and "5×3 elements" in comparison.details["map"][0]


def test_nan_rows_and_a_wrong_element_each_show_where_they_are():
    ref = torch.randn(8, 10)
    out = ref.clone()
    out[2] = float("inf")
    out[5, 7] += 1.0
    rows = grid_of(compare("out", out, ref, TOL, "M=8 N=10"))
    assert rows[2] == "N" * 10 and rows[5] == "·" * 7 + "█" + "··" and rows[0] == "·" * 10
    assert "one element" in compare("out", out, ref, TOL, "x").details["map"][0]


def test_a_vector_is_one_row_and_higher_dimensions_stack_their_rows():
    ref = torch.zeros(3, 4, 5)
    out = ref.clone()
    out[1, 2, 4] = 1.0
    rows = grid_of(compare("out", out, ref, TOL, "x"))
    assert rows == ["·····"] * 3 + ["····█"] + ["·····"] * 2  # 3×4 = 12 rows, two to a line: row 6 is line 3
    vector = compare("y", torch.ones(10), torch.zeros(10), TOL, "n=10")
    assert grid_of(vector) == ["█" * 10]


def test_a_right_output_and_an_output_never_written_at_all_get_no_picture():
    ref = torch.randn(4, 4)
    assert "map" not in compare("out", ref.clone(), ref, TOL, "x").details
    assert "map" not in compare("out", poison(torch.empty(4, 4)), ref, TOL, "x").details  # "not written" says it


def test_the_console_prints_the_picture_under_the_failing_check():
    ref = torch.randn(2, 3)
    out = ref.clone()
    out[1, 1] = float("nan")
    comparison = compare("out", out, ref, TOL, "M=2 N=3")
    text = format_check(Check("numerics", "failed", comparison.message, comparison.details))
    assert "where out (2×3) is wrong" in text and "···\n" in text and "·N·" in text
    assert output_map.LEGEND in text
