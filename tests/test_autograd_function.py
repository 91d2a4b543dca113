"""autograd_function (days 66-69): forward and backward Triton kernels wrapped in a torch.autograd.Function,
and the grader's `[checks] autograd_function` (grader/checks/op_checks.py: the gradients check for a plain
autograd.Function, torch compute in the backward refused, torch.autograd.gradcheck in float64 on tiny cases).

On the CPU: the solution passes a real grade (kernels under the Triton interpreter); the stub fails; the two
mistakes other tests here read (torch in the backward, no None for T) are the solution with a line changed, run
in this process under the interpreter and judged by op_checks' own parent-side functions on the spec's cases.
The README's classic mistakes are the spec's [[mistakes]], graded for real (on the CPU and on a GPU) by
tests/test_exercise_mistakes.py. On a GPU: the solution's and the stub's grades, and the solution's forward +
backward beside torch's (`python -m pytest -m gpu -s tests/test_autograd_function.py`)."""

from __future__ import annotations

import sys
import types

import pytest
from conftest import ROOT
from interpreted import interpreter_on

from grader.checks import op_checks
from grader.checks.checking import load_reference, reference_outputs
from grader.checks.inputs import generate, place, save_tensor
from grader.core.discovery import resolve
from grader.core.spec import SpecError, load_spec
from grader.run.grade import grade

pytestmark = pytest.mark.solutions

SOLUTION = ROOT / "solutions" / "autograd_function" / "autograd_function.py"
SPEC = load_spec(ROOT / "exercises" / "autograd_function")
SEED = 7

# Each mistake: (text of the solution, what a learner wrote instead) -> the check's code it must fail with
MISTAKES = {
    # no None for the float argument: one gradient for two forward arguments
    "no_none_for_float": ([("return dx, None  #", "return dx  #")], "no_backward"),
    # the backward computed by torch, not by the learner's kernel
    "torch_backward": (
        [
            (
                "        _launch(softmax_backward_kernel, softmax_backward_long_kernel, y, (y, dy, dx), y.shape[1], "
                "1.0 / ctx.T)\n",
                "        dx = y * (dy - (y * dy).sum(dim=1, keepdim=True)) / ctx.T\n",
            )
        ],
        "torch_compute_backward",
    ),
}


def mistake_text(name: str) -> str:
    text = SOLUTION.read_text()
    for old, new in MISTAKES[name][0]:
        assert text.count(old) == 1, f"{name}: {old!r} is not in the solution once: update MISTAKES"
        text = text.replace(old, new)
    return text


def load_as(name: str, tmp_path, text: str):
    """The file as a module of its own, its kernels interpreted."""
    path = tmp_path / f"autograd_function_{name}.py"
    path.write_text(text)
    module = types.ModuleType(f"autograd_function_{name}")
    module.__file__ = str(path)
    sys.modules[module.__name__] = module  # Triton reads a kernel's source through its module
    with interpreter_on():
        exec(compile(text, str(path), "exec"), module.__dict__)
    return module


def case_with(M, N):
    return next(c for c in SPEC.cases if c.params["M"] == M and c.params["N"] == N and not c.inputs)


def judged(module, case, tmp_path):
    """op_checks' verdict on the evidence the child would gather for this case (gradients, gradcheck)."""
    reference = load_reference(SPEC.folder / "reference.py")
    inputs = generate(SPEC, case, SEED)
    grads = op_checks.draw_grad_outputs(SPEC, case, SEED)
    refs = reference_outputs(reference, SPEC, inputs, case.params)
    ref_grads = op_checks.reference_gradients(reference, SPEC, inputs, grads, case.params)
    args = [place(inputs["x"], None, "cpu"), case.params["T"]]
    save = lambda name, t: save_tensor(t, tmp_path / f"{name}.bin")  # noqa: E731
    with interpreter_on():
        evidence = op_checks.gather(SPEC.checks, module.softmax_temperature, args, grads, save, {})
    verdicts = op_checks.judge_trial(
        SPEC,
        SPEC.variants["triton"],
        case,
        case.label(),
        {"op_checks": evidence},
        refs,
        ref_grads,
        SPEC.tolerance_of(case),
    )
    return verdicts["gradients"], evidence


# --- the whole pipeline: solution and stub ---------------------------------------------------------


@pytest.mark.slow
def test_the_solution_passes_numerics_integrity_and_gradients_with_gradcheck_on_the_cpu():
    result = grade(resolve(("autograd_function",)), source="solutions", seed=SEED, record=False)
    checks = {}
    for check in result.checks:
        checks.setdefault(check.name, check)
    for name in ("numerics", "integrity", "gradients"):
        assert checks[name].status == "passed", (name, checks[name].message)
    assert "gradcheck" in checks["gradients"].message
    assert not {"operator", "opcheck", "torch_compile"} & set(checks)  # a plain Function: no operator checks


@pytest.mark.slow
def test_the_stub_imports_and_fails_numerics():
    result = grade(resolve(("autograd_function",)), source="stubs", seed=SEED, record=False)
    check = next(c for c in result.checks if c.status in ("failed", "error"))
    assert check.name == "numerics" and check.details["code"] == "not_implemented", check.message


# --- each classic mistake fails its check ----------------------------------------------------------


@pytest.fixture(scope="module")
def solution(tmp_path_factory):
    return load_as("solution", tmp_path_factory.mktemp("solution"), SOLUTION.read_text())


def test_the_solutions_backward_passes_on_the_tiny_and_the_long_row_cases(solution, tmp_path):
    for M, N in ((3, 5), (5, 9001)):
        verdict, evidence = judged(solution, case_with(M, N), tmp_path)
        assert verdict.status == "passed", verdict.message
        assert ("gradcheck" in evidence["gradients"]) == (M * N <= op_checks.GRADCHECK_ELEMENTS)


@pytest.mark.parametrize("name", sorted(MISTAKES))
def test_each_mistake_fails_the_gradients_check_with_its_code(name, tmp_path):
    module = load_as(name, tmp_path, mistake_text(name))
    verdict, _ = judged(module, case_with(3, 5), tmp_path)  # T = 0.5, float32, gradcheck-sized
    assert verdict.status == "failed" and verdict.details["code"] == MISTAKES[name][1], verdict.message


def test_torch_in_the_backward_is_named_with_what_to_do(tmp_path):
    verdict, evidence = judged(
        load_as("torch_backward", tmp_path, mistake_text("torch_backward")), case_with(3, 5), tmp_path
    )
    assert "aten::mul.Tensor" in evidence["gradients"]["ops"]
    assert "your backward called torch's" in verdict.message and "backward kernel" in verdict.message


def test_a_wrong_count_of_gradients_says_one_per_argument_and_none_for_floats(tmp_path):
    verdict, _ = judged(load_as("no_none", tmp_path, mistake_text("no_none_for_float")), case_with(3, 5), tmp_path)
    assert "None for those that are not tensors" in verdict.message


# --- the spec ----------------------------------------------------------------------------------------


def test_the_spec_asks_for_a_plain_functions_gradients_with_gradcheck_and_kernel_backward():
    checks = SPEC.checks
    assert checks.schema is None and checks.autograd and checks.gradcheck and checks.kernel_backward
    assert checks.names == ("gradients",)
    marked = [c for c in SPEC.cases if c.op_checks and not c.gpu_only]
    assert {c.dtype for c in marked} == {"float32", "float16"}
    assert any(op_checks._small(SPEC, c) for c in marked)
    assert all("T" in c.params for c in SPEC.cases + SPEC.performance.cases)


def test_gradcheck_without_a_tiny_marked_case_is_refused(tmp_path):
    folder = tmp_path / "autograd_function"
    folder.mkdir()
    (folder / "reference.py").write_text((SPEC.folder / "reference.py").read_text())
    text = (SPEC.folder / "spec.toml").read_text()
    assert text.count("M = 3\nN = 5\n") == 1 and text.count("M = 1\nN = 1 ") == 1, "update the edits below"
    (folder / "spec.toml").write_text(
        text.replace("M = 3\nN = 5\n", "M = 3\nN = 500\n").replace("M = 1\nN = 1 ", "M = 1\nN = 1000 ")
    )  # no marked case is tiny
    with pytest.raises(SpecError, match="gradcheck = true"):
        load_spec(folder)
    (folder / "spec.toml").write_text(text.replace("autograd_function = true", "autograd_function = 1"))
    with pytest.raises(SpecError, match="autograd_function = true"):
        load_spec(folder)


# --- GPU: the solution's and the stub's grades, forward + backward beside torch's ---------------------


@pytest.mark.gpu
def test_the_solution_passes_on_a_gpu_and_the_stub_fails():
    result = grade(resolve(("autograd_function",)), source="solutions", seed=SEED, record=False)
    assert result.status == "passed", [(c.name, c.status, c.message) for c in result.checks]
    last = result.timings[-1]
    print(
        f"\nautograd_function (forward) graded at {last.case}: you {last.learner_rate:.0f} {last.unit}, "
        f"torch {last.torch_rate:.0f} {last.unit}"
    )
    stub = grade(resolve(("autograd_function",)), source="stubs", seed=SEED, record=False)
    assert next(c for c in stub.checks if c.status == "failed").name == "numerics"


@pytest.mark.gpu
def test_forward_and_backward_beside_torch_near_copy_bandwidth(tmp_path):
    import torch

    from grader.child import timing

    path = tmp_path / "autograd_function_gpu.py"
    path.write_text(SOLUTION.read_text())
    module = types.ModuleType("autograd_function_gpu")
    module.__file__ = str(path)
    sys.modules[module.__name__] = module
    exec(compile(path.read_text(), str(path), "exec"), module.__dict__)
    M, N, T = 16384, 8192, 0.9
    x = torch.randn(M, N, device="cuda", requires_grad=True)
    dy = torch.randn(M, N, device="cuda")

    def step(f):
        return lambda: torch.autograd.grad(f(x, T), x, dy)[0]

    mine, theirs = step(module.softmax_temperature), step(lambda a, t: torch.softmax(a / t, dim=-1))
    assert torch.allclose(mine(), theirs(), atol=1e-6, rtol=1e-4)
    measured = timing.time_alternating({"solution": mine, "torch": theirs})
    copy_gbps = timing.measure_copy_bandwidth()
    moved = 5 * M * N * 4  # forward: read x, write y; backward: read y and dy, write dx
    rates = {name: moved / (m["median_ms"] / 1000) / 1e9 for name, m in measured.items()}
    print(
        f"\nautograd_function forward+backward {M}x{N} float32 on {torch.cuda.get_device_name()}: "
        f"you {rates['solution']:.0f} GB/s, torch {rates['torch']:.0f} GB/s (copy {copy_gbps:.0f} GB/s)"
    )
    assert rates["solution"] >= 0.85 * copy_gbps and rates["solution"] > rates["torch"]
