"""The docs site (issue 39): the generated pages are current (scripts/gen_docs.py --check, run in process), the spec-key
reference (grader/core/spec_keys.py, docs/spec-keys.md) is what the parser reads and refuses, and mkdocs.yml's nav
and docs/ agree. `mkdocs build --strict` itself runs in .ci/run, not here."""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path

import pytest

from grader.core import spec_keys
from grader.core.spec import SpecError, load_spec

from .conftest import toy_spec, toy_with

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
# Pages of docs/ deliberately left out of mkdocs.yml's nav (none today): page -> why.
NOT_IN_NAV: dict[str, str] = {}


def gen_docs():
    script = ROOT / "scripts" / "gen_docs.py"
    if not script.exists():
        pytest.skip("scripts/gen_docs.py is the instructors' (not in the learner's kit)")
    if "gen_docs" not in sys.modules:  # registered first: its dataclasses look their module up
        spec = importlib.util.spec_from_file_location("gen_docs", script)
        sys.modules["gen_docs"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules["gen_docs"])
    return sys.modules["gen_docs"]


def test_the_generated_pages_are_current():
    stale = gen_docs().stale_pages()
    assert not stale, f"{', '.join(p.name for p in stale)} stale: run `python scripts/gen_docs.py`"


def test_the_exercise_table_has_a_row_per_exercise_and_language_with_its_summary_and_figures():
    docs = gen_docs()
    from grader.core.discovery import discover_exercises
    from grader.core.plans import load_plans

    exercises = discover_exercises()
    lines = docs.table(exercises, load_plans())
    rows = [line for line in lines if line.startswith("| `")]
    expected = {(s.id, v.language) for s in exercises.values() for v in s.variants.values()}
    assert len(rows) == len(expected) == len(docs.rows(exercises))
    scan = next(r for r in rows if r.startswith("| `scan` |"))
    assert "CUDA · CPU ✓" in scan and "Hillis-Steele" in scan and "3,584-3,648 GB/s" in scan
    # a row of several versions joins their figures in spec order
    activations = next(r for r in rows if r.startswith("| `activations` |"))
    assert "`--lang gelu_erf`, `gelu_tanh`, `silu`, `bias_gelu`" in activations
    assert "gelu_erf 2,805 GB/s, 93% (F.gelu 2,800); with the cheaper erf" in activations


def test_units_are_listed_per_plan_with_ranges_and_extras():
    docs = gen_docs()
    from grader.core.plans import PlanExercise, Unit

    plan = type("P", (), {})()
    plan.units = [Unit(f"day{n}", "", exercises=[PlanExercise("toy", "triton", extra=n == 9)]) for n in (2, 3, 4, 6, 9)]
    row = docs.Row(spec=type("S", (), {"id": "toy"})(), language="triton", variants=[])
    assert docs.unit_cell(row, plan) == "day2-4, day6, day9 (extra)"


def test_a_version_takes_summary_and_measured(spec_of):
    spec = spec_of(variant='summary = "adds"\nmeasured = "3,000 GB/s"')
    variant = spec.variant(None)
    assert (variant.summary, variant.measured) == ("adds", "3,000 GB/s")


# --- the reference and the parser ---------------------------------------------------------------------------------

# Where the parser reads each table's keys: (module, function, the object the keys are read off).
READERS = {
    "top level": [("grader/core/spec.py", "_parse", "data")],
    "[variants.<name>]": [("grader/core/spec.py", "_variant", "raw")],
    "[inputs.<name>] / [outputs.<name>]": [("grader/core/spec.py", "_tensor", "raw")],
    "[[cases]] / [[performance.cases]]": [("grader/core/spec.py", "_case", "raw")],
    "[[cases]] inputs.<name> / outputs.<name>": [
        ("grader/core/spec.py", "_validate_case_tensors", "options"),
        ("grader/checks/inputs.py", "generate", "options"),
        ("grader/checks/inputs.py", "make_outputs", "case.outputs.get(t.name, {})"),
    ],
    "[tolerance.<name>]": [("grader/core/spec.py", "_parse", "v")],
    "[performance]": [("grader/core/spec.py", "_performance", "perf")],
    "[[mistakes]]": [
        ("grader/core/spec.py", "_mistake", "raw"),
        ("grader/core/spec.py", "_check_mistake_values", "raw"),
        ("grader/core/spec.py", "_tiers", "raw"),
    ],
    "[checks]": [("grader/core/op_spec.py", "parse", "raw")],
}


def keys_read(module: str, function: str, obj: str) -> set[str]:
    """String keys `function` reads off `obj`: obj.get("k"), obj["k"], "k" in obj, or helper(obj, "k", ...)."""
    tree = ast.parse((ROOT / module).read_text())
    body = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function)
    found = set()
    for node in ast.walk(body):
        pairs = []
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            pairs.append((node.func.value, node.args[0] if node.args else None))
        if isinstance(node, ast.Call) and len(node.args) >= 2:
            pairs.append((node.args[0], node.args[1]))
        if isinstance(node, ast.Subscript):
            pairs.append((node.value, node.slice))
        if isinstance(node, ast.Compare) and isinstance(node.ops[0], (ast.In, ast.NotIn)):
            pairs.append((node.comparators[0], node.left))
        for target, key in pairs:
            if ast.unparse(target) == obj and isinstance(key, ast.Constant) and isinstance(key.value, str):
                found.add(key.value)
    return found


@pytest.mark.parametrize("table", spec_keys.TABLES, ids=lambda t: t.name)
def test_the_reference_lists_exactly_the_keys_the_parser_reads(table):
    read = set().union(*(keys_read(*where) for where in READERS[table.name]))
    assert read, f"no key of {table.name} read where READERS says: update READERS"
    assert sorted(set(table.names) - read) == [], f"listed in spec_keys.py, never read by the parser: {table.name}"
    assert sorted(read - set(table.names)) == [], f"read by the parser, missing from spec_keys.py: {table.name}"


UNKNOWN = [
    ("top level", toy_spec(before='colour = "red"\n'), "colour", spec_keys.TOP_KEYS),
    ("a variant", toy_with(variant="timeout = 60"), "timeout", spec_keys.VARIANT_KEYS),
    ("an input", toy_with(input_a='dtpye = "float16"'), "dtpye", spec_keys.TENSOR_KEYS),
    ("an output", toy_with(output_c="atol = 0.1"), "atol", spec_keys.TENSOR_KEYS),
    ("a tolerance", toy_spec(replace={"rtol = 1e-6\n": "rtol = 1e-6\natl = 0\n"}), "atl", spec_keys.TOLERANCE_KEYS),
    ("[performance]", toy_with(performance='bund = "memory"'), "bund", spec_keys.PERFORMANCE_KEYS),
    ("a case's tensor", toy_with(case_5="inputs = { a = { scal = 2.0 } }"), "scal", spec_keys.CASE_TENSOR_KEYS),
    (
        "a timed case's tensor",
        toy_spec(
            replace={"[[performance.cases]]\nn = 64\n": '[[performance.cases]]\nn = 64\noutputs.c = { lay = "x" }\n'}
        ),
        "lay",
        spec_keys.CASE_TENSOR_KEYS,
    ),
    (
        "a mistake",
        toy_spec(after='[[mistakes]]\nname = "m"\ncode = "mismatch"\nhitn = "h"\n'),
        "hitn",
        spec_keys.MISTAKE_KEYS,
    ),
]


@pytest.mark.parametrize("text, key, known", [u[1:] for u in UNKNOWN], ids=[u[0] for u in UNKNOWN])
def test_an_unknown_key_is_refused_naming_the_known_ones(exercise_dir, text, key, known):
    with pytest.raises(SpecError) as raised:
        load_spec(exercise_dir(text))
    assert f"unknown key(s) {key}; known: {', '.join(known)}" in str(raised.value)


def test_an_unknown_checks_key_is_refused_by_op_spec(exercise_dir):
    text = toy_spec(after='[checks]\ncustom_op = "toy::add(Tensor a, Tensor b) -> Tensor"\nfast = true\n')
    with pytest.raises(SpecError, match="unknown: fast"):
        load_spec(exercise_dir(text))


def test_a_case_parameter_is_not_an_unknown_key(spec_of):
    spec = spec_of(case_5="colour = 3")
    assert spec.cases[0].params == {"n": 5, "colour": 3}


# --- mkdocs.yml --------------------------------------------------------------------------------------------------


def nav_pages() -> list[str]:
    """The pages mkdocs.yml's nav names (`  - Title: page.md`), read without YAML: its nav is one flat list."""
    text = (ROOT / "mkdocs.yml").read_text()
    nav = text.split("\nnav:\n", 1)[1]
    return re.findall(r"^\s+-\s+[^:\n]+:\s+(\S+\.md)\s*$", nav, flags=re.M)


def test_the_nav_lists_every_page_of_docs_and_only_pages_that_exist():
    listed = nav_pages()
    assert listed and len(listed) == len(set(listed)), "a page twice in mkdocs.yml's nav"
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert sorted(p for p in listed if p not in pages) == [], "nav entries with no page in docs/"
    assert sorted(pages - set(listed) - set(NOT_IN_NAV)) == [], "pages of docs/ missing from mkdocs.yml's nav"
