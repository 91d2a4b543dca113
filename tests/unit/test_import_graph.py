"""The grader's import graph has no cycle, counting imports inside functions too (issue 39): a module can be
read, tested and moved without the ones above it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

GRADER = Path(__file__).resolve().parents[2] / "grader"


def module_name(path: Path) -> str:
    parts = path.relative_to(GRADER.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, modules: set[str]) -> set[str]:
    """The grader modules `path` imports anywhere in it (a package's submodule counts as the package's own)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    return found


def graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in GRADER.rglob("*.py")}
    modules = set(paths)
    return {m: {t for t in imports(p, modules) if t != m and not m.startswith(t + ".")} for m, p in paths.items()}


def cycle_from(start: str, edges: dict[str, set[str]]) -> list[str] | None:
    """A path start -> ... -> start, if there is one (depth-first)."""
    stack, seen = [(start, [start])], set()
    while stack:
        node, path = stack.pop()
        for nxt in edges[node]:
            if nxt == start:
                return path + [start]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, path + [nxt]))
    return None


def test_the_grader_has_no_import_cycle():
    edges = graph()
    cycles = [c for c in (cycle_from(m, edges) for m in sorted(edges)) if c]
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles[:3])


def test_the_check_finds_a_cycle_when_there_is_one():
    assert cycle_from("a", {"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle_from("a", {"a": {"b"}, "b": set()}) is None


# The packages by layer, lowest first (grader/*/__init__.py say what each owns). A module imports from its own
# layer or below: the child (beside learner code) never from the parent's `run`, and nothing below the top from
# the commands or the reports.
LAYERS = (
    ("kinds",),  # data and hook names only: every layer reads a Kind
    ("core",),
    ("toolchain",),
    ("cuda_cpu",),
    ("checks",),
    ("child",),
    ("run",),
    ("commands", "reports", "capstone", "cli", "__main__"),
)


def layer(module: str) -> int:
    """The layer of `grader.<package>...` (the grader's own __init__ is the bottom: it imports nothing)."""
    package = module.split(".")[1] if "." in module else ""
    return next((i for i, names in enumerate(LAYERS) if package in names), -1 if not package else None)


def test_every_grader_module_is_in_a_layer():
    assert [m for m in graph() if layer(m) is None] == []


def test_no_module_imports_from_a_layer_above_its_own():
    edges = graph()
    upward = sorted(f"{m} -> {t}" for m, targets in edges.items() for t in targets if layer(t) > layer(m))
    assert upward == []


def test_the_module_map_in_docs_is_generated_from_the_current_docstrings():
    script = GRADER.parent / "scripts" / "module_map.py"
    if not script.exists():
        pytest.skip("scripts/module_map.py is the instructors' (not in the learner's kit)")
    assert subprocess.run([sys.executable, str(script), "--check"]).returncode == 0, (
        "docs/architecture.md is stale: run `python scripts/module_map.py`"
    )


def test_every_import_of_a_grader_name_anywhere_resolves():
    """Imports inside functions too, in the grader, the tests and the scripts: a branch that runs only on a GPU
    (or only on the device machine) must not hold an import that names a moved module or a missing name."""
    import importlib

    root = GRADER.parent
    wrong = []
    for path in [*GRADER.rglob("*.py"), *(root / "tests").glob("**/*.py"), *(root / "scripts").glob("*.py")]:
        if "fixtures" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("grader"):
                module = importlib.import_module(node.module)
                wrong += [
                    f"{path.relative_to(root)}:{node.lineno}: {node.module}.{a.name}"
                    for a in node.names
                    if not hasattr(module, a.name) and importlib.util.find_spec(f"{node.module}.{a.name}") is None
                ]
    assert wrong == []
