"""custom_op (day 48): a Triton kernel registered with torch.library.custom_op, and the grader's operator
checks (grader/checks/op_checks.py: operator, opcheck, torch_compile, gradients).

On the CPU: the solution passes every check in a real grade (its kernel under the Triton interpreter,
torch.compile's inductor around the operator); the stub fails; each classic mistake of the day fails the
check built for it. The mistakes are the solution with a few lines changed; they run in this process under
the interpreter, each registered under a namespace of its own (two files cannot both own
kcourse::scaled_residual_gelu), and are judged by op_checks' own parent-side functions; their full grades (on
the CPU and on a GPU) are the spec's [[mistakes]], graded by tests/test_exercise_mistakes.py. On a GPU: the
solution's grade and its speed beside the eager composite and copy bandwidth
(`python -m pytest -m gpu -s tests/test_custom_op.py`)."""

from __future__ import annotations

import sys
import types

import pytest
from conftest import ROOT
from interpreted import interpreter_on

from grader.checks import integrity, op_checks
from grader.checks.checking import compare, load_reference, reference_outputs
from grader.checks.inputs import generate, place, save_tensor
from grader.child.loading import _exec_renamed
from grader.core.discovery import resolve
from grader.core.spec import SpecError, load_spec
from grader.run.grade import grade

pytestmark = pytest.mark.solutions

SOLUTION = ROOT / "solutions" / "custom_op" / "custom_op.py"
SPEC = load_spec(ROOT / "exercises" / "custom_op")
SEED = 5

# Each mistake: (line of the solution, what a learner wrote instead), applied in order
MISTAKES = {
    # no fake implementation: torch.compile has nothing to trace the operator with
    "no_fake": [("@scaled_residual_gelu_op.register_fake\n", "")],
    # a fake that always says float32: wrong for the float16 case
    "fake_float32": [
        (
            "return torch.empty_like(x, memory_format=torch.contiguous_format)",
            "return torch.empty_like(x, dtype=torch.float32, memory_format=torch.contiguous_format)",
        )
    ],
    # h written back into x as scratch, while mutates_args=() promises no input is written
    "mutates_input": [
        (
            "    h = x + scale * r\n",
            "    h = x + scale * r\n    tl.store(x_ptr + offsets, h.to(x_ptr.dtype.element_ty), mask=mask)\n",
        )
    ],
    # scale as a Python float: .item() in the wrapper (a graph break, a GPU sync, no gradient for scale)
    "scale_item": [
        ("scale = tl.load(scale_ptr).to(tl.float32)", "scale = scale_ptr"),
        (
            "def scaled_residual_gelu_op(x: torch.Tensor, residual: torch.Tensor, scale: torch.Tensor)",
            "def scaled_residual_gelu_op(x: torch.Tensor, residual: torch.Tensor, scale: float)",
        ),
        (
            "torch.ops.kcourse.scaled_residual_gelu(x, residual, scale)",
            "torch.ops.kcourse.scaled_residual_gelu(x, residual, scale.item())",
        ),
    ],
    # the chain rule's factor forgotten: d out / d residual is d * scale, not d
    "backward_drops_scale": [("(dh * scale.float()).to(residual.dtype)", "dh.to(residual.dtype)")],
    # no backward registered
    "no_backward": [("scaled_residual_gelu_op.register_autograd(_backward, setup_context=_setup_context)", "")],
    # torch does the work inside the operator (the kernel's output thrown away)
    "calls_torch": [
        ("    return out\n", '    return torch.nn.functional.gelu(x + scale * residual, approximate="tanh")\n')
    ],
    # tanh through exp: inf / inf = NaN once e^2u overflows
    "tanh_through_exp": [
        ("(h * tl.sigmoid(2.0 * u))", "(0.5 * h * (1 + (tl.exp(2.0 * u) - 1) / (tl.exp(2.0 * u) + 1)))")
    ],
}


def mistake_text(name: str) -> str:
    text = SOLUTION.read_text()
    for old, new in MISTAKES[name]:
        assert text.count(old) == 1, f"{name}: {old!r} is not in the solution once: update MISTAKES"
        text = text.replace(old, new)
    return text


def load_as(name: str, tmp_path, text: str):
    """The file's module with its operator under the namespace kcourse_<name>, its kernels interpreted."""
    path = tmp_path / "custom_op.py"
    path.write_text(text)
    namespace = f"kcourse_{name}"
    module = types.ModuleType(f"custom_op_{name}")
    module.__file__ = str(path)
    sys.modules[module.__name__] = module  # Triton reads a kernel's source through its module
    with interpreter_on():
        _exec_renamed(module, path, {"kcourse::": f"{namespace}::", "torch.ops.kcourse.": f"torch.ops.{namespace}."})
    checks = op_checks.OpChecks(SPEC.checks.schema.replace("kcourse::", f"{namespace}::"), autograd=True)
    return module, checks


def case_named(M, N, dtype="float32"):
    return next(
        c
        for c in SPEC.cases
        if c.params == {"M": M, "N": N, **({"dtype": dtype} if dtype != "float32" else {})} and not c.inputs
    )


def trial(case):
    """A trial as a grade draws it: inputs, their reference, the gradient fed backward and its reference."""
    reference = load_reference(SPEC.folder / "reference.py")
    inputs = generate(SPEC, case, SEED)
    grads = op_checks.draw_grad_outputs(SPEC, case, SEED)
    return (
        inputs,
        reference_outputs(reference, SPEC, inputs, case.params),
        grads,
        op_checks.reference_gradients(reference, SPEC, inputs, grads, case.params),
    )


def judged(module, checks, case, tmp_path, parts):
    """op_checks' verdicts for the evidence `parts` gather (the rest is left out: those verdicts are not asked)."""
    inputs, refs, grads, ref_grads = trial(case)
    args = [place(inputs[a.name], None, "cpu") for a in SPEC.variants["triton"].args]
    entry = module.scaled_residual_gelu
    save = lambda name, t: save_tensor(t, tmp_path / f"{name}.bin")  # noqa: E731
    ran = {
        "operator": lambda: op_checks._registration(checks),
        "opcheck": lambda: op_checks._opcheck(checks, op_checks._copies(args, True)),
        "torch_compile": lambda: op_checks._compiled(entry, op_checks._copies(args), save, {}),
        "gradients": lambda: op_checks._gradients(entry, op_checks._copies(args, True), grads, save),
    }
    with interpreter_on():
        evidence = {part: ran[part]() for part in parts}
    spec = type(SPEC)(**{**SPEC.__dict__, "checks": checks})
    event = {"op_checks": evidence, "ops": [checks.qualname]}
    return op_checks.judge_trial(
        spec, spec.variants["triton"], case, case.label(), event, refs, ref_grads, SPEC.tolerance_of(case)
    )


# --- the whole pipeline: solution and stub ---------------------------------------------------------


@pytest.mark.slow
def test_the_solution_passes_numerics_and_every_operator_check_on_the_cpu():
    result = grade(resolve(("custom_op",)), source="solutions", seed=SEED, record=False)
    checks = {}
    for check in result.checks:  # the first of each name (a kit file changed by a neighbour adds a second integrity)
        checks.setdefault(check.name, check)
    for name in ("numerics", "integrity", "operator", "opcheck", "torch_compile", "gradients"):
        assert checks[name].status == "passed", (name, checks[name].message)
    assert "(2 case(s))" in checks["opcheck"].message and "test_faketensor" in checks["opcheck"].message
    assert "fullgraph=True" in checks["torch_compile"].message
    assert "speed" not in checks or checks["speed"].status == "skipped"  # no GPU: never a passed speed


@pytest.mark.slow
def test_the_stub_imports_and_fails_numerics():
    result = grade(resolve(("custom_op",)), source="stubs", seed=SEED, record=False)
    check = next(c for c in result.checks if c.status in ("failed", "error"))
    assert check.name == "numerics" and check.details["code"] == "not_implemented", check.message


# --- the day's classic mistakes, each failing the check built for it ------------------------------


def test_no_fake_implementation_fails_opcheck_and_torch_compile(tmp_path):
    module, checks = load_as("no_fake", tmp_path, mistake_text("no_fake"))
    verdicts = judged(module, checks, case_named(37, 781), tmp_path, ["operator", "opcheck", "torch_compile"])
    assert verdicts["operator"].status == "passed", verdicts["operator"].message
    assert verdicts["opcheck"].status == "failed" and "test_faketensor" in verdicts["opcheck"].message
    assert "register_fake" in verdicts["opcheck"].message
    assert verdicts["torch_compile"].status == "failed" and "fake" in verdicts["torch_compile"].message


@pytest.mark.slow
def test_a_fake_with_the_wrong_dtype_fails_opcheck_on_the_float16_case(tmp_path):
    module, checks = load_as("fake_float32", tmp_path, mistake_text("fake_float32"))
    verdicts = judged(module, checks, case_named(64, 1025, "float16"), tmp_path, ["operator", "opcheck"])
    assert verdicts["opcheck"].status == "failed", verdicts["opcheck"].message
    assert "test_faketensor" in verdicts["opcheck"].message and "float32" in verdicts["opcheck"].message


def test_writing_an_input_under_mutates_args_empty_fails_opchecks_schema_test(tmp_path):
    module, checks = load_as("mutates_input", tmp_path, mistake_text("mutates_input"))
    verdicts = judged(module, checks, case_named(37, 781), tmp_path, ["operator", "opcheck"])
    assert verdicts["opcheck"].status == "failed" and "test_schema" in verdicts["opcheck"].message
    assert "mutated" in verdicts["opcheck"].message and "mutates_args" in verdicts["opcheck"].message


def test_a_float_scale_through_item_fails_the_schema_and_torch_compile_fullgraph(tmp_path):
    module, checks = load_as("scale_item", tmp_path, mistake_text("scale_item"))
    verdicts = judged(module, checks, case_named(37, 781), tmp_path, ["operator", "torch_compile"])
    assert verdicts["operator"].status == "failed" and verdicts["operator"].details["code"] == "wrong_schema"
    assert "float scale" in verdicts["operator"].message
    assert verdicts["opcheck"].status == "skipped"  # not run on an operator of another schema
    assert verdicts["torch_compile"].status == "failed", verdicts["torch_compile"].message


def test_a_backward_missing_the_chain_rules_factor_fails_the_gradients(tmp_path):
    module, checks = load_as("backward_drops_scale", tmp_path, mistake_text("backward_drops_scale"))
    verdicts = judged(module, checks, case_named(37, 781), tmp_path, ["gradients"])
    assert verdicts["gradients"].status == "failed" and verdicts["gradients"].details["code"] == "gradient_mismatch"
    assert "gradient of residual" in verdicts["gradients"].message


def test_no_backward_fails_the_gradients_with_what_to_register(tmp_path):
    module, checks = load_as("no_backward", tmp_path, mistake_text("no_backward"))
    verdicts = judged(module, checks, case_named(37, 781), tmp_path, ["gradients"])
    assert verdicts["gradients"].status == "failed" and "register_autograd" in verdicts["gradients"].message


def test_torch_called_inside_the_operator_is_seen_by_the_integrity_watch(tmp_path):
    """A dispatch mode sees only the custom operator itself: the recorder runs its implementation watched."""
    module, _ = load_as("calls_torch", tmp_path, mistake_text("calls_torch"))
    inputs = generate(SPEC, case_named(3, 5), SEED)
    with interpreter_on():
        _, names = integrity.ops_called(lambda: module.scaled_residual_gelu(*inputs.values()))
    assert "kcourse_calls_torch::scaled_residual_gelu" in names
    assert "aten::gelu" in integrity.forbidden_ops(names)


def test_the_solutions_operator_calls_no_torch_compute(tmp_path):
    module, _ = load_as("clean", tmp_path, SOLUTION.read_text())
    inputs = generate(SPEC, case_named(3, 5), SEED)
    with interpreter_on():
        _, names = integrity.ops_called(lambda: module.scaled_residual_gelu(*inputs.values()))
    assert "kcourse_clean::scaled_residual_gelu" in names and integrity.forbidden_ops(names) == []


def test_tanh_through_exp_gives_nan_on_the_large_magnitude_case(tmp_path):
    module, _ = load_as("tanh_exp", tmp_path, mistake_text("tanh_through_exp"))
    case = next(c for c in SPEC.cases if c.inputs.get("x", {}).get("scale") == 20.0)
    inputs = generate(SPEC, case, SEED)
    with interpreter_on():
        got = module.scaled_residual_gelu(*inputs.values())
    ref = reference_outputs(load_reference(SPEC.folder / "reference.py"), SPEC, inputs, case.params)[0]
    comparison = compare("out", got, ref, SPEC.tolerance_of(case), case.label())
    assert not comparison.ok and comparison.details["nan"] > 0, comparison.message


# --- the spec's [checks] ---------------------------------------------------------------------------


def test_the_spec_names_the_operator_and_marks_cases_that_run_on_the_cpu():
    assert SPEC.checks.qualname == "kcourse::scaled_residual_gelu" and SPEC.checks.autograd
    marked = [c for c in SPEC.cases if c.op_checks]
    assert {c.dtype for c in marked} == {"float32", "float16"} and not any(c.gpu_only for c in marked)
    assert SPEC.variants["triton"].returns_outputs


def test_a_checks_table_without_a_schema_or_marked_cases_is_refused(tmp_path):
    text = (SPEC.folder / "spec.toml").read_text()
    folder = tmp_path / "custom_op"
    folder.mkdir()
    (folder / "reference.py").write_text((SPEC.folder / "reference.py").read_text())
    (folder / "spec.toml").write_text(text.replace('custom_op = "kcourse::', 'custom_op = "kcourse.'))
    with pytest.raises(SpecError, match="custom_op ="):
        load_spec(folder)
    (folder / "spec.toml").write_text(text.replace("op_checks = true", "op_checks = false"))
    with pytest.raises(SpecError, match="op_checks = true"):
        load_spec(folder)


def test_the_backend_is_skipped_with_why_where_no_cpp_compiler_is(monkeypatch):
    monkeypatch.setattr(op_checks.shutil, "which", lambda name: None)
    backend, why = op_checks.compile_backend("cpu")
    assert backend is None and "C++ compiler" in why and "GPU" in why
    assert op_checks.compile_backend("cuda")[0] == "inductor"
    verdict = op_checks._compile_verdict(SPEC, SPEC.variants["triton"], "label", {"skipped": why}, [], None)
    assert verdict.status == "skipped" and verdict.message == why


# --- GPU: the grade, the speed beside the eager composite ------------------------------------------


def load_gpu(name: str, tmp_path, text: str):
    """The file's module compiled for the GPU (no interpreter), its operator under kcourse_<name>."""
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    module = types.ModuleType(f"custom_op_gpu_{name}")
    module.__file__ = str(path)
    sys.modules[module.__name__] = module
    _exec_renamed(module, path, {"kcourse::": f"kcourse_{name}::", "torch.ops.kcourse.": f"torch.ops.kcourse_{name}."})
    return module


@pytest.mark.gpu
def test_the_ladder_and_the_solution_beat_the_eager_composite_near_copy_bandwidth(tmp_path):
    import torch

    from grader.child import timing

    M, N = 8192, 8192
    x, r = torch.randn(M, N, device="cuda"), torch.randn(M, N, device="cuda")
    scale = torch.rand(1, device="cuda") + 0.5
    want = torch.nn.functional.gelu(x + scale * r, approximate="tanh")
    text = SOLUTION.read_text()
    step2 = text.replace("block = 4096", "block = 1024").replace("BLOCK=block, num_warps=8", "BLOCK=block, num_warps=4")
    assert step2.count("num_warps=4") == 1 and "block = 1024" in step2, "update step 2's edit of the solution"
    solution, small = load_gpu("gpu_solution", tmp_path, text), load_gpu("gpu_step2", tmp_path, step2)
    compiled = torch.compile(solution.scaled_residual_gelu, fullgraph=True)
    contestants = {
        "1. eager composite (the anchor)": lambda: torch.nn.functional.gelu(x + scale * r, approximate="tanh"),
        "2. fused, BLOCK 1024, 4 warps": lambda: small.scaled_residual_gelu(x, r, scale),
        "3. solution (BLOCK 4096, 8 warps)": lambda: solution.scaled_residual_gelu(x, r, scale),
        "3. solution under torch.compile": lambda: compiled(x, r, scale),
    }
    for name, run in contestants.items():
        assert torch.allclose(run(), want, atol=1e-5, rtol=1e-5), name
    measured = timing.time_alternating(contestants)
    copy_gbps = timing.measure_copy_bandwidth()
    rates = {name: 3 * M * N * 4 / (m["median_ms"] / 1000) / 1e9 for name, m in measured.items()}
    print(f"\ncustom_op {M}x{N} float32 on {torch.cuda.get_device_name()} (copy {copy_gbps:.0f} GB/s):")
    for name, rate in rates.items():
        print(
            f"  {name:40s} {measured[name]['median_ms'] * 1000:8.1f} us  {rate:6.0f} GB/s  "
            f"{100 * rate / copy_gbps:4.0f}% of roofline"
        )
    assert rates["3. solution (BLOCK 4096, 8 warps)"] >= 0.85 * copy_gbps
    assert rates["3. solution (BLOCK 4096, 8 warps)"] > rates["1. eager composite (the anchor)"]


@pytest.mark.gpu
def test_the_solution_passes_every_check_on_a_gpu_and_the_stub_fails():
    result = grade(resolve(("custom_op",)), source="solutions", seed=SEED, record=False)
    assert result.status == "passed", [(c.name, c.status, c.message) for c in result.checks]
    last = result.timings[-1]
    print(
        f"\ncustom_op graded at {last.case}: you {last.learner_rate:.0f} {last.unit}, torch {last.torch_rate:.0f} {last.unit}"
    )
    stub = grade(resolve(("custom_op",)), source="stubs", seed=SEED, record=False)
    assert next(c for c in stub.checks if c.status == "failed").name == "numerics"
