"""gelu_op's reference: the float64 truth on the CPU is computed a piece at a time (the verdict's size is 2^28
elements), with the values of the formula on the whole tensor, which the GPU's "torch" figure times."""

from __future__ import annotations

import torch

from grader.checks.checking import load_reference
from grader.core.discovery import resolve


def test_the_piecewise_cpu_reference_is_the_formula_over_a_ragged_length(monkeypatch):
    folder = resolve(("gelu_op",)).spec.folder
    reference = load_reference(folder / "reference.py")
    monkeypatch.setitem(reference.__globals__, "PIECE", 7)  # 100 elements: 15 pieces, the last one short
    x = torch.randn(4, 25, dtype=torch.float64) * 3
    whole = reference.__globals__["gelu_tanh"](x)
    assert torch.equal(reference(x), whole) and reference(x).shape == x.shape
