"""What the Triton interpreter lets through and the GPU compiler refuses, found by reading the source.

On a machine without a GPU a Triton kernel runs under the interpreter, which executes it as Python: a
kernel that reads a plain module-level number (`SQRT1_2 = 0.7071...`) works there, and on a GPU Triton
refuses to compile it ("Cannot access global variable ... from within @jit'ed function"). A learner who
grades only on a CPU would be told "passed" for a kernel no GPU runs, so the CPU tier reports it."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PlainGlobal:
    kernel: str
    name: str
    line: int  # where the global is assigned


def plain_globals_in_kernels(source: str) -> list[PlainGlobal]:
    """Module-level names assigned a plain value (not tl.constexpr(...)) that a @triton.jit function reads."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []  # the loader reports syntax errors with their line
    plain = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if not (isinstance(node.value, ast.Call) and "constexpr" in ast.unparse(node.value.func)):
                plain[node.targets[0].id] = node.lineno
    found = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any("jit" in ast.unparse(d) for d in node.decorator_list):
            local = {a.arg for a in node.args.args} | {
                n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
            }
            read = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
            found += [
                PlainGlobal(node.name, name, plain[name])
                for name in sorted((read & plain.keys()) - local)
                if _is_number(tree, name)
            ]
    return found


def _is_number(tree: ast.Module, name: str) -> bool:
    """Only numbers and number expressions: a global function or module (tl, a helper @jit) is fine."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            try:
                return isinstance(ast.literal_eval(node.value), (int, float, bool))
            except ValueError:
                return isinstance(node.value, (ast.BinOp, ast.UnaryOp)) and all(
                    isinstance(n, (ast.Constant, ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop, ast.Name, ast.Load))
                    for n in ast.walk(node.value)
                )
    return False


def message(path: Path, found: list[PlainGlobal]) -> str:
    first = found[0]
    names = ", ".join(sorted({f.name for f in found}))
    return (
        f"{path.name}:{first.line}: `{first.name}` is a plain global read inside @triton.jit `{first.kernel}`: the "
        f"interpreter allows it, a GPU does not compile it. Write `{first.name} = tl.constexpr(...)` "
        f"(or pass it as an argument). Globals: {names}"
    )
