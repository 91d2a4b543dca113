"""The day 8 image exercises — rgb_to_gray (uint8 RGB to uint8 luma, exact) and blur (a float32 box blur
that averages only the pixels inside the image) — and what the grader grew for them: uint8 tensors.

Growth (grader/core/spec.py, inputs.py, checking.py): "uint8" is a dtype; byte inputs are drawn over all 256
values; a byte output is poisoned with an ordinary byte (0xA5), so an element holding it counts as never
written only where the answer is another value.

The CUDA kernels are played in torch against the spec's cases with the grader's own checks
(simulated_kernels.py): every classic mistake fails some case, honest kernels pass every case. On a GPU
(`pytest -m gpu -s`) the solutions and stubs are graded, figures printed beside torch's. The mistakes' fixtures
(the specs' [[mistakes]]) are graded on the CPU emulator and on a GPU by tests/test_exercise_mistakes.py."""

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

from grader.checks.checking import compare
from grader.checks.inputs import BYTE_POISON, generate, make_outputs, written_outside
from grader.core.discovery import resolve
from grader.core.spec import Case, Tolerance
from grader.run.grade import grade
from grader.toolchain import build

GRAY = exercise("rgb_to_gray")
BLUR = exercise("blur")
EXACT = Tolerance(0, 0)


# --- the grader's growth: uint8 ----------------------------------------------------------------------------


def test_bytes_are_drawn_over_all_256_values():
    case = next(c for c in cpu_cases(GRAY) if c.params["H"] == 720)
    rgb = generate(GRAY, case, seed=3)["rgb"]
    assert rgb.dtype == torch.uint8 and rgb.shape == (720, 1280, 3)
    assert int(rgb.min()) == 0 and int(rgb.max()) == 255


def test_a_byte_output_is_poisoned_and_a_pixel_that_equals_the_poison_still_counts_as_written():
    out = make_outputs(GRAY, Case({"H": 2, "W": 3}), "cpu")["gray"]
    assert out.dtype == torch.uint8 and bool((out == BYTE_POISON).all())
    want = torch.tensor([[BYTE_POISON, 7, 9], [0, 255, BYTE_POISON]], dtype=torch.uint8)
    out.copy_(want)  # a right answer that happens to hold the poison's value twice
    assert compare("gray", out, want.double(), EXACT, "H=2 W=3").ok
    out.fill_(BYTE_POISON)  # nothing written: only the poison's own value "matches"
    assert compare("gray", out, want.double(), EXACT, "H=2 W=3").code == "not_written"
    out[0, :2] = want[0, :2]  # the first two written, the rest never
    partial = compare("gray", out, want.double(), EXACT, "H=2 W=3")
    assert partial.code == "partial_write" and partial.details["unwritten"] == 3  # (1, 2) holds its answer


def test_a_store_past_the_end_of_a_byte_output_is_seen():
    out = make_outputs(GRAY, Case({"H": 2, "W": 3}), "cpu")["gray"]
    out.fill_(1)
    assert not written_outside(out)
    out.new_empty(0).set_(out.untyped_storage())[6] = 1  # the first byte of the guard
    assert written_outside(out)


def test_bytes_cross_to_the_child_and_back_as_raw_files(tmp_path):
    """The parent writes a trial's inputs as raw files and reads the child's outputs back the same way."""
    from grader.checks.inputs import load_tensor, save_tensor

    rgb = generate(GRAY, Case({"H": 3, "W": 5}), seed=1)["rgb"]
    back = load_tensor(save_tensor(rgb, tmp_path / "rgb.bin"), expected_numel=45)
    assert back.dtype == torch.uint8 and torch.equal(back.reshape(3, 5, 3), rgb)


# --- rgb_to_gray: the kernels played on the CPU ----------------------------------------------------------


def luma(r: torch.Tensor, g: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The exact integer formula (int32 in, int32 out)."""
    return torch.div(299 * r + 587 * g + 114 * b + 500, 1000, rounding_mode="floor")


def channels(rgb: torch.Tensor, order=(0, 1, 2), signed=False):
    c = rgb.to(torch.int32)
    if signed:  # read through `char`: bytes above 127 are negative
        c = torch.where(c > 127, c - 256, c)
    return [c[..., i] for i in order]


def gray_model(formula):
    return lambda inputs, outputs, params: store(outputs["gray"], formula(inputs["rgb"]) & 0xFF)


def float32_formula(rgb: torch.Tensor) -> torch.Tensor:
    """0.299f * R + 0.587f * G + 0.114f * B + 0.5f truncated, with the GPU's fused multiply-adds: each step
    exact in float64 (products of a float and a byte), then rounded to float32 once."""
    r, g, b = (c.double() for c in channels(rgb))
    w = [float(torch.tensor(v, dtype=torch.float32)) for v in (0.299, 0.587, 0.114)]
    t = (w[0] * r).float().double()
    t = (w[1] * g + t).float().double()
    t = (w[2] * b + t).float().double()
    return (t + 0.5).float().to(torch.int32)


def planar(rgb: torch.Tensor) -> torch.Tensor:
    flat = rgb.reshape(-1).to(torch.int32)
    n = flat.numel() // 3
    return luma(flat[:n], flat[n : 2 * n], flat[2 * n :]).view(rgb.shape[:2])


def h_as_the_row_stride(inputs, outputs, params):
    """Pixel (y, x) read from and written to y * H + x: misplaced, missing, or past the end of gray."""
    H, W = params["H"], params["W"]
    y, x = torch.meshgrid(torch.arange(H), torch.arange(W), indexing="ij")
    at = (y * H + x).flatten()
    flat = inputs["rgb"].reshape(-1, 3).to(torch.int32)
    source = flat[at.clamp(max=H * W - 1)]
    values = luma(source[:, 0], source[:, 1], source[:, 2]).to(torch.uint8)
    whole = outputs["gray"].new_empty(0).set_(outputs["gray"].untyped_storage())
    inside = at < whole.numel()
    whole[at[inside]] = values[inside]
    if not bool(inside.all()):  # past the allocation: the grader would see a fault; mark the guard instead
        whole[-1] = BYTE_POISON ^ 1


GRAY_CORRECT = {
    "the integer formula": gray_model(lambda rgb: luma(*channels(rgb))),
    "the integer numerator, then / 1000.0 and + 0.5 in double": gray_model(
        lambda rgb: torch.floor(
            sum(w * c.double() for w, c in zip((299, 587, 114), channels(rgb))) / 1000.0 + 0.5
        ).int()
    ),
}
GRAY_MISTAKES = {
    "bytes read as signed char": gray_model(
        lambda rgb: torch.div(
            sum(w * c for w, c in zip((299, 587, 114), channels(rgb, signed=True))) + 500, 1000, rounding_mode="trunc"
        )
    ),
    "truncated (no + 500)": gray_model(
        lambda rgb: torch.div(sum(w * c for w, c in zip((299, 587, 114), channels(rgb))), 1000, rounding_mode="floor")
    ),
    "float32 weights, + 0.5f, truncated": gray_model(float32_formula),
    "BGR order": gray_model(lambda rgb: luma(*channels(rgb, order=(2, 1, 0)))),
    "planar channels (R, then G, then B)": gray_model(planar),
    "H as the row stride": h_as_the_row_stride,
}


def test_the_reference_rounds_halves_up_in_integers():
    from grader.checks.checking import load_reference

    rgb = torch.tensor([[[0, 0, 0], [255, 255, 255], [1, 0, 0], [2, 0, 0], [0, 0, 5]]], dtype=torch.uint8)
    # 0.299 -> 0; 0.598 -> 1; 0.570 (B = 5) -> 1; white stays 255
    assert load_reference(GRAY.folder / "reference.py")(rgb).tolist() == [[0, 255, 0, 1, 1]]


@pytest.mark.parametrize("name", list(GRAY_MISTAKES))
def test_every_classic_rgb_to_gray_mistake_fails_some_case(name):
    found = fails_somewhere(GRAY, GRAY_MISTAKES[name])
    assert any(v != "ok" for v in found.values()), f"{name} passes every case: {found}"


@pytest.mark.parametrize("name", list(GRAY_CORRECT))
def test_exact_rgb_to_gray_kernels_pass_every_case(name):
    found = verdicts(GRAY, GRAY_CORRECT[name])
    assert all(v == "ok" for v in found.values()), found


# --- blur: the kernels played on the CPU -------------------------------------------------------------------


def box(img: torch.Tensor, r: int, pad: str = "zeros") -> torch.Tensor:
    """Sum over the (2r+1)^2 square, img extended by zeros (or by its edge pixels: pad="replicate")."""
    k = torch.ones(1, 1, 2 * r + 1, 2 * r + 1, dtype=img.dtype)
    x = img[None, None]
    if pad == "replicate" and r:
        return F.conv2d(F.pad(x, (r, r, r, r), mode="replicate"), k)[0, 0]
    return F.conv2d(x, k, padding=r)[0, 0]


def in_image_counts(H: int, W: int, r: int, far_edge_off_by_one: bool = False) -> torch.Tensor:
    y, x = torch.arange(H), torch.arange(W)
    extra = 1 if far_edge_off_by_one else 0  # min(y + r, H) instead of min(y + r, H - 1)
    rows = torch.minimum(y + r, torch.tensor(H - 1 + extra)) - torch.clamp(y - r, min=0) + 1
    cols = torch.minimum(x + r, torch.tensor(W - 1 + extra)) - torch.clamp(x - r, min=0) + 1
    return (rows[:, None] * cols[None, :]).float()


def separable(inputs, outputs, params):
    """The solution's arithmetic: zero-padded row sums, then column sums, divided by the in-image count."""
    img, r = inputs["img"].float(), params["r"]
    rows = F.conv2d(img[None, None], torch.ones(1, 1, 1, 2 * r + 1), padding=(0, r))
    both = F.conv2d(rows, torch.ones(1, 1, 2 * r + 1, 1), padding=(r, 0))[0, 0]
    store(outputs["out"], both / in_image_counts(*img.shape, r))


def blur_model(sums, counts):
    def model(inputs, outputs, params):
        img, r = inputs["img"].float(), params["r"]
        store(outputs["out"], sums(img, r) / counts(*img.shape, r))

    return model


def tiles_without_halo(inputs, outputs, params):
    """32 x 32 shared tiles holding only their own pixels: squares crossing a tile edge lose the rest."""
    img, r = inputs["img"].float(), params["r"]
    H, W = img.shape
    out = torch.empty_like(img)
    for y0 in range(0, H, 32):
        for x0 in range(0, W, 32):
            out[y0 : y0 + 32, x0 : x0 + 32] = box(img[y0 : y0 + 32, x0 : x0 + 32], r)
    store(outputs["out"], out / in_image_counts(H, W, r))


def h_and_w_swapped(inputs, outputs, params):
    """The image read as W x H (row stride H): right only when it is square."""
    img, r = inputs["img"].float(), params["r"]
    H, W = img.shape
    swapped = img.reshape(W, H)
    store(outputs["out"], (box(swapped, r) / in_image_counts(W, H, r)).reshape(H, W))


square = lambda H, W, r: torch.full((H, W), float((2 * r + 1) ** 2))  # noqa: E731
BLUR_CORRECT = {
    "avg_pool2d in float32": lambda i, o, p: store(
        o["out"], F.avg_pool2d(i["img"].float()[None, None], 2 * p["r"] + 1, 1, p["r"], count_include_pad=False)[0, 0]
    ),
    "separable sums, divided by the in-image count (the solution's)": separable,
}
BLUR_MISTAKES = {
    "edges clamped (edge pixels repeated)": blur_model(lambda img, r: box(img, r, "replicate"), square),
    "zero padding averaged in (divided by (2r+1)^2)": blur_model(box, square),
    "the count one too large at the far edges": blur_model(
        box, lambda H, W, r: in_image_counts(H, W, r, far_edge_off_by_one=True)
    ),
    "tiles without their halo": tiles_without_halo,
    "H and W swapped": h_and_w_swapped,
}


def test_the_blur_reference_averages_only_in_image_pixels():
    from grader.checks.checking import load_reference

    img = torch.arange(9, dtype=torch.float64).reshape(3, 3)
    out = load_reference(BLUR.folder / "reference.py")(img, r=1)
    assert float(out[0, 0]) == (0 + 1 + 3 + 4) / 4 and float(out[1, 1]) == 4.0 and float(out[0, 1]) == 15 / 6


@pytest.mark.parametrize("name", list(BLUR_MISTAKES))
def test_every_classic_blur_mistake_fails_some_case(name):
    found = fails_somewhere(BLUR, BLUR_MISTAKES[name])
    assert any(v != "ok" for v in found.values()), f"{name} passes every case: {found}"


@pytest.mark.parametrize("name", list(BLUR_CORRECT))
def test_honest_blurs_pass_every_case(name):
    found = verdicts(BLUR, BLUR_CORRECT[name])
    assert all(v == "ok" for v in found.values()), found


@pytest.mark.slow
@pytest.mark.nvcc
@pytest.mark.solutions
@pytest.mark.parametrize("exercise_id", ["rgb_to_gray", "blur"])
def test_the_solutions_compile_without_spills_or_local_arrays(exercise_id):
    spec = exercise(exercise_id)
    result = build.build_shared_library(ROOT / "solutions" / exercise_id / spec.variant("cuda").stub, device_only=True)
    assert result.ok, result.log
    assert all(k["spill_stores"] == 0 and k["stack_bytes"] == 0 for k in result.resources), result.resources


# --- on a GPU: the real kernels ------------------------------------------------------------------------

LADDER_FIXTURES = {  # correct kernels of a ladder's first step: they pass numerics; their figure is printed
    ("rgb_to_gray", "rgb_to_gray_one_per_thread.cu"): "rgb_to_gray ladder step 1 (one pixel per thread)",
    ("blur", "blur_naive.cu"): "blur ladder step 1 (naive)",
}


@pytest.mark.gpu
@pytest.mark.parametrize("exercise_id", ["rgb_to_gray", "blur"])
def test_the_solution_reaches_85_percent_of_copy_bandwidth_and_prints_torch_beside_it(exercise_id):
    result = grade(resolve((exercise_id,)), source="solutions", seed=21, record=False)
    assert result.status == "passed", result.verdict
    print("\n" + figure_line(f"{exercise_id} solution", result))
    assert (result.timings[-1].roofline_pct or 0) >= 85


@pytest.mark.gpu
@pytest.mark.parametrize("exercise_id", ["rgb_to_gray", "blur"])
def test_the_stub_fails_on_the_gpu(exercise_id):
    result = grade(resolve((exercise_id,)), source="stubs", seed=5, record=False)
    assert first_failure(result).details.get("code") == "not_written", result.verdict


@pytest.mark.bench
@pytest.mark.gpu
@pytest.mark.parametrize("exercise_id,name", list(LADDER_FIXTURES))
def test_the_first_ladder_step_passes_numerics_and_prints_its_figure(exercise_id, name):
    result = grade_fixture(exercise_id, name)
    assert next(c for c in result.checks if c.name == "numerics").status == "passed", result.verdict
    if result.timings:
        print("\n" + figure_line(LADDER_FIXTURES[(exercise_id, name)], result))
