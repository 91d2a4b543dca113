"""spmm_csr, and what the grader grew for it: a transform may declare keyword-only parameters, filled from
the case's sizes and the inputs drawn before it — how a CSR matrix is drawn (its column indices follow
its row pointers) with no grader code that knows about CSR.

On the CPU the CUDA kernels cannot run, so each classic mistake of the topic is played in torch on the
spec's own inputs, into the grader's own poisoned output, and judged with the grader's own checks: every
mistake must fail some case. The solution's plan (entries split across warps, the row of a chunk's first
entry found by a 32-way search, cut rows added, whole rows stored) is played the same way and passes.
The mistakes' fixtures (the spec's [[mistakes]]) are graded on the CPU emulator and on a GPU by
tests/test_exercise_mistakes.py. On a GPU (`python -m pytest -m gpu -s tests/test_spmm_csr.py`) the solution's
figures are printed beside torch's (cuSPARSE)."""

from __future__ import annotations

import pytest
import torch
from conftest import ROOT, submission
from cuda_checks import build_without_spills, compile_fixtures, numerics

from grader.checks.checking import compare, load_reference, reference_outputs
from grader.checks.inputs import generate, make_outputs, transform_function
from grader.core.discovery import discover_exercises, resolve
from grader.core.spec import Case, load_spec
from grader.run.grade import grade

SPEC = discover_exercises()["spmm_csr"]
REFERENCE = load_reference(SPEC.folder / "reference.py")
CPU_CASES = [c for c in SPEC.cases if not c.gpu_only]
SEED = 19
CHUNK = 256  # entries per warp in the solution


@pytest.fixture(scope="module")
def inputs():
    """Each CPU case's inputs for each of its trials (trial 1 scales the draw by 1.5), drawn once."""
    return {
        (i, trial): generate(SPEC, case, SEED + 1000 * i + trial, trial)
        for i, case in enumerate(CPU_CASES)
        for trial in range(SPEC.trials_for(case))
    }


# --- the grader's growth: transforms that take the case's sizes and earlier inputs by keyword --------------


def test_a_transform_gets_the_case_sizes_and_the_inputs_drawn_before_it(tmp_path):
    folder = tmp_path / "ex"
    folder.mkdir()
    (folder / "reference.py").write_text(
        "import torch\n\ndef reference(a, b):\n    return a\n\n"
        "def count_up(x, *, n):\n    return torch.arange(n)\n\n"
        "def follow(x, *, a, n, unknown=7):\n    return a.double() * 2 + n + unknown\n"
    )
    (folder / "spec.toml").write_text(
        'id = "ex"\n[variants.cuda]\nstub = "s.cu"\nentry = "f"\nargs = ["a", "b", "y"]\n'
        '[inputs.a]\nshape = ["n"]\ndtype = "int32"\ntransform = "count_up"\n'
        '[inputs.b]\nshape = ["n"]\ntransform = "follow"\n[outputs.y]\nshape = ["n"]\n'
        "[[cases]]\nn = 4\n[tolerance.float32]\natol = 0\nrtol = 0\n"
    )
    spec = load_spec(folder)
    made = generate(spec, spec.cases[0], 1)
    assert made["a"].tolist() == [0, 1, 2, 3] and made["a"].dtype == torch.int32
    assert made["b"].tolist() == [11.0, 13.0, 15.0, 17.0]  # a * 2 + n + the default it kept


def test_the_matrix_is_the_one_the_spec_describes_in_every_case_and_trial(inputs):
    for (i, trial), made in inputs.items():
        case, label = CPU_CASES[i].params, (CPU_CASES[i].label(), trial)
        row_ptr, col_idx = made["row_ptr"].long(), made["col_idx"].long()
        lengths = row_ptr.diff()
        assert row_ptr[0] == 0 and row_ptr[-1] == case["nnz"] and (lengths >= 0).all(), label
        assert lengths[case["M"] // 2] >= case["long_row"], label
        if case["M"] > 2:
            assert lengths[-1] == 0, label  # the last row empty
        rows = torch.repeat_interleave(torch.arange(case["M"]), lengths)
        key = rows * case["K"] + col_idx  # sorted and distinct within each row, inside [0, K)
        assert (key[1:] > key[:-1]).all() and int(col_idx.min()) >= 0 and int(col_idx.max()) < case["K"], label


def test_some_rows_are_empty_and_one_case_is_mostly_empty(inputs):
    empty = {
        CPU_CASES[i].label(): float((made["row_ptr"].diff() == 0).double().mean())
        for (i, trial), made in inputs.items()
        if trial == 0 and CPU_CASES[i].params["M"] > 100
    }
    assert all(share > 0.02 for share in empty.values()), empty
    assert max(empty.values()) > 0.5


def test_sizes_the_matrix_cannot_hold_are_refused_with_what_to_check():
    row_ptr, col_idx = (transform_function(SPEC, name) for name in ("csr_row_ptr", "csr_col_idx"))
    x = torch.rand(11, dtype=torch.float64)
    with pytest.raises(ValueError, match="long row cannot hold more than nnz"):
        row_ptr(x, M=10, nnz=5, long_row=6)
    pointers = row_ptr(x, M=10, nnz=50, long_row=20)
    with pytest.raises(ValueError, match="cannot have distinct columns among K=8"):
        col_idx(torch.rand(50, dtype=torch.float64), row_ptr=pointers, K=8)


# --- the exercise's cases against the classic mistakes, played in torch ----------------------------------


def rows_of(row_ptr: torch.Tensor) -> torch.Tensor:
    return torch.repeat_interleave(torch.arange(row_ptr.numel() - 1), row_ptr.long().diff())


def products(made: dict[str, torch.Tensor], B: torch.Tensor | None = None) -> torch.Tensor:
    """values[k] * B[col_idx[k], :] for every entry, in float32 (nnz x N)."""
    B = made["B"] if B is None else B
    return made["values"][:, None] * B[made["col_idx"].long()]


def summed(made, keep: torch.Tensor | None = None, B: torch.Tensor | None = None) -> torch.Tensor:
    """The rows' sums of the entries `keep` selects (all by default), in float32."""
    M, N = made["row_ptr"].numel() - 1, made["B"].shape[1]
    p = products(made, B)
    rows = rows_of(made["row_ptr"])
    if keep is not None:
        p, rows = p[keep], rows[keep]
    return torch.zeros(M, N).index_add_(0, rows, p)


def empty_rows_skipped(made, C):
    nonempty = made["row_ptr"].diff() > 0
    C[nonempty] = summed(made)[nonempty]


def last_entry_dropped(made, C):
    row_ptr = made["row_ptr"].long()
    position = torch.arange(int(row_ptr[-1])) - row_ptr[:-1][rows_of(row_ptr)]
    C.copy_(summed(made, keep=position < row_ptr.diff()[rows_of(row_ptr)] - 1))


def rows_capped(made, C, cap=1024):
    row_ptr = made["row_ptr"].long()
    position = torch.arange(int(row_ptr[-1])) - row_ptr[:-1][rows_of(row_ptr)]
    C.copy_(summed(made, keep=position < cap))


def column_major_b(made, C):
    K, N = made["B"].shape
    C.copy_(summed(made, B=made["B"].flatten().reshape(N, K).t()))


def chunk_segments(made, start_rows):
    """The solution's walk: per chunk of CHUNK entries, the row each entry is credited to (from the chunk's
    start row on, advancing at each row end) and whether the chunk held that whole row."""
    row_ptr = made["row_ptr"].long()
    nnz = int(row_ptr[-1])
    chunk = torch.arange(nnz) // CHUNK
    walked = torch.maximum(rows_of(row_ptr), start_rows[chunk])
    begin, end = chunk * CHUNK, torch.clamp((chunk + 1) * CHUNK, max=nnz)
    whole = (row_ptr[walked] >= begin) & (row_ptr[walked + 1] <= end)
    return chunk, walked, whole


def split_by_entries(made, C, start_row=None, cut_rows_stored=False):
    """Entries split across warps; cut rows' pieces added onto a zeroed C (or, the mistake, stored), whole
    rows stored — the stores applied last, so a row wrongly taken as whole loses the other pieces."""
    row_ptr = made["row_ptr"].long()
    M = row_ptr.numel() - 1
    starts = torch.tensor([(start_row or row_of)(row_ptr, M, e) for e in range(0, int(row_ptr[-1]), CHUNK)])
    chunk, walked, whole = chunk_segments(made, starts)
    segment = chunk * M + walked
    ids, slot = torch.unique(segment, return_inverse=True)
    pieces = torch.zeros(ids.numel(), C.shape[1]).index_add_(0, slot, products(made))
    piece_rows, piece_whole = ids % M, torch.zeros(ids.numel(), dtype=torch.bool).index_put_((slot,), whole)
    C.zero_()  # cudaMemsetAsync
    cut = ~piece_whole
    if cut_rows_stored:
        C[piece_rows[cut]] = pieces[cut]
    else:
        C.index_add_(0, piece_rows[cut], pieces[cut])  # atomicAdd
    C[piece_rows[piece_whole]] = pieces[piece_whole]  # the stores land last


def row_of(row_ptr: torch.Tensor, M: int, e: int) -> int:
    """The solution's 32-way search of row_ptr, line by line: the last r < M with row_ptr[r] <= e."""
    lo, hi = 0, M
    while hi - lo > 1:
        span = hi - lo
        few = span <= 33
        probes = [lo + 1 + lane if few else lo + span * (lane + 1) // 33 for lane in range(32)]
        count = sum(1 for p in probes if (p < hi if few else True) and int(row_ptr[p]) <= e)
        if few:
            return lo + count
        lo, hi = (probes[count - 1] if count > 0 else lo), (probes[count] if count < 32 else hi)
    return lo


def one_chain_for_the_long_row(made, C):
    """float32 everywhere, and the long row summed the worst way: one chain of adds per output."""
    C.copy_(summed(made))
    row_ptr = made["row_ptr"].long()
    long_at = (row_ptr.numel() - 1) // 2  # row M // 2
    chain = torch.zeros(C.shape[1])
    for p in products(made)[int(row_ptr[long_at]) : int(row_ptr[long_at + 1])]:
        chain = chain + p
    C[long_at] = chain


MISTAKES = {
    "empty rows never written": empty_rows_skipped,
    "the last entry of each row dropped": last_entry_dropped,
    "rows cut off at 1024 entries": rows_capped,
    "B read as column-major": column_major_b,
    "rows cut between warps stored, not added": lambda made, C: split_by_entries(made, C, cut_rows_stored=True),
    "the search one row too far": lambda made, C: split_by_entries(
        made, C, start_row=lambda row_ptr, M, e: min(M - 1, int(torch.searchsorted(row_ptr, e, right=True)))
    ),
}
CORRECT = {
    "one chain of float32 adds for the long row": one_chain_for_the_long_row,
    "the solution's plan: entries split across warps": split_by_entries,
}


def simulated_verdict(kernel, case: Case, made: dict[str, torch.Tensor]) -> str:
    """The grader's verdict code for `kernel` run on one case's inputs: ok, or how compare failed."""
    outputs = make_outputs(SPEC, case, "cpu")
    kernel(made, outputs["C"])
    (want,) = reference_outputs(REFERENCE, SPEC, made, case.params)
    result = compare("C", outputs["C"], want, SPEC.tolerance_of(case), case.label())
    return "ok" if result.ok else result.code


@pytest.mark.parametrize("name", list(MISTAKES))
def test_every_classic_mistake_fails_some_case(name, inputs):
    assert any(
        simulated_verdict(MISTAKES[name], CPU_CASES[i], made) != "ok"
        for (i, trial), made in inputs.items()
        if trial == 0
    ), f"{name} passes every case"


def test_unwritten_empty_rows_are_named_as_never_written(inputs):
    made = inputs[(5, 0)]  # the mostly-empty case
    assert CPU_CASES[5].params["nnz"] < CPU_CASES[5].params["M"]
    assert simulated_verdict(MISTAKES["empty rows never written"], CPU_CASES[5], made) == "partial_write"


@pytest.mark.parametrize("name", list(CORRECT))
def test_correct_products_pass_every_case_and_trial(name, inputs):
    for (i, trial), made in inputs.items():
        assert simulated_verdict(CORRECT[name], CPU_CASES[i], made) == "ok", (name, CPU_CASES[i].label(), trial)


def test_the_32_way_search_finds_every_chunks_first_row(inputs):
    for (i, trial), made in inputs.items():
        row_ptr, M = made["row_ptr"].long(), CPU_CASES[i].params["M"]
        for e in list(range(0, int(row_ptr[-1]), CHUNK)) + [int(row_ptr[-1]) - 1]:
            assert row_of(row_ptr, M, e) == int(torch.searchsorted(row_ptr, e, right=True)) - 1, (
                CPU_CASES[i].label(),
                e,
            )


# --- nvcc: the stub, the solution and the fixtures compile for sm_90 ----------------------------------------

FIXTURES = [
    "spmm_csr_thread_per_output.cu",
    "spmm_csr_warp_per_row.cu",
    "spmm_csr_empty_rows_unwritten.cu",
    "spmm_csr_b_column_major.cu",
]


@pytest.mark.slow
@pytest.mark.nvcc
@pytest.mark.solutions
def test_stub_and_solution_build_for_sm_90_and_the_solution_spills_nothing():
    build_without_spills([SPEC.folder / "spmm_csr.cu", ROOT / "solutions" / "spmm_csr" / "spmm_csr.cu"])


@pytest.mark.slow
@pytest.mark.nvcc
def test_the_fixtures_compile_for_sm_90():
    compile_fixtures(FIXTURES)


# --- on a GPU: the real kernels ------------------------------------------------------------------------------


def figures(result) -> str:
    return "; ".join(
        f"{t.case}: you {t.learner_ms or 0:.4g} ms ({t.roofline_pct or 0:.1f}%), solution "
        f"{t.solution_ms or 0:.4g} ms, torch {t.torch_ms or 0:.4g} ms"
        for t in result.timings
    )


@pytest.mark.gpu
@pytest.mark.solutions
def test_the_solution_passes_and_is_at_least_as_fast_as_torchs_csr_product():
    result = grade(resolve(("spmm_csr",)), source="solutions", seed=SEED, record=False)
    assert result.status == "passed", result.verdict
    print(f"\nspmm_csr solution: {figures(result)}")
    t = result.timings[-1]
    print(
        f"spmm_csr at the largest size: solution {t.learner_ms:.4g} ms, torch CSR @ dense (cuSPARSE) "
        f"{t.torch_ms:.4g} ms: {t.torch_ms / t.learner_ms:.2f}x"
    )
    assert t.learner_ms <= t.torch_ms


@pytest.mark.gpu
def test_the_stub_fails_numerics_on_the_gpu():
    result = grade(resolve(("spmm_csr",)), source="stubs", seed=SEED, record=False)
    assert numerics(result).details.get("code") == "not_written", result.verdict


@pytest.mark.bench
@pytest.mark.gpu
@pytest.mark.parametrize("name", ["spmm_csr_thread_per_output.cu", "spmm_csr_warp_per_row.cu"])
def test_ladder_steps_pass_numerics_and_print_their_figures(name):
    result = grade(resolve(("spmm_csr",)), submission=submission(name), seed=SEED, record=False)
    assert next(c for c in result.checks if c.name == "numerics").status == "passed", result.verdict
    print(f"\nspmm_csr ladder {name}: {figures(result)}")
