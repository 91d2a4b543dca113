"""softmax, CUDA version (100-day challenge days 6 and 12): the spec's cases against the classic mistakes
of a CUDA softmax, played in torch on the CPU (tests/cuda_rows.py); on a GPU the ladder's figures at
4096x4096 float32, the solution against torch.softmax and the copy bandwidth, and rows long enough for the
online-softmax path (`python -m pytest -m gpu -s tests/test_softmax_cuda.py`). The solution's one-line
mistakes are the spec's [[mistakes]] (lang cuda), graded by tests/test_exercise_mistakes.py."""

from __future__ import annotations

import pytest
import torch
from conftest import ROOT, submission
from cuda_checks import build_without_spills
from cuda_rows import cuda_caller, cuda_cases, edited, float4_gated_on_n_only, gbps, rows_at_stride_n, verdict, verdicts

from grader.core.discovery import discover_exercises, resolve
from grader.run.grade import grade

SPEC = discover_exercises()["softmax"]
SOLUTION = ROOT / "solutions" / "softmax" / "softmax.cu"
THREADS = 256  # the stub's block: a thread's first column is its index


def softmax_float32(x: torch.Tensor) -> torch.Tensor:
    """What a correct float32 kernel computes: max, exp of the difference, sum, scale."""
    e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
    return e * (1.0 / e.sum(dim=-1, keepdim=True))


def correct(t, p):
    t["out"].copy_(softmax_float32(t["x"]))


def no_max_subtraction(t, p):
    e = torch.exp(t["x"])
    t["out"].copy_(e / e.sum(dim=-1, keepdim=True))


def rows_found_with_n(t, p):  # x_row = x + row * N, out_row alike
    rows_at_stride_n(t["out"]).copy_(softmax_float32(rows_at_stride_n(t["x"])))


def online_without_inf_guard(t, p):
    """Running max from -inf, s = s * exp(m - new_m) + exp(x - new_m): a thread whose first value is -inf
    makes exp(-inf - -inf) = NaN, and the block's sum with it."""
    out = softmax_float32(t["x"])
    first_columns = t["x"][:, :THREADS]
    out[torch.isneginf(first_columns).any(dim=-1)] = float("nan")
    t["out"].copy_(out)


def float4_on_n_only(t, p):
    return float4_gated_on_n_only(t, ("x", "out")) or correct(t, p)


MISTAKES = {  # name: (play, a label fragment of a case it must fail, the verdict there)
    "no max subtraction": (no_max_subtraction, "offset=100.0", "mismatch"),
    "rows found with N, not the row stride": (rows_found_with_n, "layout=row_slice", "mismatch"),
    "online softmax without the -inf guard": (online_without_inf_guard, "neg_inf_entries", "mismatch"),
    "float4 whenever N % 4 == 0": (float4_on_n_only, "M=9 N=1024 (x layout=row_slice)", "cuda_error"),
}


def test_the_cuda_version_takes_strides_and_float32_while_plain_softmax_stays_triton():
    cuda = SPEC.variants["cuda"]
    assert [a.name for a in cuda.args] == ["x", "out", "M", "N", "x.stride(0)", "out.stride(0)"]
    assert cuda.kind == "cuda" and cuda.dtypes == ["float32"]
    assert all(c.dtype == "float32" for c in cuda_cases(SPEC))
    assert any(c.dtype == "float16" for c in SPEC.cases)  # still there, for the Triton version
    assert resolve(("softmax",)).variant.lang == "triton"  # `kcourse grade softmax` as before
    assert resolve(("softmax",), lang="cuda").variant == cuda


def test_an_honest_float32_kernel_passes_every_case():
    assert set(verdicts(SPEC, correct).values()) == {"ok"}


@pytest.mark.parametrize("name", list(MISTAKES))
def test_each_classic_mistake_fails_on_the_case_built_for_it(name):
    play, fragment, code = MISTAKES[name]
    cases = [c for c in cuda_cases(SPEC) if fragment in c.label()]
    assert cases, f"no CUDA case has {fragment!r}"
    assert verdict(SPEC, cases[0], play) == code


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
    out = torch.empty_like(x)
    want = torch.softmax(x, dim=-1)
    params = {"M": M, "N": N}
    versions = {
        "1. shared memory, three passes": submission("softmax_shared_three_pass.cu"),
        "3. warp shuffles, online, two passes": submission("softmax_online_two_pass.cu"),
        "4. solution without float4": edited(
            SOLUTION, "const bool aligned = ", "const bool aligned = false && ", tmp_path, "scalar.cu"
        ),
        "4. solution": SOLUTION,
    }
    callers = {name: cuda_caller(SPEC, path) for name, path in versions.items()}
    contestants = {name: (lambda c=c: c({"x": x, "out": out}, params)) for name, c in callers.items()}
    contestants["torch.softmax"] = lambda: torch.softmax(x, dim=-1)
    for name, run in contestants.items():
        if not name.startswith("torch"):
            out.fill_(float("nan"))
            run()
            assert torch.allclose(out, want, atol=1e-6, rtol=1e-5), name
    measured = timing.time_alternating(contestants)
    copy_gbps = timing.measure_copy_bandwidth()
    rates = {name: gbps(2 * M * N * 4, m["median_ms"]) for name, m in measured.items()}
    print(f"\nsoftmax (CUDA) 4096x4096 float32 on {torch.cuda.get_device_name()} (copy {copy_gbps:.0f} GB/s):")
    for name, rate in rates.items():
        print(
            f"  {name:40s} {measured[name]['median_ms'] * 1000:7.1f} us  {rate:6.0f} GB/s  "
            f"{100 * rate / copy_gbps:4.0f}% of roofline"
        )
    assert rates["4. solution"] >= 0.85 * copy_gbps
    assert rates["4. solution"] > rates["torch.softmax"]


@pytest.mark.gpu
@pytest.mark.parametrize("fixture", ["softmax_shared_three_pass.cu", "softmax_online_two_pass.cu"])
def test_the_ladder_steps_are_correct_kernels(fixture):
    result = grade(resolve(("softmax",), lang="cuda"), submission=submission(fixture), seed=5, record=False, quick=True)
    assert next(c for c in result.checks if c.name == "numerics").status == "passed", result.verdict


@pytest.mark.gpu
@pytest.mark.solutions
@pytest.mark.parametrize("N", [16_384, 16_388, 40_000, 100_003])
def test_rows_past_the_registers_take_the_online_path_and_stay_exact(N):
    """Rows over 16,384 columns (no spec case: the Triton version's tested range stops at 12,345)."""
    caller = cuda_caller(SPEC, SOLUTION, role="solution")
    x = torch.randn(6, N, device="cuda", dtype=torch.float64) * 10 + 100
    x[:, 1::3] = float("-inf")  # masked entries ...
    x[:, : N // 3] = float("-inf")  # ... and a masked first third: threads whose first columns are all -inf
    x = x.float()
    out = torch.full_like(x, float("nan"))
    caller({"x": x, "out": out}, {"M": 6, "N": N})
    want = torch.softmax(x.double(), dim=-1)
    assert torch.allclose(out.double(), want, atol=1e-6, rtol=1e-5)
