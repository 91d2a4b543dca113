"""Helpers for the unit tests: a toy exercise written to tmp_path (a spec.toml and its reference.py), so the core
modules are tested on a spec these tests own, not on the catalog's exercises."""

from __future__ import annotations

from pathlib import Path

import pytest

# c = a + b on a vector of n float32s: two cases, two trials each, one timed size.
TOY_SPEC = """\
id = "toy"
title = "Toy vector add"
trials = 2

[variants.triton]
kind = "triton"
stub = "toy.py"
entry = "toy"
args = ["a", "b", "c"]

[inputs.a]
shape = ["n"]
[inputs.b]
shape = ["n"]

[outputs.c]
shape = ["n"]

[[cases]]
n = 5
[[cases]]
n = 37

[tolerance.float32]
atol = 1e-6
rtol = 1e-6

[performance]
bytes = "3 * n * elem"
threshold = 0.7
[[performance.cases]]
n = 64
"""

TOY_REFERENCE = """\
def reference(a, b):
    return a + b
"""


def write_exercise(root: Path, spec: str = TOY_SPEC, reference: str = TOY_REFERENCE, name: str = "toy") -> Path:
    """exercises-like folder root/name with spec.toml and reference.py; returns the folder."""
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "spec.toml").write_text(spec)
    (folder / "reference.py").write_text(reference)
    return folder


def toy_spec(*, before: str = "", after: str = "", replace: dict[str, str] | None = None) -> str:
    """TOY_SPEC with top-level keys put `before` its tables, tables appended `after` it, and text replaced."""
    text = TOY_SPEC
    for old, new in (replace or {}).items():
        assert old in text, f"{old!r} is not in the toy spec"
        text = text.replace(old, new)
    return before + text + after


ANCHORS = {
    "variant": 'entry = "toy"\n',
    "input_a": '[inputs.a]\nshape = ["n"]\n',
    "output_c": '[outputs.c]\nshape = ["n"]\n',
    "case_5": "[[cases]]\nn = 5\n",
    "performance": "threshold = 0.7\n",
}


def toy_with(
    before: str = "",
    after: str = "",
    args: list[str] | None = None,
    replace: dict[str, str] | None = None,
    **lines: str,
) -> str:
    """TOY_SPEC with lines added to its tables (ANCHORS: variant, input_a, output_c, case_5, performance), the
    variant's `args` and other text replaced, top-level keys put `before` it and tables `after` it."""
    replace = dict(replace or {})
    for table, text in lines.items():
        replace[ANCHORS[table]] = ANCHORS[table] + text + ("" if text.endswith("\n") else "\n")
    if args is not None:
        replace['args = ["a", "b", "c"]'] = "args = [" + ", ".join(f'"{a}"' for a in args) + "]"
    return toy_spec(before=before, after=after, replace=replace)


@pytest.fixture
def exercise_dir(tmp_path):
    """A function writing a toy exercise folder under tmp_path/exercises (spec text and reference optional)."""

    def make(spec: str = TOY_SPEC, reference: str = TOY_REFERENCE, name: str = "toy") -> Path:
        return write_exercise(tmp_path / "exercises", spec, reference, name)

    return make


@pytest.fixture
def toy(exercise_dir):
    """The toy exercise's spec, loaded."""
    from grader.core.spec import load_spec

    return load_spec(exercise_dir())


@pytest.fixture
def spec_of(exercise_dir):
    """The toy spec, or a variation of it (toy_with's keywords, another reference.py), loaded."""
    from grader.core.spec import load_spec

    def load(reference: str = TOY_REFERENCE, **changes):
        return load_spec(exercise_dir(toy_with(**changes), reference))

    return load


@pytest.fixture
def toy_child(toy, tmp_path):
    """A function making a fake child (fake_child.FakeChild) for the toy spec, or the spec given."""
    from .fake_child import FakeChild

    def make(spec=None, **options) -> FakeChild:
        return FakeChild(spec or toy, tmp_path / "child", **options)

    return make
