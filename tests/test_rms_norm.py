"""rms_norm (CUDA, 100-day challenge day 13: V1 naive, V2 warp-reduce, V3 float4): the spec's cases against
the classic mistakes of an RMS norm kernel, played in torch on the CPU (tests/cuda_rows.py); on a GPU the
three versions' figures at 16384x4096 float32 beside torch.nn.functional.rms_norm and the copy bandwidth,
V1 below the speed bar and V2 above it, and rows past the registers
(`python -m pytest -m gpu -s tests/test_rms_norm.py`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import ROOT, submission
from cuda_rows import cuda_caller, cuda_cases, edited, float4_gated_on_n_only, gbps, rows_at_stride_n, verdict, verdicts

from grader.core.discovery import discover_exercises, resolve
from grader.run.grade import grade

SPEC = discover_exercises()["rms_norm"]
SOLUTION = ROOT / "solutions" / "rms_norm" / "rms_norm.cu"
STUB = ROOT / "exercises" / "rms_norm" / "rms_norm.cu"
EPS = 1e-6


def rms_normed(x, w, *, eps_outside=False, no_eps=False, sum_not_mean=False, lanes=None):
    """A float32 kernel's RMS norm, with one of the classic mistakes switched on by name."""
    squares = (x * x).sum(dim=-1, keepdim=True)
    if lanes is not None:  # each column scaled by its lane's own sum (see shfl_down_totals)
        squares = lanes
    ms = squares if sum_not_mean else squares / x.shape[-1]
    if eps_outside:
        scale = 1.0 / (torch.sqrt(ms) + EPS)
    else:
        scale = torch.rsqrt(ms if no_eps else ms + EPS)
    return x * scale * w


def shfl_down_totals(x: torch.Tensor) -> torch.Tensor:
    """V2 with __shfl_down_sync where __shfl_xor_sync belongs: only lane 0 ends with the row's total, and
    every lane scales its columns (lane, lane + 32, ...) by what it holds. A lane whose partner is past
    lane 31 gets its own value back, as the hardware does."""
    n = x.shape[-1]
    padded = torch.nn.functional.pad(x * x, (0, (-n) % 32))
    v = padded.reshape(x.shape[0], -1, 32).sum(dim=1)  # lane l: columns l, l + 32, ...
    for offset in (16, 8, 4, 2, 1):
        v = v + torch.cat([v[:, offset:], v[:, 32 - offset :]], dim=1)
    return v[:, torch.arange(n) % 32]


def mistaken(**mistake):
    def run(t, p):
        t["out"].copy_(rms_normed(t["x"], t["weight"], **mistake))

    return run


correct = mistaken()


def shfl_down_everywhere(t, p):
    t["out"].copy_(rms_normed(t["x"], t["weight"], lanes=shfl_down_totals(t["x"])))


def rows_found_with_n(t, p):
    rows_at_stride_n(t["out"]).copy_(rms_normed(rows_at_stride_n(t["x"]), t["weight"]))


def float4_on_n_only(t, p):
    return float4_gated_on_n_only(t, ("x", "out")) or correct(t, p)


MISTAKES = {  # name: (play, a label fragment of a case it must fail, the verdict there)
    "eps outside the square root": (mistaken(eps_outside=True), "scale=0.001", "mismatch"),
    "eps left out": (mistaken(no_eps=True), "scale=0.001", "mismatch"),
    "sum of squares, not their mean": (mistaken(sum_not_mean=True), "M=3 N=5", "mismatch"),
    "V2 with __shfl_down_sync: only lane 0 has the total": (shfl_down_everywhere, "M=3 N=5", "mismatch"),
    "rows found with N, not the row stride": (rows_found_with_n, "layout=row_slice", "mismatch"),
    "float4 whenever N % 4 == 0": (float4_on_n_only, "M=9 N=1024 (x layout=row_slice)", "cuda_error"),
}


def test_the_spec_passes_strides_and_the_readme_ladder_is_the_three_versions():
    from grader.checks import hints

    cuda = SPEC.variant(None)
    assert [a.name for a in cuda.args] == ["x", "weight", "out", "M", "N", "x.stride(0)", "out.stride(0)"]
    steps = hints.read_ladder(SPEC, "cuda")
    assert [s.title.split(",")[0] for s in steps] == ["V1", "V2", "V3"]
    assert all(s.roofline_pct for s in steps)  # the speed hint can place a learner on it


def test_an_honest_float32_kernel_passes_every_case():
    assert set(verdicts(SPEC, correct).values()) == {"ok"}


def test_the_large_magnitude_case_is_harmless_in_float32():
    """x ~ 1e4: the README says a plain float32 sum of squares is fine there; this holds it to that."""
    large = [c for c in cuda_cases(SPEC) if c.inputs.get("x", {}).get("scale", 1) >= 1e4]
    assert large and verdict(SPEC, large[0], correct) == "ok"


@pytest.mark.parametrize("name", list(MISTAKES))
def test_each_classic_mistake_fails_on_the_case_built_for_it(name):
    run, fragment, code = MISTAKES[name]
    cases = [c for c in cuda_cases(SPEC) if fragment in c.label()]
    assert cases, f"no case has {fragment!r}"
    assert verdict(SPEC, cases[0], run) == code


# --- builds here; on a GPU, the versions' figures ---------------------------------------------------------

# The classic mistakes (the solution's one-line edits, V2 reduced with __shfl_down_sync) are the spec's
# [[mistakes]] (their fixtures in tests/fixtures/submissions/rms_norm/), graded on the CPU and the GPU by
# tests/test_exercise_mistakes.py.


@pytest.mark.slow
@pytest.mark.solutions
@pytest.mark.nvcc
def test_the_solution_and_stub_build_for_sm_90():
    from grader.toolchain import build

    for source in (SOLUTION, STUB):
        built = build.build_shared_library(source)
        assert built.ok, built.log
        assert all(r.get("spill_stores", 0) == 0 for r in built.resources), built.resources
        assert build.check_entry_point(Path(built.library), source, "rms_norm", 7) is None


@pytest.mark.gpu
@pytest.mark.solutions
@pytest.mark.slow  # a sweep (every ladder step timed): gpu and slow, out of the GPU tier
def test_the_three_versions_figures_and_the_solution_beats_torch_near_copy_bandwidth(tmp_path):
    from grader.child import timing

    M, N = 16384, 4096
    x = torch.randn(M, N, device="cuda")
    w = torch.rand(N, device="cuda") + 0.5
    out = torch.empty_like(x)
    want = torch.nn.functional.rms_norm(x, (N,), w, eps=EPS)
    params = {"M": M, "N": N}
    versions = {
        "V1 naive, a thread per row": submission("rms_norm_v1_naive.cu"),
        "V2 warp-reduce, a warp per row": submission("rms_norm_v2_warp.cu"),
        "V3 without float4 (scalar loads)": edited(
            SOLUTION, "const bool aligned = ", "const bool aligned = false && ", tmp_path, "scalar.cu"
        ),
        "V3 float4 (the solution)": SOLUTION,
    }
    callers = {name: cuda_caller(SPEC, path) for name, path in versions.items()}
    tensors = {"x": x, "weight": w, "out": out}
    contestants = {name: (lambda c=c: c(tensors, params)) for name, c in callers.items()}
    contestants["torch.nn.functional.rms_norm"] = lambda: torch.nn.functional.rms_norm(x, (N,), w, eps=EPS)
    for name, run in contestants.items():
        if not name.startswith("torch"):
            out.fill_(float("nan"))
            run()
            assert torch.allclose(out, want, atol=1e-5, rtol=1e-4), name
    measured = timing.time_alternating(contestants)
    copy_gbps = timing.measure_copy_bandwidth()
    rates = {name: gbps((2 * M * N + N) * 4, m["median_ms"]) for name, m in measured.items()}
    print(f"\nrms_norm 16384x4096 float32 on {torch.cuda.get_device_name()} (copy {copy_gbps:.0f} GB/s):")
    for name, rate in rates.items():
        print(
            f"  {name:40s} {measured[name]['median_ms'] * 1000:8.1f} us  {rate:6.0f} GB/s  "
            f"{100 * rate / copy_gbps:4.0f}% of roofline"
        )
    assert rates["V3 float4 (the solution)"] >= 0.85 * copy_gbps
    assert rates["V3 float4 (the solution)"] > rates["torch.nn.functional.rms_norm"]


@pytest.mark.gpu
@pytest.mark.solutions
def test_v1_misses_the_speed_bar_and_v2_makes_it():
    target = resolve(("rms_norm",))
    speeds = {}
    for fixture in ("rms_norm_v1_naive.cu", "rms_norm_v2_warp.cu"):
        # as `kcourse grade` does: the speed verdict is taken at the last size, the only one timed
        result = grade(
            target, submission=submission(fixture), seed=5, record=False, sanitize_code=False, timed_sizes="verdict"
        )
        speeds[fixture] = next(c for c in result.checks if c.name == "speed")
        print(f"\n{fixture}: {speeds[fixture].message}")
    assert speeds["rms_norm_v1_naive.cu"].status == "failed"
    assert speeds["rms_norm_v2_warp.cu"].status == "passed", speeds["rms_norm_v2_warp.cu"].message


@pytest.mark.gpu
@pytest.mark.solutions
@pytest.mark.parametrize("N", [16_384, 16_388, 40_000, 100_003])
def test_rows_past_the_registers_are_read_twice_and_stay_exact(N):
    caller = cuda_caller(SPEC, SOLUTION, role="solution")
    x = torch.randn(6, N, device="cuda") * 1e4
    w = torch.rand(N, device="cuda") + 0.5
    out = torch.full_like(x, float("nan"))
    caller({"x": x, "weight": w, "out": out}, {"M": 6, "N": N})
    want = torch.nn.functional.rms_norm(x.double(), (N,), w.double(), eps=EPS)
    assert torch.allclose(out.double(), want, atol=1e-6, rtol=2e-5)


@pytest.mark.gpu
def test_the_stub_compiles_runs_and_fails_numerics_on_the_gpu():
    result = grade(resolve(("rms_norm",)), source="stubs", seed=5, record=False, quick=True)
    check = next(c for c in result.checks if c.status in ("failed", "error"))
    assert check.name == "numerics" and check.details.get("code") == "not_written", result.verdict
