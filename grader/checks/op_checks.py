"""Checks of an operator the learner registers with torch.library.custom_op (spec.toml `[checks] custom_op`).

Numerics say the kernel is right; these say the operator is one PyTorch can use: it exists under
torch.ops with the schema the exercise asks for and the entry point calls it (`operator`), torch's own
`torch.library.opcheck` passes (schema / mutation, autograd registration, fake tensor, AOT dispatch:
`opcheck`), `torch.compile(entry, fullgraph=True)` traces it without a graph break and gives the
reference's answer (`torch_compile`), and, with `autograd = true`, its registered backward gives the
reference's gradients (`gradients`). They run on the first trial of each case marked `op_checks = true`.

A plain torch.autograd.Function (`[checks] autograd_function = true`, no operator) gets only `gradients`.
Either way the backward runs under the integrity recorder; with `kernel_backward = true` (the default
for autograd_function) torch compute there fails `gradients`: the backward must be the learner's
kernels (a custom_op day may write its backward in torch). With `gradcheck = true` torch.autograd.gradcheck runs on
float64 copies of each marked case small enough (GRADCHECK_ELEMENTS): the kernels must take float64.

The learner's code runs only in the child: `gather` (called there) runs the checks and hands back
evidence, outputs and gradients as files. The parent draws the gradients fed backward, computes the
reference's gradients in float64 (`reference_gradients`) and decides every verdict (`judge_trial`,
`verdicts`)."""

from __future__ import annotations

import importlib
import math
import shutil
import time
from typing import Any, Callable

from grader.core.op_spec import CHECKS, GRADCHECK_ELEMENTS, OpChecks, parse  # noqa: F401 (the spec side, re-exported)
from grader.core.records import FAILED, PASSED, SKIPPED, Check
from grader.core.spec import gradcheck_small as _small  # noqa: F401 (re-exported)
from grader.core.vocabulary import CheckName, Code

# torch is imported inside the functions: loading a spec (which parses [checks]) imports no torch

MESSAGE_LIMIT = 700  # characters of a torch error shown to the learner (Dynamo's run to pages)

# What a grade with these checks imports on first use, seconds of CPU in a child that has only torch: a custom op's
# first call imports Dynamo, opcheck its tests, torch.compile Inductor, torch.autograd.grad sympy's shapes. A fork
# server imports them once, before forking such a grade's child (grader/child/zygote.py), for every child after it.
SCHEMA_IMPORTS = ("torch._dynamo", "torch.testing._internal.optests", "torch._inductor.compile_fx")
GRADIENT_IMPORTS = ("torch.fx.experimental.symbolic_shapes",)
FIRST_USE_IMPORTS = SCHEMA_IMPORTS + GRADIENT_IMPORTS  # the only modules a fork server imports when asked


def first_use_imports(checks: OpChecks | None) -> list[str]:
    """The modules a grade with `checks` (None: the spec has no [checks]) imports on first use."""
    if checks is None:
        return []
    schema = SCHEMA_IMPORTS if checks.schema is not None else ()
    return [*schema, *(GRADIENT_IMPORTS if "gradients" in checks.names else ())]


def import_first_use(names: list[str]) -> None:
    """Import what a grade will import on first use, before its job comes: in a fork server, once for every child
    after it; in a fresh child, while it waits. Only names on FIRST_USE_IMPORTS are imported; a module that fails
    is left to the grade, which imports it again and reports its error."""
    for name in names:
        if name in FIRST_USE_IMPORTS:
            try:
                importlib.import_module(name)
            except Exception:
                pass


def wanted(spec, case, trial: int) -> bool:
    """Whether this trial runs the operator checks: the first trial of each case marked op_checks = true."""
    return spec.checks is not None and case.op_checks and trial == 0


# --- the child: run the checks, hand back evidence ------------------------------------------------


def gather(
    checks: OpChecks,
    function: Callable,
    args: list[Any],
    grad_outputs: list,
    save: Callable[[str, Any], dict],
    compiled: dict,
) -> dict[str, Any]:
    """Evidence for every check, on fresh copies of `args` (the trial's inputs). `save(name, tensor)` writes a
    tensor for the parent; `compiled` keeps the compiled entry point between cases (one compile, then guards)."""
    evidence: dict[str, Any] = {}
    if checks.schema is not None:
        evidence["operator"] = _registration(checks)
        if evidence["operator"].get("schema") == checks.schema:
            evidence["opcheck"] = _opcheck(checks, _copies(args, checks.autograd))
        evidence["torch_compile"] = _compiled(function, _copies(args), save, compiled)
    if checks.autograd:
        evidence["gradients"] = _gradients(function, _copies(args, True), grad_outputs, save)
        if checks.gradcheck and sum(a.numel() for a in args if _floating(a)) <= GRADCHECK_ELEMENTS:
            evidence["gradients"]["gradcheck"] = _gradcheck(function, args)
    return evidence


def _floating(a: Any) -> bool:
    import torch

    return isinstance(a, torch.Tensor) and a.is_floating_point()


def _copies(args: list[Any], requires_grad: bool = False) -> list[Any]:
    """Fresh tensors (a check must not see what another did to them); floating ones require grad if asked."""
    import torch

    return [
        a.detach().clone().requires_grad_(requires_grad and a.is_floating_point()) if isinstance(a, torch.Tensor) else a
        for a in args
    ]


def _overload(checks: OpChecks):
    import torch

    return getattr(getattr(torch.ops, checks.namespace), checks.name).default


def _registration(checks: OpChecks) -> dict[str, Any]:
    try:
        return {"schema": str(_overload(checks)._schema)}
    except (AttributeError, RuntimeError) as exc:
        return {"error": short(exc)}


def _opcheck(checks: OpChecks, args: list[Any]) -> dict[str, Any]:
    import torch

    started = time.monotonic()
    try:
        results = torch.library.opcheck(_overload(checks), tuple(args), raise_exception=False)
    except Exception as exc:  # opcheck itself could not call the operator with these arguments
        return {"error": short(exc)}
    return {
        "tests": {test: "SUCCESS" if outcome == "SUCCESS" else short(outcome) for test, outcome in results.items()},
        "seconds": round(time.monotonic() - started, 3),
    }


def compile_backend(device: str) -> tuple[str | None, str]:
    """torch.compile's default backend (inductor) where it can run; on a CPU without a C++ compiler none
    (inductor's CPU code is C++): the check is skipped, with why."""
    if device == "cuda" or shutil.which("g++") or shutil.which("c++") or shutil.which("clang++"):
        return "inductor", ""
    return (
        None,
        "no C++ compiler found: torch.compile's CPU backend (inductor) needs one (install g++), or grade on a GPU",
    )


def _compiled(function: Callable, args: list[Any], save, compiled: dict) -> dict[str, Any]:
    import torch

    device = next((a.device.type for a in args if isinstance(a, torch.Tensor)), "cpu")
    backend, why = compile_backend(device)
    if backend is None:
        return {"skipped": why}
    if "inductor_failed" in compiled:  # inductor failed before (below): aot_eager, compiled once as inductor was
        backend = "aot_eager"
    started = time.monotonic()
    try:
        result = _call_compiled(function, args, backend, compiled)
    except Exception as exc:
        if not _backend_failed(exc, backend):
            return {"error": short(exc), "backend": backend}
        # Dynamo traced the learner's operator with fake tensors (what the check asks) and handed the graph on;
        # inductor's own code generation then failed (its C++ compiler or its cache, under load): the graph is
        # compiled again by AOTAutograd without inductor, which still traces the operator's fake implementation.
        compiled.pop("function", None)
        compiled["inductor_failed"] = short(exc)
        return _compiled(function, args, save, compiled)
    outputs = list(result) if isinstance(result, (tuple, list)) else [result]
    if not all(isinstance(t, torch.Tensor) for t in outputs):
        return {"error": f"the compiled entry point returned {type(result).__name__}, not tensors", "backend": backend}
    return {
        "outputs": [save(f"compiled{i}", t) for i, t in enumerate(outputs)],
        "backend": backend,
        "inductor_failed": compiled.get("inductor_failed"),
        "seconds": round(time.monotonic() - started, 3),
    }


def _call_compiled(function: Callable, args: list[Any], backend: str, compiled: dict) -> Any:
    """The entry point compiled once per child (full graph: a graph break is an error) and called on `args`."""
    import torch

    if "function" not in compiled:
        compiled["function"] = torch.compile(function, fullgraph=True, backend=backend)
    with torch.no_grad():
        return compiled["function"](*args)


def _backend_failed(exc: Exception, backend: str) -> bool:
    """inductor failed after Dynamo's trace succeeded: torch wraps the backend's exception in BackendCompilerFailed
    (or its subclass InductorError, which keeps it as `inner_exception`), whose cause is not a Dynamo error (a fake
    implementation that raises surfaces as one of those)."""
    import torch._dynamo.exc as dynamo_exc

    if backend != "inductor" or not isinstance(exc, dynamo_exc.BackendCompilerFailed):
        return False
    inner = getattr(exc, "inner_exception", None) or exc.__cause__ or exc.__context__
    return not isinstance(inner, dynamo_exc.TorchDynamoException)


def _gradients(function: Callable, args: list[Any], grad_outputs: list, save) -> dict[str, Any]:
    """d(outputs . grad_outputs)/d(each floating input), through the learner's backward, and the operators
    the backward pass called (the integrity recorder is on for it alone: the forward's are the trial's)."""
    import torch

    from grader.checks import integrity

    wrt = [(i, a) for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.requires_grad]
    try:
        result = function(*args)
        outputs = list(result) if isinstance(result, (tuple, list)) else [result]
        fed = [g.to(o.device) for g, o in zip(grad_outputs, outputs)]
        grads, ops = integrity.ops_called(
            lambda: torch.autograd.grad(outputs, [a for _, a in wrt], fed, allow_unused=True)
        )
        _sync(args)
    except Exception as exc:
        return {"error": short(exc)}
    return {
        "grads": {str(i): None if g is None else save(f"grad{i}", g) for (i, _), g in zip(wrt, grads)},
        "ops": sorted(ops),
    }


def _sync(args: list[Any]) -> None:
    import torch

    if any(isinstance(a, torch.Tensor) and a.is_cuda for a in args):
        torch.cuda.synchronize()


def _gradcheck(function: Callable, args: list[Any]) -> dict[str, Any]:
    """torch.autograd.gradcheck on float64 copies: the backward's Jacobian against finite differences of the
    forward, to float64's precision (a kernel that computes in float32 inside fails it: the kernels must
    keep float64 as float64)."""
    import torch

    doubles = tuple(a.detach().double().requires_grad_() if _floating(a) else a for a in args)
    try:
        torch.autograd.gradcheck(function, doubles, eps=1e-6, atol=1e-5, rtol=1e-3)
    except Exception as exc:
        return {"error": short(exc)}
    return {"passed": True}


def short(exc: Any) -> str:
    """An error (or opcheck's outcome) in a few lines: torch's messages run long, the first lines say what."""
    text = f"{type(exc).__name__}: {exc}" if isinstance(exc, BaseException) else str(exc)
    text = "\n".join(line for line in text.splitlines() if line.strip() and not line.startswith("For more information"))
    return text if len(text) <= MESSAGE_LIMIT else text[:MESSAGE_LIMIT] + " ..."


# --- the parent: what backward is fed, the reference's gradients, the verdicts ---------------------


def draw_grad_outputs(spec, case, seed: int) -> list:
    """One gradient per output, N(0,1) in the output's shape and dtype, drawn from the trial's seed."""
    from grader.checks.inputs import _draw, dtype_of, shape_of, torch_dtype

    return [
        _draw(math.prod(shape_of(t, case)), seed * 31 + 977 + i, "normal")
        .reshape(shape_of(t, case))
        .to(torch_dtype(dtype_of(t, case)))
        for i, t in enumerate(spec.outputs)
    ]


def reference_gradients(reference: Callable, spec, inputs: dict, grad_outputs: list, params: dict) -> dict:
    """The reference's gradients in float64, by autograd through it, per floating input."""
    import torch

    from grader.checks.checking import reference_keywords

    leaves = {name: t.double().requires_grad_() for name, t in inputs.items() if t.is_floating_point()}
    upcast = [leaves.get(name, t) for name, t in inputs.items()]
    result = reference(*upcast, **reference_keywords(reference, params))
    outputs = list(result) if isinstance(result, (tuple, list)) else [result]
    grads = torch.autograd.grad(outputs, list(leaves.values()), [g.double() for g in grad_outputs], allow_unused=True)
    return {name: torch.zeros_like(leaf) if g is None else g.detach() for (name, leaf), g in zip(leaves.items(), grads)}


def judge_trial(spec, variant, case, label: str, event: dict, refs: list, ref_grads: dict, tol) -> dict[str, Check]:
    """This trial's verdict per check, from the child's evidence (absent evidence fails: it is the learner's
    process that did not hand it back)."""
    evidence = event.get("op_checks") or {}
    if spec.checks.schema is None:  # a plain autograd.Function: its gradients alone
        return {
            "gradients": _gradient_verdict(spec, variant, case, label, evidence.get("gradients") or {}, ref_grads, tol)
        }
    verdicts = {
        "operator": _operator_verdict(
            spec.checks, variant, label, evidence.get("operator") or {}, event.get("ops") or []
        )
    }
    verdicts["opcheck"] = _opcheck_verdict(label, evidence.get("opcheck"), verdicts["operator"])
    verdicts["torch_compile"] = _compile_verdict(spec, variant, label, evidence.get("torch_compile") or {}, refs, tol)
    if spec.checks.autograd:
        verdicts["gradients"] = _gradient_verdict(
            spec, variant, case, label, evidence.get("gradients") or {}, ref_grads, tol
        )
    return verdicts


def _operator_verdict(checks: OpChecks, variant, label: str, found: dict, ops: list) -> Check:
    name, register = checks.qualname, f'@torch.library.custom_op("{checks.qualname}", mutates_args=())'
    if "schema" not in found:
        return Check(
            CheckName.OPERATOR,
            FAILED,
            f"{label}: no operator torch.ops.{checks.namespace}.{checks.name}: register it with "
            f"{register} on the function that launches your kernel ({found.get('error', 'no evidence')})",
            {"code": Code.NO_OPERATOR},
        )
    if found["schema"] != checks.schema:
        return Check(
            CheckName.OPERATOR,
            FAILED,
            f"{name} has the schema `{found['schema']}`; the exercise's is `{checks.schema}`: "
            "keep the stub's parameter names and type hints (they make the schema) and mutates_args=()",
            {"code": Code.WRONG_SCHEMA, "schema": found["schema"]},
        )
    if name not in ops:
        return Check(
            CheckName.OPERATOR,
            FAILED,
            f"{label}: `{variant.entry}` did not call torch.ops.{checks.namespace}.{checks.name}: "
            "call the registered operator, so torch.compile and autograd see one operator (not your kernel's "
            "launch)",
            {"code": Code.OPERATOR_NOT_CALLED},
        )
    return Check(
        CheckName.OPERATOR,
        PASSED,
        f"torch.ops.{checks.namespace}.{checks.name} registered as `{checks.schema}`, called by `{variant.entry}`",
    )


OPCHECK_HINTS = {
    "test_schema": "an input your kernel writes must be listed in mutates_args (better: write only to a new output)",
    "test_autograd_registration": "register the backward with register_autograd(backward, setup_context=...)",
    "test_faketensor": "register a fake implementation (@<op>.register_fake) returning an empty tensor with the real "
    "output's shape, dtype and device (torch.empty_like(x)); it must not read values",
    "test_aot_dispatch_dynamic": "AOT autograd (torch.compile's training path) failed: check the fake implementation "
    "and the backward (register_autograd)",
}


def _opcheck_verdict(label: str, ran: dict | None, operator: Check) -> Check:
    if ran is None:
        if operator.details.get("code") in (Code.NO_OPERATOR, Code.WRONG_SCHEMA):
            return Check(
                CheckName.OPCHECK,
                SKIPPED,
                "not run: the operator is missing or has another schema (see operator)",
                {"code": Code.NO_OPERATOR},
            )
        return Check(
            CheckName.OPCHECK,
            FAILED,
            f"{label}: the opcheck evidence did not come back from your run",
            {"code": Code.NO_EVIDENCE},
        )
    if "error" in ran:
        return Check(
            CheckName.OPCHECK,
            FAILED,
            f"{label}: torch.library.opcheck could not run your operator: {ran['error']}",
            {"code": Code.OPCHECK_FAILED},
        )
    failed = {test: outcome for test, outcome in (ran.get("tests") or {}).items() if outcome != "SUCCESS"}
    if failed or not ran.get("tests"):
        test, outcome = next(iter(failed.items()), ("opcheck", "no test ran"))
        hint = OPCHECK_HINTS.get(test, "")
        return Check(
            CheckName.OPCHECK,
            FAILED,
            f"{label}: torch.library.opcheck: {test} failed: {outcome}" + (f"\n{hint}" if hint else ""),
            {"code": Code.OPCHECK_FAILED, "tests": sorted(failed)},
        )
    return Check(CheckName.OPCHECK, PASSED, f"torch.library.opcheck: {', '.join(ran['tests'])} passed")


def _compile_verdict(spec, variant, label: str, ran: dict, refs: list, tol) -> Check:
    if "skipped" in ran:
        return Check(CheckName.TORCH_COMPILE, SKIPPED, ran["skipped"], {"code": Code.NO_COMPILER})
    if "outputs" not in ran:
        return Check(
            CheckName.TORCH_COMPILE,
            FAILED,
            f"{label}: torch.compile(`{variant.entry}`, fullgraph=True) failed: "
            f"{ran.get('error', 'no evidence came back')}\nA graph break (.item(), print, Python branching on a "
            "tensor's values) or a missing fake implementation stops a full-graph trace",
            {"code": Code.COMPILE_FAILED},
        )
    from grader.checks.checking import compare

    for i, (spec_out, ref) in enumerate(zip(spec.outputs, refs)):
        got = _load(ran["outputs"][i] if i < len(ran["outputs"]) else None, ref)
        comparison = compare(spec_out.name, got, ref, tol, f"{label}, compiled") if got is not None else None
        if comparison is None or not comparison.ok:
            return Check(
                CheckName.TORCH_COMPILE,
                FAILED,
                (
                    comparison.message
                    if comparison
                    else f"{label}: the compiled output {spec_out.name} did not come back"
                )
                + ": the compiled call must give eager's answer",
                {"code": Code.COMPILED_MISMATCH},
            )
    return Check(
        CheckName.TORCH_COMPILE,
        PASSED,
        f"torch.compile(`{variant.entry}`, fullgraph=True, backend {ran.get('backend')}) "
        "traced without a graph break and matched the reference"
        + (
            f" (inductor itself failed on this machine, not your operator: {ran['inductor_failed'][:200]})"
            if ran.get("inductor_failed")
            else ""
        ),
    )


def _gradient_verdict(spec, variant, case, label: str, ran: dict, ref_grads: dict, tol) -> Check:
    """The gradients check: the first of its failures, in the order the learner should fix them, or a pass."""
    failed = (
        _no_backward(spec, variant, label, ran)
        or _torch_in_backward(spec, label, ran)
        or _wrong_gradient(spec, variant, case, label, ran, ref_grads, tol)
        or _gradcheck_failed(label, ran)
    )
    if failed is not None:
        return failed
    return Check(
        CheckName.GRADIENTS,
        PASSED,
        f"gradients of {', '.join(ref_grads)} matched the float64 reference"
        + (" and torch.autograd.gradcheck (float64)" if ran.get("gradcheck") else ""),
    )


def _no_backward(spec, variant, label: str, ran: dict) -> Check | None:
    if "grads" in ran:
        return None
    how = (
        "register it with <op>.register_autograd(backward, setup_context=setup_context)"
        if spec.checks.schema
        else "your autograd.Function's backward must return one gradient per forward argument, in their order, "
        "None for those that are not tensors (a float, an int)"
    )
    return Check(
        CheckName.GRADIENTS,
        FAILED,
        f"{label}: backward through `{variant.entry}` failed: {ran.get('error', 'no evidence')}\n{how}",
        {"code": Code.NO_BACKWARD},
    )


def _torch_in_backward(spec, label: str, ran: dict) -> Check | None:
    from grader.checks import integrity

    bad_ops = integrity.forbidden_ops(set(ran.get("ops", []))) if spec.checks.kernel_backward else []
    if not bad_ops:
        return None
    return Check(
        CheckName.GRADIENTS,
        FAILED,
        f"{label}: your backward called torch's {', '.join(bad_ops[:5])}: compute the "
        "gradients in your own backward kernel (launch it from backward; allowed there: allocation, views, "
        "copies, ctx.saved_tensors)",
        {"code": Code.TORCH_COMPUTE_BACKWARD, "ops": bad_ops},
    )


def _wrong_gradient(spec, variant, case, label: str, ran: dict, ref_grads: dict, tol) -> Check | None:
    """The first gradient missing or outside its tolerance (summed_tolerance) against the float64 reference."""
    from grader.checks.checking import compare

    positions = {a.name: str(i) for i, a in enumerate(variant.args)}
    for name, ref in ref_grads.items():
        got = _load(ran["grads"].get(positions.get(name, "")), ref)
        if got is None:
            return Check(
                CheckName.GRADIENTS,
                FAILED,
                f"{label}: your backward returned no gradient for {name}: return one per "
                "input, in the operator's argument order",
                {"code": Code.GRADIENT_MISSING},
            )
        comparison = compare(f"the gradient of {name}", got, ref, summed_tolerance(tol, ref, spec, case), label)
        if not comparison.ok:
            return Check(
                CheckName.GRADIENTS,
                FAILED,
                comparison.message + ": check your backward formula (and that a broadcast "
                "input's gradient is summed over the dimensions it was broadcast along)",
                {"code": Code.GRADIENT_MISMATCH},
            )
    return None


def _gradcheck_failed(label: str, ran: dict) -> Check | None:
    checked = ran.get("gradcheck")
    if checked is None or checked.get("passed"):
        return None
    return Check(
        CheckName.GRADIENTS,
        FAILED,
        f"{label}: torch.autograd.gradcheck on float64 copies failed: {checked.get('error')}"
        "\nyour kernels must take float64 and compute in it (tl.float32 casts lose the precision gradcheck "
        "needs), and the backward must be the forward's exact derivative",
        {"code": Code.GRADCHECK_FAILED},
    )


def summed_tolerance(tol, grad, spec, case):
    """A gradient's tolerance. A backward formula cancels terms (gelu's derivative near its minimum), so its
    error follows the gradient's scale, not each element's: atol grows by rtol x the largest |gradient|. A
    gradient summing n output elements into each of its elements (a broadcast input's) gets the accumulate
    rule's rtol, max(rtol, 2 sqrt(n) u), and atol x sqrt(n) (n terms of absolute error)."""
    from grader.checks.inputs import shape_of
    from grader.core.spec import UNIT_ROUNDOFF, Tolerance

    n = max(1.0, math.prod(shape_of(spec.outputs[0], case)) / max(1, grad.numel()))
    largest = float(grad.abs().max()) if grad.numel() else 0.0
    return Tolerance(
        tol.atol * math.sqrt(n) + tol.rtol * largest,
        max(tol.rtol, 2 * math.sqrt(n) * UNIT_ROUNDOFF.get(case.dtype, 2.0**-24)),
    )


def _load(meta: dict | None, like):
    """A tensor the child wrote, shaped like the reference's (None when it did not come back whole)."""
    from pathlib import Path

    from grader.checks.inputs import load_tensor

    try:
        tensor = load_tensor(meta, expected_numel=like.numel())
    except (TypeError, KeyError, ValueError, OSError):
        return None
    Path(meta["path"]).unlink(missing_ok=True)
    return tensor.reshape(like.shape)


def verdicts(spec, judged: list[dict[str, Check]]) -> list[Check]:
    """One check per name over the trials that ran them: the first that did not pass, else passed on all."""
    names = spec.checks.names
    out = []
    for name in names:
        seen = [trial[name] for trial in judged if name in trial]
        bad = next((c for c in seen if c.status != PASSED), None)
        if bad is None and seen:
            bad = Check(name, PASSED, f"{seen[0].message} ({len(seen)} case(s))")
        out.append(bad or Check(name, SKIPPED, "no case ran the operator checks here", {"code": Code.NOT_RUN}))
    return out
