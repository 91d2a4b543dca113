"""layer_norm, CUDA version (100-day challenge day 4): the spec's cases against the classic mistakes of a
CUDA layer norm, played in torch on the CPU (tests/cuda_rows.py); on a GPU the ladder's figures at
4096x4096 float32, the solution against torch.nn.functional.layer_norm and the copy bandwidth, and rows past
the registers (`python -m pytest -m gpu -s tests/test_layer_norm_cuda.py`). The solution's one-line mistakes
are the spec's [[mistakes]] (lang cuda), graded by tests/test_exercise_mistakes.py."""

from __future__ import annotations

import pytest
import torch
from conftest import ROOT, submission
from cuda_checks import build_without_spills
from cuda_rows import cuda_caller, cuda_cases, edited, float4_gated_on_n_only, gbps, rows_at_stride_n, verdict, verdicts

from grader.core.discovery import discover_exercises, resolve
from grader.run.grade import grade

SPEC = discover_exercises()["layer_norm"]
SOLUTION = ROOT / "solutions" / "layer_norm" / "layer_norm.cu"
EPS = 1e-5


def normalised(x, w, b, *, one_pass=False, eps_outside=False, unbiased=False):
    """A float32 kernel's layer norm, with one of the classic mistakes switched on by name."""
    n = x.shape[-1]
    mean = x.sum(dim=-1, keepdim=True) / n
    d = x - mean
    if one_pass:  # E[x^2] - E[x]^2: cancels when the mean is large next to the spread
        var = (x * x).sum(dim=-1, keepdim=True) / n - mean * mean
    else:
        var = (d * d).sum(dim=-1, keepdim=True) / (n - 1 if unbiased else n)
    scale = 1.0 / (torch.sqrt(var) + EPS) if eps_outside else torch.rsqrt(var + EPS)
    return d * scale * w + b


def play(**mistake):
    def run(t, p):
        t["out"].copy_(normalised(t["x"], t["weight"], t["bias"], **mistake))

    return run


def rows_found_with_n(t, p):
    rows_at_stride_n(t["out"]).copy_(normalised(rows_at_stride_n(t["x"]), t["weight"], t["bias"]))


def float4_on_n_only(t, p):
    return float4_gated_on_n_only(t, ("x", "out")) or play()(t, p)


MISTAKES = {  # name: (play, a label fragment of a case it must fail, the verdict there)
    "one-pass variance E[x^2] - E[x]^2": (play(one_pass=True), "offset=1000.0", "mismatch"),
    "eps outside the square root": (play(eps_outside=True), "scale=0.01", "mismatch"),
    "unbiased variance (N - 1)": (play(unbiased=True), "M=3 N=5", "mismatch"),
    "rows found with N, not the row stride": (rows_found_with_n, "layout=row_slice", "mismatch"),
    "float4 whenever N % 4 == 0": (float4_on_n_only, "M=9 N=1024 (x layout=row_slice)", "cuda_error"),
}


def test_the_cuda_version_takes_strides_and_float32_while_plain_layer_norm_stays_triton():
    cuda = SPEC.variants["cuda"]
    assert [a.name for a in cuda.args] == ["x", "weight", "bias", "out", "M", "N", "x.stride(0)", "out.stride(0)"]
    assert cuda.kind == "cuda" and cuda.dtypes == ["float32"]
    assert all(c.dtype == "float32" for c in cuda_cases(SPEC))
    assert resolve(("layer_norm",)).variant.lang == "triton"
    assert resolve(("layer_norm",), lang="cuda").variant == cuda


def test_an_honest_float32_two_pass_kernel_passes_every_case():
    assert set(verdicts(SPEC, play()).values()) == {"ok"}


@pytest.mark.parametrize("name", list(MISTAKES))
def test_each_classic_mistake_fails_on_the_case_built_for_it(name):
    run, fragment, code = MISTAKES[name]
    cases = [c for c in cuda_cases(SPEC) if fragment in c.label()]
    assert cases, f"no CUDA case has {fragment!r}"
    assert verdict(SPEC, cases[0], run) == code


# --- the solution: builds here; on a GPU, its figures ----------------------------------------------------


@pytest.mark.slow
@pytest.mark.solutions
@pytest.mark.nvcc
def test_the_solution_builds_for_sm_90_without_spills():
    build_without_spills([SOLUTION])


@pytest.mark.gpu
@pytest.mark.solutions
@pytest.mark.slow  # a sweep (every ladder step timed): gpu and slow, out of the GPU tier
def test_ladder_figures_at_4096_square_and_the_solution_beats_torch_near_copy_bandwidth(tmp_path):
    from grader.child import timing

    M = N = 4096
    x = torch.randn(M, N, device="cuda")
    w, b = torch.rand(N, device="cuda") + 0.5, torch.randn(N, device="cuda")
    out = torch.empty_like(x)
    want = torch.nn.functional.layer_norm(x, (N,), w, b, eps=EPS)
    params = {"M": M, "N": N}
    versions = {
        "1. shared memory, three passes": submission("layer_norm_shared_three_pass.cu"),
        "3. row in registers, scalar loads": edited(
            SOLUTION, "const bool aligned = ", "const bool aligned = false && ", tmp_path, "scalar.cu"
        ),
        "4. solution (float4)": SOLUTION,
    }
    callers = {name: cuda_caller(SPEC, path) for name, path in versions.items()}
    tensors = {"x": x, "weight": w, "bias": b, "out": out}
    contestants = {name: (lambda c=c: c(tensors, params)) for name, c in callers.items()}
    contestants["torch.nn.functional.layer_norm"] = lambda: torch.nn.functional.layer_norm(x, (N,), w, b, eps=EPS)
    for name, run in contestants.items():
        if not name.startswith("torch"):
            out.fill_(float("nan"))
            run()
            assert torch.allclose(out, want, atol=1e-3, rtol=1e-5), name
    measured = timing.time_alternating(contestants)
    copy_gbps = timing.measure_copy_bandwidth()
    # A copy of these same 128 MB: what memory gives a kernel of this size (H200: 85% of its 1 GB copy's rate;
    # the launch and the last wave's tail weigh more on a faster GPU). The bar is 85% of the copy of the same size.
    same_size_gbps = timing.measure_copy_bandwidth(nbytes=M * N * 4)
    rates = {name: gbps((2 * M * N + 2 * N) * 4, m["median_ms"]) for name, m in measured.items()}
    print(
        f"\nlayer_norm (CUDA) 4096x4096 float32 on {torch.cuda.get_device_name()} (copy {copy_gbps:.0f} GB/s; "
        f"of 128 MB: {same_size_gbps:.0f}):"
    )
    for name, rate in rates.items():
        print(
            f"  {name:40s} {measured[name]['median_ms'] * 1000:7.1f} us  {rate:6.0f} GB/s  "
            f"{100 * rate / copy_gbps:4.0f}% of roofline, {100 * rate / same_size_gbps:4.0f}% of a same-size copy"
        )
    assert rates["4. solution (float4)"] >= 0.85 * same_size_gbps
    assert rates["4. solution (float4)"] > rates["torch.nn.functional.layer_norm"]


@pytest.mark.gpu
def test_the_first_ladder_step_is_a_correct_kernel():
    result = grade(
        resolve(("layer_norm",), lang="cuda"),
        submission=submission("layer_norm_shared_three_pass.cu"),
        seed=5,
        record=False,
        quick=True,
    )
    assert next(c for c in result.checks if c.name == "numerics").status == "passed", result.verdict


@pytest.mark.gpu
@pytest.mark.solutions
@pytest.mark.parametrize("N", [16_384, 16_388, 40_000, 100_003])
def test_rows_past_the_registers_are_read_three_times_and_stay_accurate(N):
    """Rows over 16,384 columns (no spec case: the Triton version's tested range stops at 12,345)."""
    caller = cuda_caller(SPEC, SOLUTION, role="solution")
    x = torch.randn(6, N, device="cuda") + 1000.0
    w, b = torch.rand(N, device="cuda") + 0.5, torch.randn(N, device="cuda")
    out = torch.full_like(x, float("nan"))
    caller({"x": x, "weight": w, "bias": b, "out": out}, {"M": 6, "N": N})
    want = torch.nn.functional.layer_norm(x.double(), (N,), w.double(), b.double(), eps=EPS)
    assert torch.allclose(out.double(), want, atol=1e-3, rtol=1e-5)
