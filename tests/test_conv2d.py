"""conv2d (day 14): a 3x3 convolution layer, stride 1, padding 1, float16 NCHW with float32 accumulation;
the solution is an implicit GEMM on tensor cores (WMMA) and must reach 30% of cuDNN at the largest shape.

On the CPU the kernels are played in torch against the spec's cases with the grader's own checks
(simulated_kernels.py): the classic mistakes (flipped weights, a float16 running sum, padding checked on the
flat pixel index so taps wrap into the next row, the bias left out, H and W swapped, the output written
NHWC) each fail some case; float32 accumulation in any order — torch's, or the solution's (32 channels at
a time, the 9 taps in turn) — passes every case. The solution compiles for sm_90 without spills. On a GPU
(`pytest -m gpu -s`) the solution and the stub are graded, and the solution's TFLOP/s is printed beside
cuDNN's (torch.nn.functional.conv2d). The mistakes' fixtures (the spec's [[mistakes]]) are graded on the CPU
emulator and on a GPU by tests/test_exercise_mistakes.py."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import ROOT
from simulated_kernels import (
    cpu_cases,
    exercise,
    fails_somewhere,
    figure_line,
    first_failure,
    grade_fixture,
    store,
    verdicts,
)

from grader.core import exprs
from grader.core.discovery import resolve
from grader.run.grade import grade
from grader.toolchain import build

SPEC = exercise("conv2d")


def conv32(x, w, b):
    """The layer in float32 (inputs are float16 values), bias included."""
    return F.conv2d(x.float(), w.float(), b.float(), padding=1)


def shifted_taps(x: torch.Tensor, wrap_rows: bool = False):
    """(r, s, x shifted so that pixel (h, w) holds x[h + r - 1][w + s - 1]) for the 9 taps, zeros outside the
    image; with `wrap_rows`, the bounds check is on the flat pixel index only, so a tap past the left or right
    edge reads the neighbouring row's last or first pixel."""
    N, C, H, W = x.shape
    for r in range(3):
        for s in range(3):
            if wrap_rows:
                flat = F.pad(x.reshape(N, C, H * W), (W + 1, W + 1))
                start = (W + 1) + (r - 1) * W + (s - 1)
                yield r, s, flat[:, :, start : start + H * W].reshape(N, C, H, W)
            else:
                padded = F.pad(x, (1, 1, 1, 1))
                yield r, s, padded[:, :, r : r + H, s : s + W]


def slice_order(inputs, outputs, params):
    """The solution's summation: 32 channels at a time, the 9 taps in turn, into a float32 accumulator."""
    x, w, b = (inputs[k].float() for k in ("x", "w", "b"))
    taps = list(shifted_taps(x))
    acc = torch.zeros(x.shape[0], w.shape[0], x.shape[2], x.shape[3])
    for c0 in range(0, x.shape[1], 32):
        for r, s, xs in taps:
            acc = acc + torch.einsum("nchw,kc->nkhw", xs[:, c0 : c0 + 32], w[:, c0 : c0 + 32, r, s])
    store(outputs["out"], acc + b.view(1, -1, 1, 1))


def half_running_sum(inputs, outputs, params):
    """One product at a time added into a float16 accumulator (__hfma), in (c, r, s) order."""
    x, w, b = inputs["x"], inputs["w"], inputs["b"]
    taps = list(shifted_taps(x.float()))
    acc = torch.zeros(x.shape[0], w.shape[0], x.shape[2], x.shape[3], dtype=torch.float16)
    for c in range(x.shape[1]):
        for r, s, xs in taps:
            product = xs[:, c : c + 1] * w[:, c, r, s].float().view(1, -1, 1, 1)  # exact in float32
            acc = (acc.float() + product).half()
    store(outputs["out"], (acc.float() + b.float().view(1, -1, 1, 1)).half())


def wraps_rows(inputs, outputs, params):
    x, w, b = (inputs[k].float() for k in ("x", "w", "b"))
    acc = sum(torch.einsum("nchw,kc->nkhw", xs, w[:, :, r, s]) for r, s, xs in shifted_taps(x, wrap_rows=True))
    store(outputs["out"], acc + b.view(1, -1, 1, 1))


def h_and_w_swapped(inputs, outputs, params):
    """Every pixel index computed as w * H + h: the image read, and the output written, as W x H."""
    x = inputs["x"]
    N, C, H, W = x.shape
    swapped = conv32(x.reshape(N, C, W, H), inputs["w"], inputs["b"])
    store(outputs["out"], swapped.reshape(N, -1, H, W))


def written_nhwc(inputs, outputs, params):
    """Right values, stored pixel-major (NHWC) into the NCHW output."""
    out = conv32(inputs["x"], inputs["w"], inputs["b"])
    store(outputs["out"], out.permute(0, 2, 3, 1).reshape(out.shape))


CORRECT = {
    "float32 convolution (torch's order), rounded once": lambda i, o, p: store(
        o["out"], conv32(i["x"], i["w"], i["b"])
    ),
    "float32 sums in the solution's order (32 channels at a time, the 9 taps in turn)": slice_order,
}
MISTAKES = {
    "the weights flipped (a true convolution)": lambda i, o, p: store(
        o["out"], conv32(i["x"], i["w"].flip(2, 3), i["b"])
    ),
    "a float16 running sum": half_running_sum,
    "padding checked on the flat pixel index (taps wrap into the next row)": wraps_rows,
    "the bias left out": lambda i, o, p: store(o["out"], conv32(i["x"], i["w"], i["b"] * 0)),
    "H and W swapped in the pixel index": h_and_w_swapped,
    "the output written NHWC": written_nhwc,
}


def test_cases_are_ragged_in_every_dimension_and_one_accumulates_2304_products():
    params = [c.params for c in cpu_cases(SPEC)]
    assert all(c.dtype == "float16" for c in SPEC.cases + SPEC.performance.cases)
    assert any(p["C"] % 32 and p["K"] % 32 and p["H"] % 2 and p["W"] % 2 for p in params)
    assert any(p["K"] > 128 for p in params) and any(p["C"] * 9 >= 2304 for p in params)
    assert any(p["H"] == 1 for p in params) and any(p["W"] == 1 for p in params)
    largest = SPEC.performance.cases[-1].params
    assert exprs.evaluate(SPEC.performance.flops, largest) > 1e11  # 118 GFLOP: the tensor cores' size


@pytest.mark.parametrize("name", list(MISTAKES))
def test_every_classic_mistake_fails_some_case(name):
    found = fails_somewhere(SPEC, MISTAKES[name])
    assert any(v != "ok" for v in found.values()), f"{name} passes every case: {found}"


def test_a_float16_running_sum_fails_where_2304_products_meet():
    from simulated_kernels import trial_verdict

    index, case = next((i, c) for i, c in enumerate(cpu_cases(SPEC)) if c.params["C"] == 256)
    assert trial_verdict(SPEC, case, half_running_sum, 17 + 1000 * index, 0) == "mismatch"


@pytest.mark.parametrize("name", list(CORRECT))
def test_float32_accumulation_passes_every_case(name):
    found = verdicts(SPEC, CORRECT[name])
    assert all(v == "ok" for v in found.values()), found


@pytest.mark.slow
@pytest.mark.nvcc
@pytest.mark.solutions
def test_the_solution_compiles_without_spills_within_its_launch_bounds():
    result = build.build_shared_library(ROOT / "solutions" / "conv2d" / "conv2d.cu", device_only=True)
    assert result.ok, result.log
    gemm = next(k for k in result.resources if "conv_igemm" in k["kernel"])
    assert gemm["registers"] <= 128  # __launch_bounds__(256, 2): two blocks of 256 threads per SM
    assert all(k["spill_stores"] == 0 for k in result.resources), result.resources


# --- on a GPU: the real kernels ------------------------------------------------------------------------


@pytest.mark.gpu
def test_the_solution_reaches_30_percent_of_cudnn_and_prints_both():
    result = grade(resolve(("conv2d",)), source="solutions", seed=21, record=False)
    assert result.status == "passed", result.verdict
    t = result.timings[-1]
    print("\n" + figure_line("conv2d solution", result))
    assert t.torch_ms and t.torch_ms / t.learner_ms >= 0.3, f"{t.learner_ms:.4g} ms vs cuDNN {t.torch_ms:.4g} ms"


@pytest.mark.gpu
def test_the_stub_fails_on_the_gpu():
    result = grade(resolve(("conv2d",)), source="stubs", seed=5, record=False)
    assert first_failure(result).details.get("code") == "not_written", result.verdict


@pytest.mark.bench
@pytest.mark.gpu
def test_the_direct_kernel_passes_numerics_and_prints_its_ladder_figure():
    result = grade_fixture("conv2d", "conv2d_direct.cu")
    assert next(c for c in result.checks if c.name == "numerics").status == "passed", result.verdict
    if result.timings:
        print("\n" + figure_line("conv2d ladder step 1 (direct)", result))
