"""Safe arithmetic on spec expressions such as "4*n + 4" or "2*M*N*K" (no names but the case's)."""

from __future__ import annotations

import ast
import functools
import operator
import threading

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Pow: operator.pow,
    ast.Mod: operator.mod,
}


def evaluate(expression: str | int | float, names: dict[str, float]) -> float:
    """Evaluate `expression` with `names`; only numbers, names and + - * / // % ** are allowed."""
    if isinstance(expression, (int, float)):
        return expression
    return _eval(_parsed(str(expression)).body, names, str(expression))


# ast.parse is not thread-safe in the CPython 3.11 releases before the fix of gh-106905: two threads parsing at once
# (the judge and the input feed's producer both read a spec's shapes) raised "SystemError: AST constructor
# recursion depth mismatch", a grader error in about one grade in a hundred. The few expressions a spec has are
# parsed once each, one at a time.
_PARSING = threading.Lock()


@functools.lru_cache(maxsize=4096)
def _parsed(text: str) -> ast.Expression:
    with _PARSING:
        return ast.parse(text, mode="eval")


def _eval(node: ast.AST, names: dict[str, float], text: str) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in names:
            raise ValueError(f"unknown name {node.id!r} in {text!r}; known: {sorted(names)}")
        return names[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](_eval(node.left, names, text), _eval(node.right, names, text))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand, names, text)
    raise ValueError(f"unsupported expression {text!r}: only numbers, names and + - * / // % **")


def evaluate_int(expression: str | int, names: dict[str, float]) -> int:
    value = evaluate(expression, names)
    if int(value) != value:
        raise ValueError(f"{expression!r} = {value} is not a whole number")
    return int(value)
