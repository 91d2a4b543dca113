"""cublas_attention (100-day plan, day 19): self-attention as two cublasSgemmStridedBatched calls around the
learner's row softmax, on an N x N workspace of their own.

On the CPU the solution's calls are played in torch on the memory cuBLAS would read (column-major, leading
dimensions, batch strides) and judged with the grader's own checks over the spec's cases: the honest plan
passes them all, and each classic mistake — the softmax without its row max, the scale ignored, k not
transposed, the workspace's batch stride not its row stride times N — fails some case. Where libcublas and its
headers are present the stub and solution compile and link for sm_90; elsewhere those tests skip and say why.
On a GPU (`pytest -m gpu -s`) the solution and the stub are graded and the solution's figures printed beside
torch's; the mistakes edited into the solution are the spec's [[mistakes]] (tests/test_exercise_mistakes.py)."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import ROOT
from simulated_kernels import cpu_cases, exercise, figure_line, first_failure, store, verdicts

from grader.core.discovery import resolve
from grader.run.grade import grade
from grader.toolchain import build

SPEC = exercise("cublas_attention")
NVCC = build.find_nvcc()
CUBLAS_MISSING = build.link_flags(["cublas"], NVCC)[1] if NVCC else ["cublas"]
needs_cublas = pytest.mark.skipif(
    bool(CUBLAS_MISSING) or NVCC is None, reason=build.missing_library_message(["cublas"]) if NVCC else "nvcc not found"
)


# --- cuBLAS's strided-batched call, played on the CPU ------------------------------------------------


def batched_column_major(t: torch.Tensor, batch: int, rows: int, cols: int, ld: int, stride: int) -> torch.Tensor:
    """The batch of rows x cols column-major matrices (leading dimension ld, `stride` apart) cuBLAS reads at t."""
    storage = t.new_empty(0).set_(t.untyped_storage())
    return storage.as_strided((batch, rows, cols), (stride, 1, ld), t.storage_offset())


def sgemm_strided_batched(
    trans_a: bool,
    trans_b: bool,
    m: int,
    n: int,
    k: int,
    alpha: float,
    A,
    lda,
    stride_a,
    B,
    ldb,
    stride_b,
    C,
    ldc,
    stride_c,
    batch: int,
) -> None:
    """C_i = alpha op(A_i) op(B_i) (beta = 0) for i < batch; a leading dimension smaller than its stored matrix's
    rows is refused (CUBLAS_STATUS_INVALID_VALUE) and nothing is written."""
    a_rows, a_cols = (k, m) if trans_a else (m, k)
    b_rows, b_cols = (n, k) if trans_b else (k, n)
    if lda < max(1, a_rows) or ldb < max(1, b_rows) or ldc < max(1, m):
        return
    try:
        a = batched_column_major(A, batch, a_rows, a_cols, lda, stride_a)
        b = batched_column_major(B, batch, b_rows, b_cols, ldb, stride_b)
        product = alpha * (a.transpose(1, 2) if trans_a else a) @ (b.transpose(1, 2) if trans_b else b)
        batched_column_major(C, batch, m, n, ldc, stride_c).copy_(product)
    except RuntimeError:  # past the tensors' memory: on a GPU, another allocation or a fault
        return


def attention_model(subtract_max=True, use_scale=True, trans_k=True, s_batch_stride=None):
    """The solution's plan: S^T = scale k q^T (k read as k^T, transposed back), a row softmax in place on S
    (row stride ld = N rounded up to 4), out^T = v^T P^T."""

    def model(inputs, outputs, params):
        q, k, v, out = inputs["q"], inputs["k"], inputs["v"], outputs["out"]
        B, N, d = params["B"], params["N"], params["d"]
        scale = params["scale"] if use_scale else 1 / math.sqrt(d)
        ld = (N + 3) // 4 * 4
        stride = s_batch_stride(N, ld) if s_batch_stride else N * ld
        S = torch.full((B * N * ld,), float("nan"), dtype=torch.float32)  # cudaMallocAsync's garbage
        sgemm_strided_batched(trans_k, False, N, N, d, scale, k, d, N * d, q, d, N * d, S, ld, stride, B)
        rows = S.as_strided((B * N, N), (ld, 1))
        shift = rows.max(dim=1, keepdim=True).values if subtract_max else 0.0
        weights = torch.exp(rows - shift)
        rows.copy_(weights / weights.sum(dim=1, keepdim=True))
        sgemm_strided_batched(False, False, d, N, N, 1.0, v, d, N * d, S, ld, stride, out, d, N * d, B)

    return model


def torch_float32(inputs, outputs, params):
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    store(outputs["out"], torch.softmax(q @ k.transpose(1, 2) * params["scale"], dim=-1) @ v)


MISTAKES = {
    "the softmax without its row max (expf(s) overflows)": attention_model(subtract_max=False),
    "the scale argument ignored (1/sqrt(d) hard-coded)": attention_model(use_scale=False),
    "k not transposed back (CUBLAS_OP_N for k)": attention_model(trans_k=False),
    "S's batch stride N * N while its rows are ld apart": attention_model(s_batch_stride=lambda N, ld: N * N),
}


def test_the_cases_have_ragged_n_odd_d_large_scores_a_batch_and_a_scale_of_their_own():
    cases = cpu_cases(SPEC)
    assert {c.params["N"] for c in cases} >= {1, 17, 100, 333} and {c.params["d"] for c in cases} >= {33, 40, 64, 128}
    assert max(c.params["B"] for c in cases) == 8
    assert any(c.inputs.get("q", {}).get("scale") == 30.0 for c in cases)
    assert any(abs(c.params["scale"] - c.params["d"] ** -0.5) > 1e-6 for c in cases)
    assert all(abs(c.params["scale"] - c.params["d"] ** -0.5) < 1e-12 for c in SPEC.performance.cases)


def test_the_workspace_is_the_learners_so_the_spec_caps_no_memory_and_the_readme_says_so():
    assert SPEC.performance.max_extra_bytes is None  # cudaMallocAsync is not seen by torch's allocator
    assert SPEC.performance.flops == "4 * B * N * N * d" and SPEC.performance.is_compute_bound
    readme = (SPEC.folder / "README.md").read_text()
    assert "B·N²" in readme and "cudaMallocAsync" in readme and "not counted" in readme


@pytest.mark.parametrize(
    "model", [attention_model(), torch_float32], ids=["the solution's cuBLAS calls", "torch float32"]
)
def test_honest_float32_attention_passes_every_case(model):
    found = verdicts(SPEC, model)
    assert all(v == "ok" for v in found.values()), found


@pytest.mark.parametrize("name", list(MISTAKES))
def test_every_classic_mistake_fails_some_case(name):
    found = verdicts(SPEC, MISTAKES[name], until_failure=True)
    assert any(v != "ok" for v in found.values()), f"{name} passes every case: {found}"


def test_without_the_row_max_the_large_score_cases_fail_and_only_they():
    found = verdicts(SPEC, MISTAKES["the softmax without its row max (expf(s) overflows)"])
    large = {label for label in found if "q scale=30.0" in label or "k offset=100.0" in label}
    assert len(large) == 3 and {found[label] for label in large} == {"mismatch"}, found
    assert all(found[label] == "ok" for label in set(found) - large), found


# --- the real files ----------------------------------------------------------------------------------


@pytest.mark.slow
@needs_cublas
@pytest.mark.solutions
@pytest.mark.parametrize("folder", ["exercises", "solutions"])
def test_the_stub_and_the_solution_build_for_sm_90_without_spills(folder):
    result = build.build_shared_library(
        ROOT / folder / "cublas_attention" / "cublas_attention.cu", "sm_90", link=["cublas"]
    )
    assert result.ok, result.log
    assert not any(k["spill_stores"] for k in result.resources)


@pytest.mark.gpu
@pytest.mark.solutions
def test_the_solution_passes_and_prints_its_figures_beside_torch():
    result = grade(resolve(("cublas_attention",)), source="solutions", seed=21, record=False)
    assert result.status == "passed", result.verdict
    print("\n" + figure_line("cublas_attention solution", result))


@pytest.mark.gpu
def test_the_stub_fails_as_not_written():
    result = grade(resolve(("cublas_attention",)), source="stubs", seed=5, record=False)
    assert first_failure(result).details.get("code") == "not_written", result.verdict
