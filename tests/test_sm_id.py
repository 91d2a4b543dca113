"""sm_id (the 100-day challenge's day 6: which SM ran each block, read from %smid through inline PTX),
and what the grader grew for it: an output whose right answer is not unique is judged by a property
check that the exercise's reference.py defines and spec.toml names (`[outputs.X] check = "name"`),
instead of elementwise comparison (grader/checks/checking.py: judge_output).

On the CPU the grader's side is tested directly and end to end (a Triton exercise under the
interpreter whose output may be any permutation); sm_id's check is tested on simulated outputs, right
ones and each classic mistake's. The tests marked gpu grade the real solution and stub; the mistakes' fixtures
(the spec's [[mistakes]]) are graded on the CPU emulator and on a GPU by tests/test_exercise_mistakes.py."""

from __future__ import annotations

import ctypes

import pytest
import torch
from conftest import ROOT

from grader.checks.checking import judge_output, load_reference, reference_outputs
from grader.checks.inputs import INT_POISON, make_outputs
from grader.core import exprs
from grader.core.discovery import Target, discover_exercises, resolve
from grader.core.spec import SpecError, load_spec
from grader.run.grade import grade
from grader.toolchain import build

SPEC = discover_exercises()["sm_id"]
REFERENCE = load_reference(SPEC.folder / "reference.py")
H100 = {"type": "cuda", "name": "NVIDIA H100 80GB HBM3", "multiprocessors": 132}


def judged(sm_ids, block_ids, blocks: int, device=H100):
    """judge_output's verdict on both outputs, as the grader gives it: the first failing one's code and message."""
    case_params = {"blocks": blocks}
    refs = reference_outputs(REFERENCE, SPEC, {}, case_params)
    tol = SPEC.tolerance_for("float32")
    for spec_out, got, ref in zip(SPEC.outputs, (sm_ids, block_ids), refs):
        result = judge_output(
            SPEC, spec_out, got.to(torch.int32), ref, tol, f"blocks={blocks}", params=case_params, device=device
        )
        if not result.ok:
            return result.code, result.message
    return "ok", ""


def round_robin(blocks: int, sms: int = 132) -> torch.Tensor:
    return torch.arange(blocks) % sms


def scattered(blocks: int, sms: int = 132) -> torch.Tensor:
    """What a GPU gives: every SM used, in no fixed order."""
    return torch.randint(0, sms, (blocks,), generator=torch.Generator().manual_seed(blocks))


SIZES = [c.params["blocks"] for c in SPEC.cases + SPEC.performance.cases[-1:]]


# --- the grader's growth: a property check named by the spec --------------------------------------------


def test_the_spec_names_a_check_for_sm_ids_only():
    checks = {t.name: t.check for t in SPEC.outputs}
    assert checks == {"sm_ids": "check_sm_ids", "block_ids": None}


def _write(folder, outputs: str, inputs: str = ""):
    folder.mkdir()
    (folder / "spec.toml").write_text(
        f'id = "{folder.name}"\n[variants.triton]\nstub = "a.py"\nentry = "f"\nargs = ["y", "n"]\n{inputs}'
        f'[outputs.y]\nshape = ["n"]\n{outputs}[[cases]]\nn = 3\n[tolerance.float32]\natol = 0\nrtol = 0\n'
    )
    return folder


def test_a_check_must_name_a_function_and_belongs_to_outputs(tmp_path):
    assert load_spec(_write(tmp_path / "a", 'check = "is_permutation"\n')).outputs[0].check == "is_permutation"
    with pytest.raises(SpecError, match="y.check = 'no such': an output's check names a function"):
        load_spec(_write(tmp_path / "b", 'check = "no such"\n'))
    with pytest.raises(SpecError, match="inputs have no check: remove it"):
        load_spec(_write(tmp_path / "c", "", '[inputs.x]\nshape = ["n"]\ncheck = "f"\n'))


def test_a_check_missing_from_reference_py_is_named_with_the_fix(tmp_path):
    folder = _write(tmp_path / "ex", 'check = "is_permutation"\n')
    (folder / "reference.py").write_text("def reference(*, n):\n    return None\n")
    spec = load_spec(folder)
    with pytest.raises(SpecError, match=r"check 'is_permutation' is not a function of .*reference.py: define"):
        judge_output(spec, spec.outputs[0], torch.zeros(3), torch.zeros(3), spec.tolerance_for("float32"), "n=3")


def test_outputs_without_a_check_are_compared_as_before():
    block_ids = SPEC.outputs[1]
    want = torch.arange(5, dtype=torch.int32)
    tol = SPEC.tolerance_for("float32")
    assert judge_output(SPEC, block_ids, want.clone(), want, tol, "blocks=5").ok
    wrong = want.clone()
    wrong[2] = 7
    assert judge_output(SPEC, block_ids, wrong, want, tol, "blocks=5").code == "mismatch"


def test_elements_never_written_fail_before_the_check_runs():
    sm_ids = SPEC.outputs[0]
    poisoned = make_outputs(SPEC, SPEC.cases[2], "cpu")["sm_ids"]
    placeholder = torch.zeros_like(poisoned)
    tol = SPEC.tolerance_for("float32")
    assert (
        judge_output(SPEC, sm_ids, poisoned, placeholder, tol, "x", params={"blocks": 1000}, device=H100).code
        == "not_written"
    )
    poisoned[:-3] = 5
    result = judge_output(SPEC, sm_ids, poisoned, placeholder, tol, "x", params={"blocks": 1000}, device=H100)
    assert result.code == "partial_write" and "3 of 1000 elements of sm_ids never written" in result.message
    assert int(poisoned[-1]) == INT_POISON


PERMUTATION_SPEC = """
id = "perm"
[variants.triton]
stub = "perm.py"
entry = "perm"
args = ["ids"]
[outputs.ids]
shape = ["n"]
dtype = "int32"
check = "is_permutation"
[[cases]]
n = 1
[[cases]]
n = 1000
[tolerance.float32]
atol = 0
rtol = 0
[performance]
bytes = "4 * n"
[[performance.cases]]
n = 1000
"""

PERMUTATION_REFERENCE = """
import torch


def reference(*, n, device="cpu"):
    return torch.arange(n, dtype=torch.int32, device=device)


def is_permutation(got, *, params):
    if torch.equal(got.sort().values, torch.arange(params["n"], dtype=got.dtype)):
        return None
    return "not a permutation of 0 .. n-1: every index must appear once"
"""

PERMUTATION_KERNEL = """
import triton
import triton.language as tl


@triton.jit
def perm_kernel(ids_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(ids_ptr + offsets, {value}, mask=offsets < n)


def perm(ids):
    perm_kernel[(triton.cdiv(ids.numel(), 256),)](ids, ids.numel(), BLOCK=256)
"""


def _grade_permutation(tmp_path, name: str, value: str):
    folder = tmp_path / "perm"
    if not folder.exists():
        folder.mkdir()
        (folder / "spec.toml").write_text(PERMUTATION_SPEC)
        (folder / "reference.py").write_text(PERMUTATION_REFERENCE)
    spec = load_spec(folder)
    path = tmp_path / f"{name}.py"
    path.write_text(PERMUTATION_KERNEL.format(value=value))
    return grade(Target(spec, spec.variant("triton")), submission=path, seed=3, record=False, quick=True)


@pytest.mark.slow
def test_an_output_judged_by_its_check_is_graded_end_to_end(tmp_path):
    reversed_order = _grade_permutation(tmp_path, "reversed", "n - 1 - offsets")  # not the reference, yet right
    assert {c.name: c.status for c in reversed_order.checks}["numerics"] == "passed", reversed_order.verdict
    repeated = _grade_permutation(tmp_path, "repeated", "offsets // 2")
    failed = next(c for c in repeated.checks if c.status == "failed")
    assert failed.name == "numerics" and failed.details["code"] == "property"
    assert "n=1000, trial 1: ids: not a permutation of 0 .. n-1" in failed.message


# --- sm_id's check on simulated outputs ---------------------------------------------------------------------


@pytest.mark.parametrize("blocks", SIZES)
def test_ids_a_gpu_could_give_pass_at_every_size(blocks):
    for sm_ids in (round_robin(blocks), scattered(blocks)):
        assert judged(sm_ids, torch.arange(blocks), blocks) == ("ok", "")


def test_one_block_may_run_on_any_sm_and_a_gpu_with_fewer_sms_is_judged_by_its_own_count():
    assert judged(torch.tensor([131]), torch.tensor([0]), 1)[0] == "ok"
    small_gpu = {"multiprocessors": 46}
    assert judged(scattered(100_003, 46), torch.arange(100_003), 100_003, small_gpu)[0] == "ok"
    code, message = judged(scattered(100_003, 132), torch.arange(100_003), 100_003, small_gpu)
    assert code == "property" and "outside [0, 46)" in message


MISTAKES = {  # name -> (sm_ids, block_ids) for a grid of b blocks
    "%smid never read (0)": lambda b: (torch.zeros(b), torch.arange(b)),
    "the block index as the SM id": lambda b: (torch.arange(b), torch.arange(b)),
    "%nsmid (the SM count)": lambda b: (torch.full((b,), 132), torch.arange(b)),
    "%warpid (a warp slot, below 64)": lambda b: (torch.arange(b) % 64, torch.arange(b)),
    "%laneid of thread 0": lambda b: (torch.zeros(b), torch.arange(b)),
    "one block looping over all": lambda b: (torch.full((b,), 17), torch.arange(b)),
    "block_ids from the global thread index": lambda b: (round_robin(b), torch.arange(b) * 32),
    "block_ids off by one": lambda b: (round_robin(b), torch.arange(b) + 1),
}


@pytest.mark.parametrize("name", list(MISTAKES))
def test_every_classic_mistake_fails_some_case(name):
    verdicts = {
        c.params["blocks"]: judged(*MISTAKES[name](c.params["blocks"]), c.params["blocks"])[0] for c in SPEC.cases
    }
    assert any(v != "ok" for v in verdicts.values()), f"{name} passes every case: {verdicts}"


def test_the_messages_say_what_is_wrong_and_how_to_read_smid():
    code, message = judged(torch.zeros(1000), torch.arange(1000), 1000)
    assert code == "property" and "all 1000 blocks report SM 0" in message and "%%smid" in message
    code, message = judged(torch.arange(1000), torch.arange(1000), 1000)
    assert "868 of 1000 SM ids are outside [0, 132) — first sm_ids[132] = 132" in message
    code, message = judged(torch.arange(100_003) % 64, torch.arange(100_003), 100_003)
    assert "only 64 different SMs of this GPU's 132" in message and "%warpid" in message


def test_without_an_sm_count_only_the_sign_is_checked():
    assert judged(torch.arange(1000) + 500, torch.arange(1000), 1000, device={})[0] == "ok"
    assert judged(torch.full((7,), -1), torch.arange(7), 7, device={})[0] == "property"


def test_timed_bytes_count_both_stores():
    params = {"blocks": 9}
    stored = sum(o.numel() * o.element_size() for o in reference_outputs(REFERENCE, SPEC, {}, params))
    assert exprs.evaluate(SPEC.performance.bytes, params) == stored


@pytest.mark.slow
@pytest.mark.nvcc
def test_stub_and_solution_compile_for_sm_90():
    sources = [SPEC.folder / "sm_id.cu"] + [p for p in [ROOT / "solutions" / "sm_id" / "sm_id.cu"] if p.exists()]
    for source in sources:
        result = build.build_shared_library(source, device_only=True)
        assert result.ok, result.log


# --- on a GPU: the real kernels ------------------------------------------------------------------------------


def _failure(result):
    return next(c for c in result.checks if c.status in ("failed", "error"))


@pytest.mark.gpu
@pytest.mark.solutions
def test_the_solution_passes_and_its_ids_cover_the_gpu():
    result = grade(resolve(("sm_id",)), source="solutions", seed=11, record=False)
    assert not [c for c in result.checks if c.status in ("failed", "error")], result.verdict
    library = build.build_shared_library(ROOT / "solutions" / "sm_id" / "sm_id.cu").library
    blocks = 1 << 20
    sm_ids = torch.empty(blocks, dtype=torch.int32, device="cuda")
    block_ids = torch.empty_like(sm_ids)
    ctypes.CDLL(library).sm_id(ctypes.c_void_p(sm_ids.data_ptr()), ctypes.c_void_p(block_ids.data_ptr()), blocks)
    torch.cuda.synchronize()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    counts = torch.bincount(sm_ids.long().cpu(), minlength=sms)
    t = result.timings[-1]
    print(
        f"\nsm_id {t.case}: {t.learner_ms * 1000:.0f} us; %smid over {blocks} blocks: {int((counts > 0).sum())} "
        f"distinct of {sms} SMs, min {int(sm_ids.min())}, max {int(sm_ids.max())}, blocks per SM "
        f"{int(counts.min())}..{int(counts.max())}"
    )
    assert int(sm_ids.min()) >= 0 and int(sm_ids.max()) < sms


@pytest.mark.gpu
def test_the_stub_fails_numerics_on_the_gpu():
    result = grade(resolve(("sm_id",)), source="stubs", seed=11, record=False, quick=True, sanitize_code=False)
    assert _failure(result).details.get("code") == "not_written", result.verdict
