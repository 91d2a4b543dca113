"""The embedding layer (transformer-operator course, "embedding and LM head"): `embedding` (the forward, a
gather of rows by int64 token id) and `embedding_backward` (a scatter-add of each token's gradient into its
row, with atomics: repeated ids race without them).

On the CPU the kernels are played in torch against the spec's cases with the grader's own checks
(simulated_kernels.py): the classic mistakes each fail some case — int64 ids read as int32, float4 rows
without the scalar tail, a plain `+=` that keeps one of the additions racing into a row (the all-ids-equal
case), a gradient never zeroed — and honest kernels pass every case. The stubs, solutions and ladder fixtures
compile for sm_90. On a GPU (`pytest -m gpu -s`) the real files are graded and the solutions' GB/s printed
beside torch's (F.embedding, aten::embedding_dense_backward); the mistakes' real files are the specs'
[[mistakes]] (tests/test_exercise_mistakes.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import ROOT
from cuda_checks import build_without_spills, compile_fixtures, fixture_passes_numerics
from simulated_kernels import (
    cpu_cases,
    exercise,
    fails_somewhere,
    figure_line,
    first_failure,
    store,
    trial_data,
    verdicts,
)

from grader.checks import hints
from grader.core.discovery import resolve
from grader.core.records import FAILED, Check, GradeResult
from grader.run.grade import grade

FORWARD, BACKWARD = exercise("embedding"), exercise("embedding_backward")


def ids_as_int32(ids: torch.Tensor) -> torch.Tensor:
    """What `const int* ids` reads from int64 ids: low and high halves in turn (little-endian)."""
    return ids.contiguous().view(torch.int32).flatten()[: ids.numel()].long().reshape(ids.shape)


# --- the forward ----------------------------------------------------------------------------------------


def gather(inputs, outputs, params):
    store(outputs["out"], inputs["weight"][inputs["ids"]])


def gather_ids_as_int32(inputs, outputs, params):
    store(outputs["out"], inputs["weight"][ids_as_int32(inputs["ids"]) % params["V"]])


def gather_float4_without_tail(inputs, outputs, params):
    full = params["C"] - params["C"] % 4
    store(outputs["out"][..., :full], inputs["weight"][inputs["ids"]][..., :full])


def gather_grid_rounded_down(inputs, outputs, params):
    """(B T) / 8 blocks of 8 warps, rounded down: the last tokens are never copied."""
    n = params["B"] * params["T"]
    flat = outputs["out"].view(n, params["C"])
    done = n // 8 * 8
    store(flat[:done], inputs["weight"][inputs["ids"].flatten()[:done]])


FORWARD_MISTAKES = {
    "int64 ids read as int32": gather_ids_as_int32,
    "float4 copies without the C % 4 tail": gather_float4_without_tail,
    "a grid of (B T) / 8 blocks, rounded down": gather_grid_rounded_down,
}


def test_the_ids_include_the_first_and_last_rows_repeats_and_a_vocabulary_past_2_to_the_15():
    for spec in (FORWARD, BACKWARD):
        for index, case in enumerate(cpu_cases(spec)):
            ids = trial_data(spec, case, 17 + 1000 * index, 0)[0]["ids"]
            assert ids.dtype == torch.int64 and 0 <= int(ids.min()) and int(ids.max()) == case.params["V"] - 1
            if case.inputs.get("ids", {}).get("transform") != "one_token":
                assert int(ids.flatten()[0]) == 0
        assert any(c.inputs.get("ids", {}).get("transform") == "one_token" for c in cpu_cases(spec))
        assert any(c.params["V"] > 2**15 for c in cpu_cases(spec)) and any(c.params["C"] % 4 for c in cpu_cases(spec))


@pytest.mark.parametrize("name", list(FORWARD_MISTAKES))
def test_every_classic_forward_mistake_fails_some_case(name):
    found = fails_somewhere(FORWARD, FORWARD_MISTAKES[name])
    assert any(v != "ok" for v in found.values()), f"{name} passes every case: {found}"


def test_an_honest_gather_passes_every_case():
    assert all(v == "ok" for v in verdicts(FORWARD, gather).values())


# --- the backward ---------------------------------------------------------------------------------------


def scatter_add(inputs, outputs, params, ids=None, start=None):
    C = params["C"]
    ids = inputs["ids"] if ids is None else ids
    dweight = torch.zeros(params["V"], C) if start is None else start
    dweight.index_add_(0, ids.flatten(), inputs["dout"].reshape(-1, C))  # float32, as atomics add
    store(outputs["dweight"], dweight)


def scatter_plain_add(inputs, outputs, params):
    """A non-atomic `+=` at its worst: of the tokens racing into a row, the last one's store wins."""
    dweight = torch.zeros(params["V"], params["C"])
    dweight[inputs["ids"].flatten()] = inputs["dout"].reshape(-1, params["C"])
    store(outputs["dweight"], dweight)


def scatter_never_zeroed(inputs, outputs, params):
    scatter_add(inputs, outputs, params, start=outputs["dweight"].clone())  # whatever the output held (poison)


def scatter_ids_as_int32(inputs, outputs, params):
    scatter_add(inputs, outputs, params, ids=ids_as_int32(inputs["ids"]) % params["V"])


BACKWARD_MISTAKES = {
    "a plain += (tokens with one id race)": scatter_plain_add,
    "dweight never zeroed": scatter_never_zeroed,
    "int64 ids read as int32": scatter_ids_as_int32,
}


@pytest.mark.parametrize("name", list(BACKWARD_MISTAKES))
def test_every_classic_backward_mistake_fails_some_case(name):
    found = fails_somewhere(BACKWARD, BACKWARD_MISTAKES[name])
    assert any(v != "ok" for v in found.values()), f"{name} passes every case: {found}"


def test_the_race_fails_the_all_ids_equal_case_and_passes_where_no_id_repeats():
    found = verdicts(BACKWARD, scatter_plain_add)
    one_token = next(c for c in cpu_cases(BACKWARD) if c.inputs.get("ids", {}).get("transform") == "one_token")
    assert found[one_token.label()] == "mismatch", found
    assert found[cpu_cases(BACKWARD)[0].label()] == "ok", found  # one token: nothing to race with


def test_an_honest_scatter_add_passes_every_case():
    assert all(v == "ok" for v in verdicts(BACKWARD, scatter_add).values())


def unwritten_dweights_hint(path: Path) -> str:
    """The hint a grade of `path` shows where no element of dweight came back written (the first case, on a CPU)."""
    message = "B=1 T=1 V=1 C=1, trial 1: no element of dweight was written — not implemented yet?"
    check = Check("numerics", FAILED, message, {"code": "not_written", "case": {"B": 1, "T": 1, "V": 1, "C": 1}})
    result = GradeResult("embedding_backward", "cuda", "learner", 11, checks=[check], file=str(path))
    hints.annotate(result, BACKWARD)
    return check.details["hint"]


def test_nothing_written_is_the_stub_while_its_todos_stand_and_dweight_never_zeroed_once_they_are_gone(tmp_path):
    """The stub and a kernel adding into dweight never zeroed both leave its poison NaN (on a CPU): the file's
    TODOs tell them apart, so each reads its own hint (the not-zeroed grade itself: tests/test_exercise_mistakes.py)."""
    stub = ROOT / "exercises" / "embedding_backward" / "embedding_backward.cu"
    assert unwritten_dweights_hint(stub).startswith("still the stub? Fill in the TODOs in embedding_backward.cu")
    filled_in = tmp_path / stub.name
    filled_in.write_text(stub.read_text().replace("TODO", "step"))
    not_zeroed = next(m for m in BACKWARD.mistakes if m.name == "not_zeroed")
    assert unwritten_dweights_hint(filled_in) == not_zeroed.hint


# --- compiled for sm_90 ------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.nvcc
@pytest.mark.solutions
def test_the_stubs_and_solutions_build_and_the_solutions_spill_nothing():
    for exercise_id in ("embedding", "embedding_backward"):
        name = f"{exercise_id}.cu"
        build_without_spills([ROOT / "exercises" / exercise_id / name, ROOT / "solutions" / exercise_id / name])


LADDERS = {"embedding": "embedding_warp_per_token.cu", "embedding_backward": "embedding_backward_warp_atomics.cu"}


@pytest.mark.slow
@pytest.mark.nvcc
def test_the_ladder_fixtures_compile():
    compile_fixtures(list(LADDERS.values()))


# --- on a GPU: the real kernels -------------------------------------------------------------------------


@pytest.mark.gpu
def test_the_forward_solution_reaches_85_percent_of_copy_bandwidth_and_prints_torch_beside_it():
    result = grade(resolve(("embedding",)), source="solutions", seed=21, record=False)
    assert result.status == "passed", result.verdict
    print("\n" + figure_line("embedding solution", result))
    assert (result.timings[-1].roofline_pct or 0) >= 85


@pytest.mark.gpu
def test_the_backward_solution_passes_and_prints_torch_beside_it():
    result = grade(resolve(("embedding_backward",)), source="solutions", seed=21, record=False)
    assert result.status == "passed", result.verdict
    print("\n" + figure_line("embedding_backward solution", result))
    print(
        "contention (all ids equal): "
        + "; ".join(f"you {t.learner_ms:.4g} ms, torch {t.torch_ms or 0:.4g} ms" for t in result.timings[:1])
    )


@pytest.mark.gpu
@pytest.mark.parametrize("exercise_id", ["embedding", "embedding_backward"])
def test_the_stubs_fail_on_the_gpu(exercise_id):
    result = grade(resolve((exercise_id,)), source="stubs", seed=5, record=False)
    assert first_failure(result).details.get("code") == "not_written", result.verdict


@pytest.mark.bench
@pytest.mark.gpu
@pytest.mark.parametrize("exercise_id", list(LADDERS))
def test_the_ladder_step_2_kernels_pass_numerics_and_print_their_figures(exercise_id):
    fixture_passes_numerics(exercise_id, LADDERS[exercise_id], f"{exercise_id} ladder step 2")
