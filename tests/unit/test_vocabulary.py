"""The grader's vocabulary (grader/core/vocabulary.py) is its one list of check names, codes and child events:
code constructs them from its members, never from string literals; the members are the strings records and the
child's pipe have always carried; a spec's [[mistakes]] may name only codes and checks the grader gives."""

from __future__ import annotations

import ast
import json
from dataclasses import asdict
from pathlib import Path

import pytest

from grader.checks import hints
from grader.core.paths import course_root
from grader.core.records import Check
from grader.core.spec import SpecError, load_spec
from grader.core.vocabulary import CheckName, Code, Event, Status

from .conftest import toy_spec, write_exercise


def _literal(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _branches(node: ast.AST) -> list[ast.AST]:
    """`x`, or both arms of `a if c else b`."""
    return _branches(node.body) + _branches(node.orelse) if isinstance(node, ast.IfExp) else [node]


def _call_name(call: ast.Call) -> str:
    return getattr(call.func, "attr", None) or getattr(call.func, "id", "")


def _vocabulary_literals(tree: ast.AST):
    """(line, what) for each string literal where a vocabulary member belongs: a Check's name, a code (keyword,
    or a dict's "code"), an event the child sends or a dict's "event"."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name, args = _call_name(node), node.args
            if name in ("Check", "_fail") and args and _literal(args[0]):
                yield node.lineno, f"check name {args[0].value!r}"
            if name == "send" and args and _literal(args[0]):
                yield node.lineno, f"event {args[0].value!r}"
            for keyword in node.keywords:
                if keyword.arg in ("code", "skip_code") and any(_literal(b) for b in _branches(keyword.value)):
                    yield node.lineno, f"{keyword.arg}="
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if (
                    key is not None
                    and _literal(key)
                    and key.value in ("code", "event")
                    and any(_literal(b) for b in _branches(value))
                ):
                    yield node.lineno, f"{{{key.value!r}: ...}}"


def test_no_check_name_code_or_event_is_a_string_literal_in_the_grader():
    found = []
    for path in sorted((course_root() / "grader").rglob("*.py")):
        for line, what in _vocabulary_literals(ast.parse(path.read_text())):
            found.append(f"{path.relative_to(course_root())}:{line}: {what}")
    assert not found, "use grader/core/vocabulary.py's members:\n" + "\n".join(found)


def test_the_scan_finds_literals_where_members_belong():
    tree = ast.parse(
        'Check("speed", FAILED, "m", {"code": "slow" if x else Code.OK})\nsend("trial", k=1)\n'
        'f(code="mismatch")\nCheck(CheckName.SPEED, FAILED, "m", {"code": Code.SLOW})'
    )
    assert sorted(line for line, _ in _vocabulary_literals(tree)) == [1, 1, 2, 3]


def test_members_are_the_strings_records_and_the_pipe_carry():
    check = Check(CheckName.NUMERICS, Status.FAILED, "m", {"code": Code.MISMATCH})
    assert json.dumps(asdict(check)) == json.dumps(asdict(Check("numerics", "failed", "m", {"code": "mismatch"})))
    assert f"{Code.MISMATCH} {CheckName.SPEED}" == "mismatch speed" and str(Event.TRIAL) == "trial"
    assert json.loads(json.dumps({"event": Event.TRIAL}))["event"] == Event.TRIAL
    assert {"mismatch": 1}[Code.MISMATCH] == 1


def test_every_hint_answers_a_code_the_grader_gives():
    assert set(hints._BY_CODE) <= set(Code) and set(hints._SANITIZER) <= set(Code)


@pytest.mark.parametrize(
    "line, said",
    [
        ('code = "mismatsh"', "did you mean 'mismatch'?"),
        ('check = "numeric"\ncode = "mismatch"', "did you mean 'numerics'?"),
    ],
)
def test_a_spec_mistake_naming_a_code_or_check_the_grader_never_gives_is_refused(tmp_path, line, said):
    text = toy_spec(after=f'\n[[mistakes]]\nname = "typo"\nhint = "h"\n{line}\n')
    with pytest.raises(SpecError) as error:
        load_spec(write_exercise(tmp_path, text))
    assert said in str(error.value) and "grader/core/vocabulary.py" in str(error.value)


def test_every_exercise_spec_loads_with_the_vocabulary_checked():
    for folder in sorted(Path(course_root() / "exercises").iterdir()):
        if (folder / "spec.toml").exists():
            load_spec(folder)
