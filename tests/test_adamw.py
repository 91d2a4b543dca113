"""adamw (transformer-operator course, step 7): a fused AdamW step, p, m and v updated in place.

The spec declares p, m and v as inputs and outputs under the same names (the grader's in-place tensors:
tests/test_in_place_outputs.py). On the CPU the kernels are played in float32 torch, in the order a CUDA
kernel computes, against the spec's cases with the grader's own checks: honest kernels pass every case (the
bias corrections computed in double on the host, or in float32 with powf), each classic mistake fails the
case built for it (Adam with L2 instead of decoupled decay, no bias correction, eps inside the square root,
the default betas written in, m and v never stored), and the reference is torch.optim.AdamW's step. On a GPU
(`python -m pytest -m gpu -s tests/test_adamw.py`) the solution and the stub are graded and the ladder's
figures printed beside torch's fused and foreach AdamW; the mistakes edited into the solution are the spec's
[[mistakes]] (tests/test_exercise_mistakes.py)."""

from __future__ import annotations

import pytest
import torch
from conftest import ROOT, submission
from cuda_checks import build_without_spills, compile_fixtures
from simulated_kernels import first_failure

from grader.checks.checking import compare, load_reference, reference_outputs
from grader.checks.inputs import generate, in_place_names, make_outputs, place, written_outside
from grader.core.discovery import discover_exercises, resolve
from grader.run.grade import grade

SPEC = discover_exercises()["adamw"]
REFERENCE = load_reference(SPEC.folder / "reference.py")
SOLUTION = ROOT / "solutions" / "adamw" / "adamw.cu"
STUB = ROOT / "exercises" / "adamw" / "adamw.cu"
CPU_CASES = [c for c in SPEC.cases if not c.gpu_only]
HYPER = ("lr", "beta1", "beta2", "eps", "weight_decay", "step")


# --- kernels played in float32 on the CPU -------------------------------------------------------------


def f32(x: float) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float32)


def adamw_float32(
    t, params, *, host_double=True, l2=False, bias_correction=True, eps_inside=False, betas=None, store_moments=True
):
    """A float32 kernel's step, in place on t["p"], t["m"], t["v"], with one classic mistake switched on by name."""
    p, g, m, v = t["p"], t["g"], t["m"], t["v"]
    lr, beta1, beta2, eps, wd = (f32(params[k]) for k in HYPER[:5])
    if betas:  # the defaults written into the kernel instead of the arguments
        beta1, beta2 = f32(betas[0]), f32(betas[1])
    step = params["step"]
    if host_double:
        bc1, bc2 = f32(1 - float(beta1.double()) ** step), f32(1 - float(beta2.double()) ** step)
    else:  # powf in float32
        bc1, bc2 = 1 - beta1**step, 1 - beta2**step
    if not bias_correction:
        bc1 = bc2 = f32(1.0)
    grad = g + wd * p if l2 else g
    m_new = beta1 * m + (1 - beta1) * grad
    v_new = beta2 * v + (1 - beta2) * grad * grad
    m_hat, v_hat = m_new / bc1, v_new / bc2
    denom = torch.sqrt(v_hat + eps) if eps_inside else torch.sqrt(v_hat) + eps
    decay = 0.0 if l2 else wd
    p.copy_(p - lr * (m_hat / denom + decay * p))
    if store_moments:
        m.copy_(m_new)
        v.copy_(v_new)


def play(**mistake):
    return lambda t, params: adamw_float32(t, params, **mistake)


_TRIALS: dict = {}


def trial(case, number: int, seed: int = 5):
    """One trial's drawn inputs and float64 reference, as a grade draws them (kept for the next play)."""
    key = (case.label(), number)
    if key not in _TRIALS:
        values = generate(SPEC, case, seed + number, number)
        _TRIALS[key] = values, reference_outputs(REFERENCE, SPEC, values, case.params)
    return _TRIALS[key]


def verdict(case, run) -> str:
    """ "ok" or the first failing verdict code of `run` over the case's trials, judged as a grade judges it:
    p, m and v start as copies of the drawn inputs (make_outputs with the inputs), g stays an input."""
    for number in range(SPEC.trials_for(case)):
        values, refs = trial(case, number)
        inputs = {name: place(x, None, "cpu") for name, x in values.items()}
        outputs = make_outputs(SPEC, case, "cpu", inputs)
        run({**inputs, **outputs}, case.params)
        if any(written_outside(t) for t in outputs.values()):
            return "out_of_bounds"
        if not torch.equal(inputs["g"], values["g"]):
            return "input_modified"
        tol = SPEC.tolerance_of(case)
        for spec_out, ref in zip(SPEC.outputs, refs):
            result = compare(spec_out.name, outputs[spec_out.name], ref, tol, case.label())
            if not result.ok:
                return result.code
    return "ok"


def cases_with(**wanted):
    return [c for c in CPU_CASES if all(test(c) for test in wanted.values())]


HONEST = {  # name: (play, the cases it must pass)
    "bias corrections in double on the host": (play(), lambda c: True),
    "bias corrections with powf in float32": (play(host_double=False), lambda c: c.params["n"] < 10**5),
}
MISTAKES = {  # name: (play, the cases it must fail)
    "Adam with L2 (weight decay added to the gradient)": (play(l2=True), lambda c: c.params["weight_decay"] > 0),
    "no bias correction": (play(bias_correction=False), lambda c: c.params["step"] <= 2),
    "eps inside the square root": (play(eps_inside=True), lambda c: c.inputs.get("g", {}).get("scale", 1) < 1e-6),
    "betas 0.9 and 0.999 written in": (play(betas=(0.9, 0.999)), lambda c: c.params["beta1"] != 0.9),
    # (not the 1e-8 gradients' case: m and v of 1e-9 and 1e-19 are inside atol there; p is what it checks)
    "m and v never stored": (play(store_moments=False), lambda c: "scale" not in str(c.inputs)),
    "nothing written (the stub)": (lambda t, params: None, lambda c: True),
}


def test_p_m_and_v_are_updated_in_place_and_the_hyperparameters_reach_c_as_float32():
    assert in_place_names(SPEC) == ["p", "m", "v"]
    args = SPEC.variants["cuda"].args
    assert [a.name for a in args] == ["p", "g", "m", "v", "n", *HYPER]
    assert [a.ctype for a in args[5:]] == ["float32"] * 5 + ["int32"]  # weight_decay = 0.0 must not pass as an int


def test_cases_cover_ragged_sizes_the_first_and_a_late_step_and_weight_decay_on_and_off():
    assert {1, 7, 4_097, 1_000_003} <= {c.params["n"] for c in CPU_CASES}
    assert cases_with(first=lambda c: c.params["step"] == 1) and cases_with(late=lambda c: c.params["step"] >= 10**6)
    assert cases_with(off=lambda c: c.params["weight_decay"] == 0) and cases_with(
        on=lambda c: c.params["weight_decay"] > 0
    )


def test_the_reference_is_torch_optim_adamw_one_step_and_leaves_its_inputs_alone():
    # hyperparameters float32 holds exactly, so rounding them (as the reference does) changes nothing
    params = {"lr": 2**-7, "beta1": 0.75, "beta2": 0.9375, "eps": 2**-20, "weight_decay": 0.125, "step": 3}
    gen = torch.Generator().manual_seed(0)
    p, g, m = (torch.randn(257, dtype=torch.float64, generator=gen) for _ in range(3))
    v = torch.rand(257, dtype=torch.float64, generator=gen)
    before = [t.clone() for t in (p, g, m, v)]
    want = REFERENCE(p, g, m, v, **params)
    assert all(torch.equal(a, b) for a, b in zip(before, (p, g, m, v)))
    param = torch.nn.Parameter(p.clone())
    optimizer = torch.optim.AdamW(
        [param],
        lr=params["lr"],
        betas=(params["beta1"], params["beta2"]),
        eps=params["eps"],
        weight_decay=params["weight_decay"],
        foreach=False,
    )
    param.grad = g.clone()
    optimizer.step()  # creates the state; then set it to this case's p, m, v and step
    state = optimizer.state[param]
    param.data.copy_(p)
    state["exp_avg"].copy_(m)
    state["exp_avg_sq"].copy_(v)
    state["step"].fill_(params["step"] - 1)  # step() counts it up first
    optimizer.step()
    for got, expected in zip((param.data, state["exp_avg"], state["exp_avg_sq"]), want):
        assert torch.allclose(got, expected, rtol=1e-12, atol=1e-14)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(HONEST))
def test_honest_float32_kernels_pass_every_case(name):
    run, cases = HONEST[name]
    found = {c.label(): verdict(c, run) for c in CPU_CASES if cases(c)}
    assert set(found.values()) == {"ok"}, found


@pytest.mark.parametrize("name", list(MISTAKES))
def test_each_classic_mistake_fails_the_cases_built_for_it(name):
    run, built_for = MISTAKES[name]
    cases = [c for c in CPU_CASES if built_for(c) and c.params["n"] < 10**5]  # the small ones: enough, and quick
    assert cases
    found = {c.label(): verdict(c, run) for c in cases}
    assert set(found.values()) == {"mismatch"}, found


@pytest.mark.slow
@pytest.mark.nvcc
@pytest.mark.solutions
def test_the_stub_the_solution_and_the_ladder_fixture_build_for_sm_90():
    build_without_spills([STUB, SOLUTION])
    compile_fixtures(["adamw_one_per_thread.cu"])


# --- on a GPU --------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.solutions
def test_the_solution_passes_near_copy_bandwidth_and_prints_torch_fused_adamw_beside_it():
    from cuda_checks import figures

    result = grade(resolve(("adamw",)), source="solutions", seed=21, record=False)
    print("\nadamw solution: " + figures(result))
    assert result.status == "passed", result.verdict
    last = result.timings[-1]
    assert (last.roofline_pct or 0) >= 85
    assert last.torch_ms and last.learner_ms < last.torch_ms  # faster than torch's fused AdamW


@pytest.mark.gpu
def test_the_stub_leaves_p_unchanged_and_fails_numerics():
    result = grade(resolve(("adamw",)), source="stubs", seed=5, record=False, quick=True)
    check = first_failure(result)
    assert check.name == "numerics" and check.details.get("code") == "mismatch", result.verdict


@pytest.mark.gpu
@pytest.mark.solutions
@pytest.mark.slow  # a sweep (every ladder step timed): gpu and slow, out of the GPU tier
def test_ladder_figures_beside_torch_fused_and_foreach_adamw():
    """Step 1 (one thread per element) and the solution, with torch's fused and foreach AdamW, at n = 2^25."""
    from cuda_rows import cuda_caller, gbps

    from grader.child import timing

    n = 1 << 25
    params = {"n": n, "lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.01, "step": 10}
    hyper = {k: params[k] for k in HYPER[:5]}
    start = {name: torch.randn(n, device="cuda") for name in "pgm"}
    start["v"] = torch.rand(n, device="cuda")
    want = REFERENCE(*(start[k].double() for k in "pgmv"), **{k: params[k] for k in HYPER})
    versions = {"1. one thread per element": submission("adamw_one_per_thread.cu"), "3. solution": SOLUTION}
    contestants = {}
    for name, path in versions.items():
        caller, state = cuda_caller(SPEC, path), {k: t.clone() for k, t in start.items()}
        caller(state, params)
        for got, expected in zip((state["p"], state["m"], state["v"]), want):
            assert torch.allclose(got.double(), expected, atol=2e-6, rtol=1e-5), name
        contestants[name] = lambda c=caller, s=state: c(s, params)
    fused = [start[k].clone() for k in "pgmv"]
    steps = [torch.tensor(10.0, device="cuda")]
    contestants["torch fused AdamW"] = lambda: torch._fused_adamw_(
        [fused[0]], [fused[1]], [fused[2]], [fused[3]], [], steps, **hyper, amsgrad=False, maximize=False
    )
    param = torch.nn.Parameter(start["p"].clone())
    param.grad = start["g"].clone()
    foreach = torch.optim.AdamW([param], lr=1e-3, weight_decay=0.01, foreach=True)
    contestants["torch foreach AdamW"] = foreach.step
    measured = timing.time_alternating(contestants)
    copy_gbps = timing.measure_copy_bandwidth()
    print(f"\nadamw n=2^25 float32 on {torch.cuda.get_device_name()} (copy {copy_gbps:.0f} GB/s):")
    rates = {name: gbps(28 * n, m["median_ms"]) for name, m in measured.items()}
    for name, rate in rates.items():
        print(
            f"  {name:28s} {measured[name]['median_ms'] * 1000:8.1f} us  {rate:6.0f} GB/s  "
            f"{100 * rate / copy_gbps:4.0f}% of roofline"
        )
    assert rates["3. solution"] >= 0.85 * copy_gbps
