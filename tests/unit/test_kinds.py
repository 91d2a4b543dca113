"""The kinds registry (grader/kinds/): every kind's hooks name functions that exist, with the signature the
grader calls them with, and the grader compares no kind names (it asks a version's Kind)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from grader.kinds import GPU_TO_RUN, KINDS, NVCC_KINDS, kind_named

GRADER = Path(__file__).resolve().parents[2] / "grader"


def test_the_four_kinds_are_found_in_their_modules():
    assert sorted(KINDS) == ["cuda", "cuda_host", "torch_op", "triton"]
    assert NVCC_KINDS == ("cuda", "cuda_host") and set(GPU_TO_RUN) == {"cuda", "cuda_host", "torch_op"}
    assert kind_named("triton").interpreted and not kind_named("cuda").interpreted


@pytest.mark.parametrize("name", sorted(KINDS))
def test_each_kinds_hooks_resolve_with_the_called_signature(name):
    kind = kind_named(name)
    loader = inspect.signature(kind.hook("loader"))
    assert list(loader.parameters)[:5] == ["variant", "source", "library", "role", "renamed"]
    if kind.builder is not None:
        builder = inspect.signature(kind.hook("builder"))
        assert list(builder.parameters) == ["run", "solution"]


def test_no_grader_module_compares_kind_names():
    """`variant.kind == "torch_op"` and the like: a new kind would have to edit each of them."""
    names = "|".join(KINDS)
    pattern = re.compile(rf"\.kind\s*(==|!=)\s*\"({names})\"|\.kind\s+(not\s+)?in\s+\(")
    found = [
        f"{path.relative_to(GRADER.parent)}:{number}"
        for path in GRADER.rglob("*.py")
        if "kinds" not in path.parts
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert found == []
