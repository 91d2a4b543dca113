"""The grader's import graph has no cycle, counting imports inside functions too (issue 39): a module can be
read, tested and moved without the ones above it."""

from __future__ import annotations

import ast
from pathlib import Path

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
