"""The torch.compile check's evidence (grader/checks/op_checks.py `_compiled`): inductor failing after Dynamo's
trace is this machine's failure, so the graph is compiled again without inductor; a failure of the trace itself
is the learner's, never retried."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo.exc as dynamo_exc

from grader.checks import op_checks


def _double(x):
    return x * 2


@pytest.fixture
def calls(monkeypatch):
    """The backends `_call_compiled` was asked for; inductor raises what the test puts in `calls["inductor"]`."""
    seen = {"backends": []}

    def fake_call(function, args, backend, compiled):
        seen["backends"].append(backend)
        if backend == "inductor" and "inductor" in seen:
            raise seen["inductor"]
        compiled.setdefault("function", function)
        return compiled["function"](*args)

    monkeypatch.setattr(op_checks, "_call_compiled", fake_call)
    monkeypatch.setattr(op_checks, "compile_backend", lambda device: ("inductor", ""))
    return seen


def _saved(name, tensor):
    return tensor


def _backend_failure() -> Exception:
    inner = RuntimeError("g++: fatal error: Killed signal terminated program cc1plus")
    try:
        raise dynamo_exc.BackendCompilerFailed(_double, inner, None) from inner
    except dynamo_exc.BackendCompilerFailed as exc:
        return exc


def test_inductor_failing_after_the_trace_compiles_again_without_it_and_says_so(calls):
    calls["inductor"] = _backend_failure()
    compiled = {}
    ran = op_checks._compiled(_double, [torch.ones(3)], _saved, compiled)
    assert calls["backends"] == ["inductor", "aot_eager"]
    assert ran["backend"] == "aot_eager" and torch.equal(ran["outputs"][0], torch.full((3,), 2.0))
    assert "BackendCompilerFailed" in ran["inductor_failed"]
    again = op_checks._compiled(_double, [torch.ones(2)], _saved, compiled)  # the next trial: no second try
    assert calls["backends"] == ["inductor", "aot_eager", "aot_eager"] and again["backend"] == "aot_eager"


def test_inductors_own_error_type_is_retried_too(calls):
    """torch 2.13 raises InductorError (a BackendCompilerFailed) from inductor's code generation; CI saw one in a
    full run, on the solution."""
    from torch._inductor.exc import InductorError

    calls["inductor"] = InductorError(PermissionError("[Errno 13] Permission denied: 'cache'"), None)
    ran = op_checks._compiled(_double, [torch.ones(3)], _saved, {})
    assert calls["backends"] == ["inductor", "aot_eager"] and ran["backend"] == "aot_eager"
    assert "InductorError" in ran["inductor_failed"] and "Permission denied" in ran["inductor_failed"]


def test_a_failure_of_the_trace_is_the_learners_and_is_not_retried(calls):
    calls["inductor"] = dynamo_exc.Unsupported("graph break: .item()")
    ran = op_checks._compiled(_double, [torch.ones(3)], _saved, {})
    assert calls["backends"] == ["inductor"]
    assert "graph break" in ran["error"] and ran["backend"] == "inductor"
