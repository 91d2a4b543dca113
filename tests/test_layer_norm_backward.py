"""layer_norm_backward: mean and rstd are what the forward saved for x (the spec's `transform`), dw and db are
judged as float32 sums in every case (an output's own `tolerance` table), the solution passes and the stub
fails on the CPU (Triton interpreter), and each classic mistake fails on the case built for it; on a GPU the
ladder's figures at 4096x4096 float32 and 16384x4096 bfloat16 beside torch's backward
(`python -m pytest -m gpu -s tests/test_layer_norm_backward.py`).

The mistakes are the solution with lines of its whole-row kernel changed (the kit ships no kernel text: these
skip there). Rows cost ~10 ms each under the interpreter, so each mistake runs on its own case only, through
the grader's own pieces (inputs drawn as a grade draws them, poisoned outputs, the float64 reference, the
tolerance of each output); the solution and the stub go through a whole grade. The spec's [[mistakes]] grade
the same mistakes whole, on the CPU and a GPU, and the race of the tutorial's partial rows without their lock
on a GPU (tests/test_exercise_mistakes.py)."""

from __future__ import annotations

import pytest
import torch
from conftest import ROOT, submission
from interpreted import load_module

from grader.checks.checking import compare, load_reference, reference_outputs
from grader.checks.inputs import generate, make_outputs, place, written_outside
from grader.core.discovery import discover_exercises, resolve
from grader.core.spec import Case, SpecError, load_spec
from grader.run.grade import grade

SPEC = discover_exercises()["layer_norm_backward"]
SOLUTION = ROOT / "solutions" / "layer_norm_backward" / "layer_norm_backward.py"

# Lines of the solution's whole-row kernel (or its wrapper) changed: name -> [(old, new), ...]
MISTAKES = {
    # dx without the mean of xhat * w * dy: right only where xhat is 0 (N = 1)
    "no_xhat_term": [("dx = (wdy - (xhat * c1 + c2)) * rstd", "dx = (wdy - c2) * rstd")],
    # dx without the mean of w * dy: off by its mean times rstd, 316 w dy at N = 1
    "no_mean_term": [("dx = (wdy - (xhat * c1 + c2)) * rstd", "dx = (wdy - xhat * c1) * rstd")],
    # the row sums divided by the block (a power of 2), not by N
    "block_as_n": [
        ("c1 = tl.sum(xhat * wdy, axis=1)[:, None] / n_cols", "c1 = tl.sum(xhat * wdy, axis=1)[:, None] / BLOCK"),
        ("c2 = tl.sum(wdy, axis=1)[:, None] / n_cols", "c2 = tl.sum(wdy, axis=1)[:, None] / BLOCK"),
    ],
    # dw and db summed in the inputs' dtype: a float16 running sum of 128 rows drifts by ~1
    "half_running_sums": [
        (
            "dw = tl.zeros([ROWS, BLOCK], tl.float32)\n    db = tl.zeros([ROWS, BLOCK], tl.float32)",
            "dw = tl.zeros([ROWS, BLOCK], x_ptr.dtype.element_ty)\n    db = tl.zeros([ROWS, BLOCK], x_ptr.dtype.element_ty)",
        ),
        (
            "dw += dy * xhat\n        db += dy",
            "dw += (dy * xhat).to(x_ptr.dtype.element_ty)\n        db += dy.to(x_ptr.dtype.element_ty)",
        ),
    ],
    # the partial rows in the inputs' dtype (the tutorial's buffer): each program's sum rounded to float16
    "half_partials": [
        (
            "partials = torch.empty((2, programs, n_cols), dtype=torch.float32",
            "partials = torch.empty((2, programs, n_cols), dtype=x.dtype",
        )
    ],
    # no .to(tl.float32) after the loads: w * dy and its row sums in float16 overflow at dy ~ 60
    "half_arithmetic": [
        (
            "cols[None, :], mask=mask, other=0.0).to(tl.float32)\n        dy = tl.load(",
            "cols[None, :], mask=mask, other=0.0)\n        dy = tl.load(",
        ),
        (
            "dy_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)",
            "dy_row_stride + cols[None, :], mask=mask, other=0.0)",
        ),
        (
            "w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :]",
            "w = tl.load(w_ptr + cols, mask=col_mask, other=0.0)[None, :]",
        ),
    ],
    # one stride for both inputs: right while x and dy are laid out alike
    "x_stride_for_dy": [("dy_ptr + rows[:, None] * dy_row_stride", "dy_ptr + rows[:, None] * x_row_stride")],
    # the row length as x's row stride: right for contiguous x only
    "n_as_x_stride": [("x_ptr + rows[:, None] * x_row_stride", "x_ptr + rows[:, None] * n_cols")],
    # the input's stride for the output: right while dx is laid out like x
    "x_stride_for_dx": [
        ("tl.store(dx_ptr + rows[:, None] * dx_row_stride", "tl.store(dx_ptr + rows[:, None] * x_row_stride")
    ],
}


def edited(text: str, edits: list[tuple[str, str]], name: str) -> str:
    for old, new in edits:
        assert text.count(old) == 1, f"{name}: {old!r} is not in the file once: update the edit"
        text = text.replace(old, new)
    return text


def mistake(name: str) -> str:
    return edited(SOLUTION.read_text(), MISTAKES[name], name)


def case_named(label: str) -> Case:
    return next(c for c in SPEC.cases if c.label() == label)


def verdict(module, case: Case, seed: int = 3) -> tuple[str, str]:
    """(code, output) of trial 1 of `case` run through `module` as a grade runs it: ("ok", "") when right."""
    values = generate(SPEC, case, seed)
    refs = reference_outputs(load_reference(SPEC.folder / "reference.py"), SPEC, values, case.params)
    inputs = {name: place(v, case.inputs.get(name, {}).get("layout"), "cpu") for name, v in values.items()}
    outputs = make_outputs(SPEC, case, "cpu")
    module.layer_norm_backward(**inputs, **outputs)
    for spec_out, ref in zip(SPEC.outputs, refs):
        if written_outside(outputs[spec_out.name]):
            return "out_of_bounds", spec_out.name
        result = compare(spec_out.name, outputs[spec_out.name], ref, SPEC.tolerance_of(case, spec_out), case.label())
        if not result.ok:
            return result.code, spec_out.name
    return "ok", ""


@pytest.fixture
def interpreted(tmp_path, monkeypatch):
    """Loads a kernel file's text under the Triton interpreter, as the grader's child does on the CPU."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")

    def load(text: str, name: str):
        path = tmp_path / f"{name}.py"
        path.write_text(text)
        return load_module(path, f"lnb_{name}")

    return load


# --- inputs and tolerances ---------------------------------------------------------------------------


def test_mean_and_rstd_are_the_forwards_statistics_of_x_as_rounded():
    case = Case({"M": 6, "N": 300, "dtype": "bfloat16"}, inputs={"x": {"offset": 3.0}})
    values = generate(SPEC, case, 4)
    x = values["x"].double()
    assert values["mean"].dtype == values["rstd"].dtype == torch.float32 and values["x"].dtype == torch.bfloat16
    assert torch.allclose(values["mean"].double(), x.mean(-1), rtol=1e-7)
    want = 1 / torch.sqrt(x.var(-1, unbiased=False) + 1e-5)
    assert torch.allclose(values["rstd"].double(), want, rtol=1e-7)


def test_dw_and_db_are_judged_as_float32_sums_of_m_rows_in_every_case():
    bf16 = Case({"M": 16384, "N": 4096, "dtype": "bfloat16"})
    dx, dw, db = SPEC.outputs
    assert SPEC.tolerance_of(bf16, dx).rtol == SPEC.tolerance_for("bfloat16").rtol  # dx: its own dtype's
    sums = SPEC.tolerance_of(bf16, dw)
    assert sums.atol == SPEC.tolerance["row_sums"].atol
    assert sums.rtol == pytest.approx(2 * 16384**0.5 * 2.0**-24)  # float32's u, not bfloat16's
    assert SPEC.tolerance_of(bf16, db) == sums


def test_a_gpus_fused_multiply_add_at_n_1_stays_within_dxs_tolerance():
    """At N = 1, dx = (w dy - mean(w dy)) rstd is exactly 0, but a GPU compiles w * dy - c2 into one FMA: the
    product unrounded on one side, rounded on the other. That leaves |w dy| u rstd (rstd = 316), which over
    the spec's inputs must fit in dx's atol: an honest kernel failed at 5e-5 on an H200 (5.35e-5)."""
    case = case_named("M=1 N=1")
    atol = SPEC.tolerance_of(case, SPEC.outputs[0]).atol
    worst = 0.0
    for seed in range(2000):
        v = generate(SPEC, case, seed)
        w, dy = v["weight"].double(), v["dy"].double()
        exact = w * dy  # a product of two float32 values is exact in float64: the FMA's unrounded side
        rounded = (v["weight"] * v["dy"]).double()  # the other side, rounded to float32
        worst = max(worst, float(((exact - rounded) * v["rstd"].double()).abs().max()))
    assert 0 < worst < atol, (worst, atol)
    assert atol < 1e-3  # the missing mean term (dx = 316 w dy) stays far outside it


def test_an_output_tolerance_must_name_a_table_and_inputs_take_none(tmp_path):
    folder = tmp_path / "ex"
    folder.mkdir()
    (folder / "reference.py").write_text("def reference(x):\n    return x\n")
    text = (
        'id = "ex"\n[variants.triton]\nstub = "b.py"\nentry = "f"\nargs = ["x", "y"]\n[inputs.x]\nshape = ["n"]\n'
        '[outputs.y]\nshape = ["n"]\ntolerance = "sums"\n[[cases]]\nn = 3\n[tolerance.float32]\natol = 0\nrtol = 0\n'
    )
    (folder / "spec.toml").write_text(text)
    with pytest.raises(SpecError, match=r"outputs.y.tolerance = 'sums' names no table: add \[tolerance.sums\]"):
        load_spec(folder)
    (folder / "spec.toml").write_text(text + "[tolerance.sums]\natol = 1\nrtol = 0\n")
    assert load_spec(folder).tolerance_of(Case({"n": 3}), load_spec(folder).outputs[0]).atol == 1
    (folder / "spec.toml").write_text(
        text.replace('shape = ["n"]\n[outputs', 'shape = ["n"]\ntolerance = "x"\n[outputs')
        + "[tolerance.sums]\natol = 1\nrtol = 0\n"
    )
    with pytest.raises(SpecError, match="inputs.x.tolerance: only outputs are judged"):
        load_spec(folder)


def test_a_float16_running_sum_fails_the_8192_row_gpu_case_and_float32_passes():
    """The GPU case behind the CPU one: played in torch (dw and db summed row by row), float16 vs float32."""
    case = case_named("M=8192 N=40 dtype=float16 (dy offset=2.0)")
    values = generate(SPEC, case, 5)
    refs = reference_outputs(load_reference(SPEC.folder / "reference.py"), SPEC, values, case.params)
    x, dy = values["x"].float(), values["dy"].float()
    terms = {"dw": dy * (x - values["mean"][:, None]) * values["rstd"][:, None], "db": dy}
    for dtype, ok in ((torch.float16, False), (torch.float32, True)):
        for (name, term), ref in zip(terms.items(), refs[1:]):
            total = torch.zeros(term.shape[1], dtype=dtype)
            for row in term.to(dtype):
                total += row
            tol = SPEC.tolerance_of(case, SPEC.outputs[1])
            assert compare(name, total.float(), ref, tol, case.label()).ok is ok, (name, dtype)


# --- the learner's side: stub, solution, mistakes -----------------------------------------------------


@pytest.mark.slow
def test_the_stub_fails_numerics_and_says_it_is_not_written():
    result = grade(resolve(("layer_norm_backward",)), source="stubs", seed=2, record=False)
    check = next(c for c in result.checks if c.status in ("failed", "error"))
    assert check.name == "numerics" and "not implemented yet" in check.message, check.message


@pytest.mark.slow
@pytest.mark.solutions
def test_the_solution_passes_every_cpu_case():
    result = grade(resolve(("layer_norm_backward",)), source="solutions", seed=9, record=False)
    checks = {c.name: c for c in result.checks}
    assert checks["numerics"].status == "passed", checks["numerics"].message


@pytest.mark.solutions
@pytest.mark.filterwarnings("ignore:overflow encountered")  # half_arithmetic: numpy's float16 sums overflow, as meant
@pytest.mark.parametrize(
    "name, case, output",
    [
        ("no_xhat_term", "M=3 N=5", "dx"),
        ("no_mean_term", "M=1 N=1", "dx"),
        ("block_as_n", "M=3 N=5", "dx"),
        ("half_running_sums", "M=128 N=40 dtype=float16 (dy offset=2.0)", "dw"),
        ("half_partials", "M=128 N=40 dtype=float16 (dy offset=2.0)", "dw"),
        ("half_arithmetic", "M=6 N=2000 dtype=float16 (dy offset=60.0)", "dx"),
        ("x_stride_for_dy", "M=7 N=600 (dy layout=row_slice)", "dx"),
        ("n_as_x_stride", "M=6 N=781 (x layout=row_slice)", "dx"),
        ("x_stride_for_dx", "M=7 N=457 (dx layout=row_slice)", "dx"),
    ],
)
def test_a_classic_mistake_fails_on_its_case(interpreted, name, case, output):
    code, failed = verdict(interpreted(mistake(name), name), case_named(case))
    assert code != "ok" and failed == output, (code, failed)


@pytest.mark.solutions
def test_the_mistakes_cases_pass_the_solution(interpreted):
    """So each failure above is the mistake's, not the case's."""
    module = interpreted(SOLUTION.read_text(), "solution")
    for label in ("M=128 N=40 dtype=float16 (dy offset=2.0)", "M=6 N=2000 dtype=float16 (dy offset=60.0)"):
        assert verdict(module, case_named(label)) == ("ok", ""), label


# --- GPU: the ladder's figures, the race -----------------------------------------------------------------


def gpu_inputs(M, N, dtype):
    x = torch.randn(M, N, device="cuda").to(dtype)
    w = (torch.rand(N, device="cuda") + 0.5).to(dtype)
    dy = torch.randn(M, N, device="cuda").to(dtype)
    _, mean, rstd = torch.ops.aten.native_layer_norm(x.float(), [N], None, None, 1e-5)
    return x, w, dy, mean.view(M), rstd.view(M)


@pytest.mark.gpu
@pytest.mark.solutions
# The bar, as a fraction of a copy of the same bytes: 85% at the largest timed size. At 4096x4096 float32 the
# kernel is 64 us, and stage 2's launch and the programs' last rows are a few of them: 0.8 (H200: 83-86%).
@pytest.mark.parametrize("M, N, dtype, bar", [(4096, 4096, torch.float32, 0.8), (16384, 4096, torch.bfloat16, 0.85)])
@pytest.mark.slow  # a sweep (every ladder step timed): gpu and slow, out of the GPU tier
def test_ladder_figures_and_the_solution_beats_torch_near_copy_bandwidth(M, N, dtype, bar):
    from grader.child import timing

    atomics = load_module(submission("layer_norm_backward_atomics.py"), "lnb_atomics")
    locks = load_module(submission("layer_norm_backward_locks.py"), "lnb_locks")
    solution = load_module(SOLUTION, "lnb_solution")
    x, w, dy, mean, rstd = gpu_inputs(M, N, dtype)
    dx, dw, db = torch.empty_like(x), torch.empty(N, device="cuda"), torch.empty(N, device="cuda")
    want = torch.ops.aten.native_layer_norm_backward(
        dy.double(), x.double(), [N], mean.double(), rstd.double(), w.double(), w.double(), [True, True, True]
    )
    contestants = {
        "1. one program a row, atomics": lambda: atomics.layer_norm_backward(x, w, dy, mean, rstd, dx, dw, db),
        "2. tutorial: locked partial rows": lambda: locks.layer_norm_backward(x, w, dy, mean, rstd, dx, dw, db),
        "3. own partial rows, 1 program/SM": lambda: solution.layer_norm_backward(
            x, w, dy, mean, rstd, dx, dw, db, programs_per_sm=1
        ),
        "4. solution (occupancy-sized grid)": lambda: solution.layer_norm_backward(x, w, dy, mean, rstd, dx, dw, db),
        "torch native_layer_norm_backward": lambda: torch.ops.aten.native_layer_norm_backward(
            dy, x, [N], mean, rstd, w, w, [True, True, True]
        ),
    }
    for name, run in contestants.items():
        if name.startswith("torch"):
            continue
        run()
        torch.cuda.synchronize()
        rtol = 1e-5 if dtype == torch.float32 else 1e-2
        assert torch.allclose(dx.double(), want[0], atol=1e-3, rtol=rtol), name
        assert torch.allclose(dw.double(), want[1], atol=5e-3, rtol=1e-4), name
        assert torch.allclose(db.double(), want[2], atol=5e-3, rtol=1e-4), name
    measured = timing.time_alternating(contestants)
    copy_gbps = timing.measure_copy_bandwidth()
    moved = 3 * M * N * x.element_size() + N * w.element_size() + 8 * M + 8 * N
    # what memory gives a kernel of this size: a copy of the same bytes (at 4096x4096 float32, 200 MB, the H200's
    # launch and last-wave tail cost about a tenth of its 1 GB copy's rate)
    same_size_gbps = timing.measure_copy_bandwidth(nbytes=moved // 2)
    gbps = {name: moved / (m["median_ms"] / 1000) / 1e9 for name, m in measured.items()}
    print(
        f"\nlayer_norm_backward {M}x{N} {str(dtype)[6:]} on {torch.cuda.get_device_name()} (copy {copy_gbps:.0f} GB/s; "
        f"of the same bytes {same_size_gbps:.0f}):"
    )
    for name, rate in gbps.items():
        print(
            f"  {name:40s} {measured[name]['median_ms'] * 1000:8.1f} us  {rate:6.0f} GB/s  "
            f"{100 * rate / copy_gbps:4.0f}% of roofline, {100 * rate / same_size_gbps:4.0f}% of a same-size copy"
        )
    assert gbps["4. solution (occupancy-sized grid)"] > gbps["torch native_layer_norm_backward"]
    assert gbps["4. solution (occupancy-sized grid)"] >= bar * same_size_gbps


@pytest.mark.gpu
@pytest.mark.solutions
def test_the_solution_passes_a_whole_gpu_grade_with_its_speed():
    from simulated_kernels import figure_line

    result = grade(resolve(("layer_norm_backward",)), source="solutions", seed=11, record=False)
    failed = [c for c in result.checks if c.status in ("failed", "error")]
    assert not failed, failed[0].message
    print("\n" + figure_line("solution", result))


@pytest.mark.gpu
def test_the_ladder_fixtures_are_correct_on_the_gpu():
    for name in ("layer_norm_backward_atomics.py", "layer_norm_backward_locks.py"):
        result = grade(
            resolve(("layer_norm_backward",)), submission=submission(name), seed=11, record=False, quick=True
        )
        checks = {c.name: c for c in result.checks}
        assert checks["numerics"].status == "passed", (name, checks["numerics"].message)
