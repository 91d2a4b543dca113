"""atomic_max: the maximum of a float32 array through a float atomic max built on atomicCAS; exact.

On the CPU the CUDA kernels cannot run, so each classic mistake of the topic (and the two integer
tricks the README teaches) is played in torch on the spec's own inputs, into the grader's own poisoned
output, and judged with the grader's own checks: every mistake must fail some case, every correct
variant pass them all. The mistakes' fixtures (the spec's [[mistakes]]) are graded on the CPU emulator and on a
GPU by tests/test_exercise_mistakes.py. On a GPU (`python -m pytest -m gpu -s tests/test_atomic_max.py`) the
solution's and the ladder's figures are printed beside torch.max's."""

from __future__ import annotations

import pytest
import torch
from conftest import ROOT, submission
from cuda_checks import build_without_spills, compile_fixtures, figures, numerics

from grader.checks.checking import compare, load_reference, reference_outputs
from grader.checks.inputs import generate, make_outputs
from grader.core.discovery import discover_exercises, resolve
from grader.core.spec import Case
from grader.run.grade import grade

SPEC = discover_exercises()["atomic_max"]
REFERENCE = load_reference(SPEC.folder / "reference.py")
CPU_CASES = [c for c in SPEC.cases if not c.gpu_only]
SEED = 17
BLOCK = 4096  # values per simulated block: each block's maximum goes through one atomic
NEG_INF = float("-inf")
FLT_MAX = torch.finfo(torch.float32).max


@pytest.fixture(scope="module")
def inputs():
    """Each CPU case's inputs for each of its trials (trial 1 scales the draw by 1.5), drawn once."""
    return {
        (i, trial): generate(SPEC, case, SEED + 1000 * i + trial, trial)
        for i, case in enumerate(CPU_CASES)
        for trial in range(SPEC.trials_for(case))
    }


def test_the_inputs_hold_what_the_readme_promises(inputs):
    by_label = {CPU_CASES[i].label(): made["x"] for (i, trial), made in inputs.items() if trial == 0}
    assert not any(torch.isnan(x).any() for x in by_label.values())
    assert (by_label["n=4097 (x offset=-100.0)"] < 0).all()
    assert torch.isinf(by_label["n=65537 (x special=neg_inf_rows)"]).all()
    quarter = by_label["n=1000003 (x special=neg_inf_entries)"]
    assert 0.2 < float(torch.isinf(quarter).double().mean()) < 0.3
    last = by_label["n=1000003 (x transform=largest_last)"]
    assert int(last.argmax()) == last.numel() - 1


# --- float bits as integers: what the README's two tricks rest on ---------------------------------------


def bits(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32).view(torch.int32)


def test_a_negative_floats_bits_grow_as_the_value_falls():
    minus_one, minus_two = bits([-1.0, -2.0]).tolist()
    assert (minus_one, minus_two) == (torch.tensor(0xBF800000).int().item(), torch.tensor(0xC0000000).int().item())
    assert minus_two > minus_one  # larger bits, smaller value: an int atomicMax picks -2


def ordered_keys(x: torch.Tensor) -> torch.Tensor:
    b = x.contiguous().view(torch.int32)
    return torch.where(b >= 0, b, b ^ 0x7FFFFFFF)


def test_ordered_keys_sort_like_the_floats_they_come_from():
    x = torch.tensor([NEG_INF, -FLT_MAX, -2.0, -1.0, -1e-30, -0.0, 0.0, 1e-30, 1.0, 2.0, FLT_MAX, float("inf")])
    keys = ordered_keys(x).tolist()
    assert keys == sorted(keys) and len(set(keys)) == len(keys)


def split_on_sign(partials: torch.Tensor, negative=torch.signbit) -> float:
    """The README's sign split, applied in order to one word that starts at -inf: atomicMax on the int
    bits for non-negative values, atomicMin on the unsigned bits for negative ones."""
    word = int(bits([NEG_INF])) & 0xFFFFFFFF
    for value in partials.tolist():
        b = int(bits([value])) & 0xFFFFFFFF
        if bool(negative(torch.tensor(value))):
            word = min(word, b)
        else:
            signed = lambda u: u - (1 << 32) if u >= 1 << 31 else u  # noqa: E731
            word = b if signed(b) > signed(word) else word
    return torch.tensor([word - (1 << 32) if word >= 1 << 31 else word], dtype=torch.int32).view(torch.float32).item()


def test_the_sign_split_needs_signbit_not_a_comparison_with_zero():
    assert str(split_on_sign(torch.tensor([-0.0]))) == "-0.0"
    assert split_on_sign(torch.tensor([-0.0]), negative=lambda v: v < 0) == NEG_INF  # -0.0 >= 0: lost


# --- the exercise's cases against the classic mistakes, played in torch ----------------------------------


def block_maxima(x: torch.Tensor) -> torch.Tensor:
    return torch.stack([b.max() for b in x.split(BLOCK)])


def int_bits_max(x: torch.Tensor) -> float:
    """atomicMax((int*)out, __float_as_int(block max)) over the blocks, out starting at -inf."""
    words = torch.cat([bits([NEG_INF]), block_maxima(x).view(torch.int32)])
    return words.max().reshape(1).view(torch.float32).item()


def tail_dropped(x: torch.Tensor) -> float:
    whole = x[: x.numel() // 4 * 4]
    return whole.max().item() if whole.numel() else NEG_INF


def keys_max(x: torch.Tensor) -> float:
    key = ordered_keys(block_maxima(x)).max()
    back = torch.where(key >= 0, key, key ^ 0x7FFFFFFF)
    return back.reshape(1).view(torch.float32).item()


MISTAKES = {
    "out started at 0": lambda x: max(0.0, x.max().item()),
    "out started at -FLT_MAX": lambda x: max(-FLT_MAX, x.max().item()),
    "integer atomicMax on the float's bits": int_bits_max,
    "the 0-3 values past the last float4 dropped": tail_dropped,
    "the maximum taken in half precision": lambda x: x.half().max().float().item(),
}
CORRECT = {
    "one CAS per block": lambda x: block_maxima(x).max().item(),
    "the sign split (signbit)": lambda x: split_on_sign(block_maxima(x)),
    "ordered integer keys": keys_max,
}


def simulated_verdict(kernel, case: Case, made: dict[str, torch.Tensor]) -> str:
    """The grader's verdict code when `kernel`'s answer lands in out: ok, or how compare failed."""
    outputs = make_outputs(SPEC, case, "cpu")
    outputs["out"].fill_(kernel(made["x"]))
    (want,) = reference_outputs(REFERENCE, SPEC, made, case.params)
    result = compare("out", outputs["out"], want, SPEC.tolerance_of(case), case.label())
    return "ok" if result.ok else result.code


@pytest.mark.parametrize("name", list(MISTAKES))
def test_every_classic_mistake_fails_some_case(name, inputs):
    got = {
        CPU_CASES[i].label(): simulated_verdict(MISTAKES[name], CPU_CASES[i], made)
        for (i, trial), made in inputs.items()
        if trial == 0
    }
    assert any(v != "ok" for v in got.values()), f"{name} passes every case: {got}"


@pytest.mark.parametrize(
    "name, case",
    [
        ("out started at 0", "n=4097 (x offset=-100.0)"),
        ("out started at -FLT_MAX", "n=65537 (x special=neg_inf_rows)"),
        ("integer atomicMax on the float's bits", "n=1000003 (x offset=-100.0 scale=0.001)"),
        ("the 0-3 values past the last float4 dropped", "n=1000003 (x transform=largest_last)"),
        ("the maximum taken in half precision", "n=1000003 (x scale=1e+30)"),
    ],
)
def test_each_mistake_fails_on_the_case_built_for_it(name, case, inputs):
    (made,) = [made for (i, trial), made in inputs.items() if trial == 0 and CPU_CASES[i].label() == case]
    (spec_case,) = [c for c in CPU_CASES if c.label() == case]
    assert simulated_verdict(MISTAKES[name], spec_case, made) == "mismatch"


@pytest.mark.parametrize("name", list(CORRECT))
def test_correct_maxima_pass_every_case_and_trial(name, inputs):
    for (i, trial), made in inputs.items():
        assert simulated_verdict(CORRECT[name], CPU_CASES[i], made) == "ok", (name, CPU_CASES[i].label(), trial)


# --- nvcc: the stub, the solution and the fixtures compile for sm_90 ----------------------------------------

FIXTURES = [
    "atomic_max_per_element.cu",
    "atomic_max_warp_shuffle.cu",
    "atomic_max_zero_init.cu",
    "atomic_max_int_bits.cu",
]


@pytest.mark.slow
@pytest.mark.nvcc
@pytest.mark.solutions
def test_stub_and_solution_build_for_sm_90_and_the_solution_spills_nothing():
    build_without_spills([SPEC.folder / "atomic_max.cu", ROOT / "solutions" / "atomic_max" / "atomic_max.cu"])


@pytest.mark.slow
@pytest.mark.nvcc
def test_the_fixtures_compile_for_sm_90():
    compile_fixtures(FIXTURES)


# --- on a GPU: the real kernels ------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.solutions
def test_the_solution_passes_near_copy_bandwidth():
    result = grade(resolve(("atomic_max",)), source="solutions", seed=SEED, record=False)
    assert result.status == "passed", result.verdict
    print(f"\natomic_max solution: {figures(result)}")
    t = result.timings[-1]
    torch_pct = t.roofline_pct * t.learner_ms / t.torch_ms
    assert t.roofline_pct >= 85
    assert torch_pct >= 85 or t.learner_ms < t.torch_ms  # faster than torch wherever torch is below the bar


@pytest.mark.gpu
def test_the_stub_fails_numerics_on_the_gpu():
    result = grade(resolve(("atomic_max",)), source="stubs", seed=SEED, record=False)
    assert numerics(result).details.get("code") == "not_written", result.verdict


@pytest.mark.bench
@pytest.mark.gpu
@pytest.mark.parametrize("name", ["atomic_max_per_element.cu", "atomic_max_warp_shuffle.cu"])
def test_ladder_steps_pass_numerics_and_print_their_figures(name):
    result = grade(resolve(("atomic_max",)), submission=submission(name), seed=SEED, record=False)
    assert next(c for c in result.checks if c.name == "numerics").status == "passed", result.verdict
    print(f"\natomic_max ladder {name}: {figures(result)}")
