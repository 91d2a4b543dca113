"""fusion (Triton, 100-day challenge days 64-65 and 67): out = gelu(x * scale[col] + shift[col]) in one kernel.

On the CPU: the classic mistakes are played in torch on every case small enough, bfloat16 included (torch
rounds float32 -> bfloat16 to nearest, as the GPU does; the Triton interpreter truncates, which is why the
bfloat16 cases are GPU-only), judged with the grader's own checks; the solution, the stub and the unfused
three-kernel fixture (tests/fixtures/submissions/fusion_unfused.py) are graded for real under the Triton
interpreter: the unfused one passes the numerics there. On a GPU (`python -m pytest -m gpu -s
tests/test_fusion.py`): the solution, the ladder's step 2, the unfused fixture and eager PyTorch's three
kernels timed side by side beside the copy bandwidth; full grades of the solution (passes the speed bar,
printed beside the unfused "torch" time) and of the unfused fixture (correct, but fails the speed bar); the
stub on the GPU. The solution's one-line mistakes are the spec's [[mistakes]] (tests/test_exercise_mistakes.py)."""

from __future__ import annotations

import pytest
import torch
from conftest import ROOT
from cuda_rows import gbps, rows_at_stride_n, verdict
from interpreted import load_module

from grader.core.discovery import discover_exercises, resolve
from grader.run.grade import grade

SPEC = discover_exercises()["fusion"]
SOLUTION = ROOT / "solutions" / "fusion" / "fusion.py"
UNFUSED = ROOT / "tests" / "fixtures" / "submissions" / "fusion_unfused.py"
PLAYED = 100_000  # cases up to this many elements are played in torch: every case the CPU grades, and bfloat16's


def gelu(t, tanh=False):
    return torch.nn.functional.gelu(t, approximate="tanh" if tanh else "none")


def fused_in_torch(
    t,
    p,
    *,
    by_row=False,
    shift_first=False,
    gelu_first=False,
    tanh=False,
    x_stride_n=False,
    out_stride_n=False,
    eager_rounding=False,
    block_n=None,
):
    """What a Triton kernel computing in float32 writes, with one of the classic mistakes switched on by name."""
    dtype = t["out"].dtype
    x = (rows_at_stride_n(t["x"]) if x_stride_n else t["x"]).float()
    scale, shift = t["scale"].float(), t["shift"].float()
    if by_row:  # scale[row], shift[row]: loaded with the row index instead of the column's
        rows = torch.arange(x.shape[0]) % scale.numel()
        scale, shift = scale[rows][:, None], shift[rows][:, None]
    if shift_first:
        y = gelu((x + shift) * scale, tanh)
    elif gelu_first:
        y = gelu(x, tanh) * scale + shift
    elif eager_rounding:  # each intermediate rounded to the storage dtype, as eager PyTorch's kernels store it
        y = gelu(((x * scale).to(dtype).float() + shift).to(dtype).float(), tanh)
    else:
        y = gelu(x * scale + shift, tanh)
    y = y.to(dtype)
    out = t["out"]
    if out_stride_n:  # out's rows stepped by N, not by its row stride
        out = out.as_strided(out.shape, (out.shape[1], 1))
    if block_n is not None:  # one column block per row, no second grid axis: the rest is never written
        out[:, :block_n].copy_(y[:, :block_n])
        return None
    out.copy_(y)
    return None


def play(**mistake):
    return lambda t, p: fused_in_torch(t, p, **mistake)


def played_cases():
    return [c for c in SPEC.cases if c.params["M"] * c.params["N"] <= PLAYED]


MISTAKES = {  # name: (play, a label fragment of the case it must fail first, the verdict there)
    "scale and shift indexed by row": (play(by_row=True), "M=3 N=5", "mismatch"),
    "the shift added before the scale": (play(shift_first=True), "M=1 N=1", "mismatch"),
    "the GELU before the scale and shift": (play(gelu_first=True), "M=1 N=1", "mismatch"),
    "the tanh GELU where erf is asked": (play(tanh=True), "M=1 N=1", "mismatch"),
    "N, not x's row stride": (play(x_stride_n=True), "x layout=row_slice", "mismatch"),
    "N, not out's row stride": (play(out_stride_n=True), "out layout=row_slice", "out_of_bounds"),
    "intermediates rounded to the dtype (eager's way)": (play(eager_rounding=True), "dtype=float16", "mismatch"),
    "one 1024-column block per row": (play(block_n=1024), "N=3000", "partial_write"),
}


def numerics(result):
    return next(c for c in result.checks if c.name == "numerics")


def test_the_spec_takes_three_inputs_one_output_and_its_bar_needs_one_kernel():
    from grader.checks import hints

    triton = SPEC.variant(None)
    assert [a.name for a in triton.args] == ["x", "scale", "shift", "out"]
    assert [o.name for o in SPEC.outputs] == ["out"]
    assert all(c.gpu_only for c in SPEC.cases if c.dtype == "bfloat16")  # the interpreter truncates bfloat16
    # two kernels move at least 4 MN elements to the fused one's 2 MN: 0.5 of its speed at best
    assert SPEC.performance.threshold > 0.5
    steps = hints.read_ladder(SPEC, "triton")
    assert len(steps) == 4 and all(s.roofline_pct for s in steps)


def test_float32_math_rounded_once_passes_every_case_bfloat16_included():
    cases = played_cases()
    assert {"float16", "bfloat16"} <= {c.dtype for c in cases}
    assert {c.label(): verdict(SPEC, c, play()) for c in cases} == {c.label(): "ok" for c in cases}


@pytest.mark.parametrize("name", list(MISTAKES))
def test_each_classic_mistake_fails_first_on_the_case_built_for_it(name):
    run, fragment, code = MISTAKES[name]
    for case in played_cases():
        got = verdict(SPEC, case, run)
        if got != "ok":
            assert fragment in case.label() and got == code, (case.label(), got)
            return
    pytest.fail(f"{name} passed every case")


# --- the real kernels under the Triton interpreter ----------------------------------------------------


@pytest.mark.slow
@pytest.mark.solutions
def test_the_solution_passes_and_the_stub_fails_under_the_interpreter():
    target = resolve(("fusion",))
    passed = numerics(grade(target, source="solutions", seed=5, record=False, quick=True))
    assert passed.status == "passed", passed.message
    stub = numerics(grade(target, source="stubs", seed=5, record=False, quick=True))
    assert stub.status == "failed" and stub.details["code"] == "not_implemented", stub.message


@pytest.mark.slow
@pytest.mark.solutions  # the instructor's files: absent from a learner's kit
def test_the_unfused_three_kernel_fixture_passes_the_numerics():
    """It is correct: only the speed bar (GPU) can tell it from a fused kernel."""
    check = numerics(grade(resolve(("fusion",)), submission=UNFUSED, seed=5, record=False, quick=True))
    assert check.status == "passed", check.message


# --- GPU: the solution beside the unfused versions, full grades ------------------------------------------


@pytest.mark.gpu
@pytest.mark.solutions
@pytest.mark.parametrize("dtype, M, N", [(torch.bfloat16, 16_384, 8192), (torch.float32, 8192, 8192)])
def test_the_fused_solution_beside_three_kernels_near_copy_bandwidth(dtype, M, N):
    from grader.child import timing

    solution = load_module(SOLUTION, "fusion_solution")
    unfused = load_module(UNFUSED, "fusion_unfused")
    x = torch.randn(M, N, device="cuda", dtype=dtype)
    scale = (torch.rand(N, device="cuda") + 0.5).to(dtype)
    shift = torch.randn(N, device="cuda", dtype=dtype)
    out = torch.empty_like(x)
    want = gelu(x.double() * scale.double() + shift.double())
    contestants = {
        "step 2: one row x 1024 columns a program": lambda: solution.fusion_kernel[(M, triton_cdiv(N, 1024))](
            x, scale, shift, out, M, N, N, N, BLOCK_M=1, BLOCK_N=1024, num_warps=4
        ),
        "solution (fused, 16 KB tiles)": lambda: solution.fusion(x, scale, shift, out),
        "unfused: three Triton kernels": lambda: unfused.fusion(x, scale, shift, out),
        "eager PyTorch: x * scale, + shift, F.gelu": lambda: gelu(x * scale + shift),
    }
    rtol = 1e-5 if dtype == torch.float32 else 5.9e-3
    for name, run in contestants.items():
        if not name.startswith("eager"):
            out.fill_(float("nan"))
            run()
            assert torch.allclose(out.double(), want, atol=1e-5, rtol=rtol), name
    measured = timing.time_alternating(contestants)
    copy_gbps = timing.measure_copy_bandwidth()
    size = x.element_size()
    rates = {name: gbps(2 * M * N * size + 2 * N * size, m["median_ms"]) for name, m in measured.items()}
    print(
        f"\nfusion {M}x{N} {str(dtype)[6:]} on {torch.cuda.get_device_name()} (copy {copy_gbps:.0f} GB/s; "
        "GB/s counts the fused kernel's 2 MN elements for every contestant):"
    )
    for name, rate in rates.items():
        print(
            f"  {name:45s} {measured[name]['median_ms'] * 1000:8.1f} us  {rate:6.0f} GB/s  "
            f"{100 * rate / copy_gbps:4.0f}% of roofline"
        )
    best = rates["solution (fused, 16 KB tiles)"]
    assert best >= 0.85 * copy_gbps
    assert best > rates["eager PyTorch: x * scale, + shift, F.gelu"]
    assert rates["unfused: three Triton kernels"] < SPEC.performance.threshold * best


def triton_cdiv(a, b):
    return (a + b - 1) // b


@pytest.mark.gpu
@pytest.mark.solutions
def test_the_solution_passes_every_case_and_the_speed_bar_on_the_gpu():
    from grader.reports.console import format_timing

    result = grade(resolve(("fusion",)), source="solutions", seed=5, record=False)
    speed = next(c for c in result.checks if c.name == "speed")
    print(f"\nfusion solution: {speed.message}")
    for t in result.timings:  # "torch" is the same three ops unfused, eager PyTorch's three kernels
        print(f"  {format_timing(t)}")
    assert numerics(result).status == "passed", numerics(result).message
    assert speed.status == "passed", speed.message


@pytest.mark.gpu
def test_the_unfused_three_kernel_fixture_is_correct_but_fails_the_speed_bar_on_the_gpu():
    from grader.reports.console import format_timing

    result = grade(resolve(("fusion",)), submission=UNFUSED, seed=5, record=False)
    speed = next(c for c in result.checks if c.name == "speed")
    print(f"\nfusion unfused (three Triton kernels): {speed.message}")
    for t in result.timings:
        print(f"  {format_timing(t)}")
    assert numerics(result).status == "passed", numerics(result).message
    assert speed.status == "failed" and speed.details["code"] == "slow", speed.message


@pytest.mark.gpu
def test_the_stub_fails_numerics_on_the_gpu():
    result = grade(resolve(("fusion",)), source="stubs", seed=5, record=False, quick=True)
    assert numerics(result).details.get("code") == "not_implemented", result.verdict
