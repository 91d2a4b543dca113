"""cross_entropy (transformer-operator course, step 6): each row's loss and the gradient of their mean, from
bfloat16 logits and int64 targets with ignore_index (-100) rows, in one call (forward and backward).

On the CPU the kernels are played in torch (float32 math on the bfloat16 logits, as a CUDA kernel computes)
against the spec's cases with the grader's own checks (tests/cuda_rows.py): honest kernels pass every case
(one sum per row, or 256 per-thread partial sums merged), each classic mistake fails the case built for it
(no max subtraction, ignore_index not handled, the mean over M, a bfloat16 running sum, rows found with V,
16-byte loads whenever V % 8 == 0, ignored rows left unwritten), and the reference is F.cross_entropy and
autograd's gradient. On a GPU (`python -m pytest -m gpu -s tests/test_cross_entropy.py`) the solution, the
stub and the ladder's first step are graded, and the ladder's figures printed beside PyTorch's forward and
backward; the mistakes edited into the solution are the spec's [[mistakes]] (tests/test_exercise_mistakes.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import ROOT, submission
from cuda_checks import build_without_spills, compile_fixtures
from cuda_rows import cuda_cases, misaligned_rows, rows_at_stride_n, verdict
from simulated_kernels import first_failure

from grader.checks.checking import load_reference
from grader.checks.inputs import generate
from grader.core.discovery import discover_exercises, resolve
from grader.run.grade import grade

SPEC = discover_exercises()["cross_entropy"]
REFERENCE = load_reference(SPEC.folder / "reference.py")
SOLUTION = ROOT / "solutions" / "cross_entropy" / "cross_entropy.cu"
STUB = ROOT / "exercises" / "cross_entropy" / "cross_entropy.cu"
IGNORE = -100
CASES = cuda_cases(SPEC)


# --- kernels played on the CPU ------------------------------------------------------------------------------


def row_sums(e: torch.Tensor, threads: int | None, bf16: bool) -> torch.Tensor:
    """Each row's sum of e (float32): in one go, or as `threads` per-thread running sums (column j to thread
    j % threads) merged at the end; `bf16`: the running sums kept in bfloat16, as a kernel with a
    __nv_bfloat16 accumulator does."""
    if threads is None and not bf16:
        return e.sum(dim=-1)
    threads = threads or 256
    M, V = e.shape
    lanes = F.pad(e, (0, (-V) % threads)).reshape(M, -1, threads)
    acc = torch.zeros(M, threads, dtype=torch.bfloat16 if bf16 else torch.float32)
    for step in range(lanes.shape[1]):
        acc = (acc.float() + lanes[:, step]).to(acc.dtype)
    return acc.float().sum(dim=-1)


def cross_entropy_float32(
    t,
    params,
    *,
    subtract_max=True,
    ignore=True,
    mean_over_m=False,
    threads=None,
    bf16_sum=False,
    rows_at_v=False,
    zero_ignored=True,
):
    """A float32 kernel's losses and dlogits (bfloat16), with one classic mistake switched on by name."""
    x, targets, d = t["logits"], t["targets"], t["dlogits"]
    if rows_at_v:  # row i found at i * V, not at i * row_stride
        x, d = rows_at_stride_n(x), rows_at_stride_n(d)
    xf = x.float()
    M, V = xf.shape
    valid = targets != IGNORE if ignore else torch.ones(M, dtype=torch.bool)
    m = xf.max(dim=-1).values if subtract_max else torch.zeros(M)
    e = torch.exp(xf - m[:, None])
    s = row_sums(e, threads, bf16_sum)
    lse = m + torch.log(s)
    picked = picked_logit(x, targets)
    n = M if mean_over_m else int(valid.sum())
    grad = e / s[:, None]
    classes = targets.clamp(min=0)
    hit = torch.zeros_like(grad, dtype=torch.bool).scatter_(1, classes[:, None], (targets >= 0)[:, None])
    grad = (grad - hit.float()) / n
    t["losses"].copy_(torch.where(valid, lse - picked, torch.zeros(())))
    rows = torch.ones(M, dtype=torch.bool) if zero_ignored else valid
    d[rows] = torch.where(valid[:, None], grad, torch.zeros(()))[rows].to(d.dtype)


def picked_logit(x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """x[i, targets[i]] as a kernel reads it: for a target of -100, the value 100 elements before the row
    (the previous row's, or NaN before the tensor: memory that is not the row's)."""
    flat = x.new_empty(0).set_(x.untyped_storage()).float()
    starts = x.storage_offset() + torch.arange(x.shape[0]) * x.stride(0)
    where = starts + targets
    inside = where >= 0
    return torch.where(inside, flat[where.clamp(min=0)], torch.full((), float("nan")))


def play(**mistake):
    def run(t, params):
        cross_entropy_float32(t, params, **mistake)

    return run


def vectors_whenever_v_is_a_multiple_of_8(t, params):
    """16-byte loads chosen on V % 8 == 0 alone: a row off 16 bytes is a misaligned-address CUDA error."""
    if t["logits"].shape[-1] % 8 == 0 and any(misaligned_rows(t[name]) for name in ("logits", "dlogits")):
        return "cuda_error"
    return play()(t, params)


HONEST = {"one float32 sum per row": play(), "256 per-thread sums, merged": play(threads=256)}
MISTAKES = {  # name: (play, a label fragment of a case it must fail, the verdict there)
    "no max subtraction (+1000)": (play(subtract_max=False), "offset=1000.0", "mismatch"),
    "no max subtraction (-1000)": (play(subtract_max=False), "offset=-1000.0", "mismatch"),
    "ignore_index not handled": (play(ignore=False), "M=3 V=5", "mismatch"),
    "the mean over all M rows": (play(mean_over_m=True), "M=3 V=5", "mismatch"),
    "a bfloat16 running sum": (play(bf16_sum=True), "M=5 V=50257", "mismatch"),
    "rows found with V, not the row stride": (
        play(rows_at_v=True),
        "V=781 dtype=bfloat16 (logits layout=row_slice)",
        "mismatch",
    ),
    "16-byte loads whenever V % 8 == 0": (vectors_whenever_v_is_a_multiple_of_8, "M=9 V=1024", "cuda_error"),
    "ignored rows' gradient left unwritten": (play(zero_ignored=False), "M=3 V=5", "partial_write"),
    "nothing written (the stub)": (lambda t, params: None, "M=1 V=1", "not_written"),
}


def test_the_spec_passes_both_strides_and_takes_bfloat16_logits_and_int64_targets():
    cuda = SPEC.variants["cuda"]
    assert [a.name for a in cuda.args] == [
        "logits",
        "targets",
        "losses",
        "dlogits",
        "M",
        "V",
        "logits.stride(0)",
        "dlogits.stride(0)",
    ]
    assert cuda.dtypes == ["bfloat16"]
    tensors = {t.name: t for t in SPEC.inputs + SPEC.outputs}
    assert tensors["targets"].dtype == "int64" and tensors["losses"].dtype == "float32"


def test_cases_cover_ignored_rows_offsets_ragged_widths_and_both_layouts():
    labels = [c.label() for c in SPEC.cases]
    assert any("offset=1000.0" in s for s in labels) and any("offset=-1000.0" in s for s in labels)
    assert any("transform=all_valid" in s for s in labels)  # a case where the mean is over all M
    assert any("logits layout=row_slice" in s for s in labels) and any("dlogits layout=row_slice" in s for s in labels)
    assert {1, 5, 781, 50_257} <= {c.params["V"] for c in CASES}
    assert all(c.inputs.get("targets", {}).get("transform") == "all_valid" for c in SPEC.performance.cases)


def test_the_reference_is_torch_cross_entropy_and_its_gradient():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(7, 11, dtype=torch.float64, generator=gen) * 3
    targets = torch.tensor([3, 0, IGNORE, 10, 5, IGNORE, 1])
    losses, dlogits = REFERENCE(logits, targets)
    leaf = logits.clone().requires_grad_()
    loss = F.cross_entropy(leaf, targets)  # mean over the counted rows, ignore_index -100
    loss.backward()
    assert torch.allclose(losses, F.cross_entropy(logits, targets, reduction="none"), rtol=1e-12, atol=1e-14)
    assert torch.allclose(losses.sum() / 5, loss.detach(), rtol=1e-12)
    assert torch.allclose(dlogits, leaf.grad, rtol=1e-12, atol=1e-16)


@pytest.mark.parametrize("name", list(HONEST))
def test_honest_float32_kernels_pass_every_case(name):
    found = {c.label(): verdict(SPEC, c, HONEST[name]) for c in CASES}
    assert set(found.values()) == {"ok"}, found


@pytest.mark.parametrize("name", list(MISTAKES))
def test_each_classic_mistake_fails_on_the_case_built_for_it(name):
    run, fragment, code = MISTAKES[name]
    cases = [c for c in CASES if fragment in c.label()]
    assert cases, f"no case has {fragment!r}"
    assert verdict(SPEC, cases[0], run) == code


def test_p_minus_1_at_a_single_class_fits_its_own_tolerance_and_not_the_bfloat16_one():
    """M = V = 1: p = 1, so loss and gradient are exactly 0. A kernel computing p = exp2(x log2e - lse log2e)
    with a fused multiply-add (the solution: one FMA and one EX2) is an ulp or two of float32 off: on an H200
    1 of 10 validate runs failed at the bfloat16 table's atol of 1e-14 (1.19e-7 off). The case names its own."""
    case = next(c for c in SPEC.cases if c.params.get("V") == 1)
    dlogits = next(t for t in SPEC.outputs if t.name == "dlogits")
    log2e = torch.tensor(1.4426950408889634, dtype=torch.float32).double()

    def fma_exp2(x, c):  # exp2(fmaf(x, log2e, -c)): the product unrounded, one rounding at the end
        return torch.exp2((x.double() * log2e - c.double()).float())

    worst = 0.0
    for seed in range(300):
        x = generate(SPEC, case, seed)["logits"].float()
        s = fma_exp2(x, (x * log2e.float()))  # the row's one term, exp2 of x log2e - max log2e
        lse = x + torch.log(s)
        p = fma_exp2(x, lse * log2e.float())
        worst = max(worst, float((p - 1).abs().max()), float((lse - x).abs().max()))
    assert SPEC.tolerance_for("bfloat16").atol < worst < SPEC.tolerance_of(case, dlogits).atol, worst
    assert SPEC.tolerance_of(case, dlogits).atol < 1e-6  # a missing "- 1" (off by 1) still fails


@pytest.mark.slow
@pytest.mark.nvcc
@pytest.mark.solutions
def test_the_stub_the_solution_and_the_ladder_fixture_build_for_sm_90():
    build_without_spills([STUB, SOLUTION])
    compile_fixtures(["cross_entropy_plain.cu"])


# --- on a GPU --------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.solutions
def test_the_solution_passes_near_copy_bandwidth_and_prints_torch_beside_it():
    from cuda_checks import figures

    result = grade(resolve(("cross_entropy",)), source="solutions", seed=21, record=False)
    print("\ncross_entropy solution: " + figures(result))
    assert result.status == "passed", result.verdict
    last = result.timings[-1]
    assert (last.roofline_pct or 0) >= 85
    assert last.torch_ms and last.learner_ms < last.torch_ms


@pytest.mark.gpu
def test_the_stub_fails_with_nothing_written():
    result = grade(resolve(("cross_entropy",)), source="stubs", seed=5, record=False, quick=True)
    check = first_failure(result)
    assert check.name == "numerics" and check.details.get("code") == "not_written", result.verdict


@pytest.mark.gpu
def test_the_first_ladder_step_is_correct():
    result = grade(
        resolve(("cross_entropy",)), submission=submission("cross_entropy_plain.cu"), seed=5, record=False, quick=True
    )
    assert next(c for c in result.checks if c.name == "numerics").status == "passed", result.verdict


@pytest.mark.gpu
@pytest.mark.solutions
@pytest.mark.parametrize(
    "V,x_shift,d_shift",
    [(50_257, 1, 1), (50_257, 3, 0), (32_768, 0, 5), (128_256, 0, 0), (128_256, 2, 7), (200_003, 1, 0)],
)
def test_rows_at_any_offset_and_past_shared_memory_stay_exact(V, x_shift, d_shift):
    """Rows starting off 16 bytes (a tensor `shift` elements into its allocation), logits and dlogits at
    different offsets, and rows longer than shared memory holds (128,256 and 200,003 columns: read twice)."""
    from cuda_rows import cuda_caller

    caller = cuda_caller(SPEC, SOLUTION, role="solution")
    M = 6
    x = torch.randn(M * V + x_shift, device="cuda").to(torch.bfloat16)[x_shift:].view(M, V)
    d = torch.full((M * V + d_shift,), float("nan"), device="cuda", dtype=torch.bfloat16)[d_shift:].view(M, V)
    targets = torch.randint(0, V, (M,), device="cuda")
    targets[4] = IGNORE
    losses = torch.full((M,), float("nan"), device="cuda")
    caller({"logits": x, "targets": targets, "losses": losses, "dlogits": d}, {"M": M, "V": V})
    want_losses, want_d = REFERENCE(x.double(), targets)
    assert torch.allclose(losses.double(), want_losses, rtol=8e-3, atol=1e-14)
    assert torch.allclose(d.double(), want_d, rtol=8e-3, atol=1e-14)


def _solution_with(**defines):
    """The solution built for this GPU with -D defines, loaded as the grader loads it."""
    from grader.child import loading
    from grader.toolchain import build

    built = build.build_shared_library(SOLUTION, build.gpu_arch(), defines=defines)
    assert built.ok, built.log
    return loading.load(SPEC.variants["cuda"], SOLUTION, built.library, "solution")


@pytest.mark.gpu
@pytest.mark.solutions
@pytest.mark.slow  # a sweep (every ladder step timed): gpu and slow, out of the GPU tier
def test_ladder_figures_beside_torch_forward_and_backward():
    """Step 1 (three passes) and the solution at M = 8192, V = 32,768, with PyTorch's forward and backward
    (the grader's "torch" figure) and its forward alone (F.cross_entropy, the issue's anchor: 1,231 GB/s
    counting one read of the logits)."""
    from cuda_rows import cuda_caller, gbps

    from grader.child import timing

    M, V = 8192, 32_768
    x = torch.randn(M, V, device="cuda").to(torch.bfloat16)
    targets = torch.randint(0, V, (M,), device="cuda")
    params = {"M": M, "V": V}
    tensors = {"logits": x, "targets": targets, "losses": torch.empty(M, device="cuda"), "dlogits": torch.empty_like(x)}
    versions = {"1. three passes": submission("cross_entropy_plain.cu"), "4. solution": SOLUTION}
    contestants = {name: (lambda c=cuda_caller(SPEC, path): c(tensors, params)) for name, path in versions.items()}
    for slots in (2, 8):  # the solution's block size: 4 slots a thread is its default (1024 threads at V = 32,768)
        caller = _solution_with(SLOTS_PER_THREAD=slots)
        contestants[f"   solution, {slots} slots a thread"] = lambda c=caller: c(tensors, params)
    contestants["torch forward + backward"] = lambda: REFERENCE(x, targets)
    contestants["torch forward alone"] = lambda: F.cross_entropy(x, targets)
    measured = timing.time_alternating(contestants)
    copy_gbps = timing.measure_copy_bandwidth()
    print(f"\ncross_entropy {M}x{V} bfloat16 on {torch.cuda.get_device_name()} (copy {copy_gbps:.0f} GB/s):")
    rates = {}
    for name, m in measured.items():
        moved = M * V * 2 * (1 if name == "torch forward alone" else 2)  # the forward reads; + writing dlogits
        rates[name] = gbps(moved, m["median_ms"])
        print(
            f"  {name:26s} {m['median_ms'] * 1000:8.1f} us  {rates[name]:6.0f} GB/s  "
            f"{100 * rates[name] / copy_gbps:4.0f}% of roofline"
        )
    assert rates["4. solution"] >= 0.85 * copy_gbps
