"""histogram, and what the grader grew for it: integer inputs drawn through a transform of reference.py
(values 0..255 for a histogram) and a transform named per case (every value in one bin).

On the CPU the CUDA kernels cannot run, so each classic mistake of the exercise is played in torch on
the spec's own inputs, into the grader's own poisoned outputs, and judged with the grader's own checks:
every mistake must fail some case. The mistakes' fixtures (the spec's [[mistakes]]) are graded on the CPU
emulator and on a GPU by tests/test_exercise_mistakes.py. On a GPU (`python -m pytest -m gpu -s
tests/test_histogram.py`) the solution's and the ladder's figures are printed beside torch.histc's."""

from __future__ import annotations

import pytest
import torch
from conftest import ROOT, submission
from cuda_checks import build_without_spills, compile_fixtures, figures, numerics

from grader.checks.checking import compare, load_reference, reference_outputs
from grader.checks.inputs import generate, make_outputs
from grader.core.discovery import discover_exercises, resolve
from grader.core.spec import Case, SpecError, load_spec
from grader.run.grade import grade

SPEC = discover_exercises()["histogram"]
REFERENCE = load_reference(SPEC.folder / "reference.py")
CPU_CASES = [c for c in SPEC.cases if not c.gpu_only]
SEED = 11


@pytest.fixture(scope="module")
def inputs():
    """Each CPU case's inputs for each of its trials (trial 1 scales the draw by 1.5), drawn once."""
    return {
        (i, trial): generate(SPEC, case, SEED + 1000 * i + trial, trial)
        for i, case in enumerate(CPU_CASES)
        for trial in range(SPEC.trials_for(case))
    }


# --- the grader's growth: integer inputs through a transform, a transform per case --------------------


def test_values_are_whole_bins_in_every_case_and_trial(inputs):
    for (i, trial), made in inputs.items():
        x = made["x"]
        assert x.dtype == torch.int32 and x.numel() == CPU_CASES[i].params["n"]
        assert int(x.min()) >= 0 and int(x.max()) < 256, (CPU_CASES[i].label(), trial)


def test_a_case_names_its_own_transform_and_the_others_keep_the_tensors(inputs):
    by_label = {CPU_CASES[i].label(): made["x"] for (i, trial), made in inputs.items() if trial == 0}
    uniform = by_label["n=1000003"]
    assert torch.bincount(uniform, minlength=256).min() > 3000  # every bin used
    one = by_label["n=1000003 (x transform=one_bin)"]
    assert (one == one[0]).all()
    ordered = by_label["n=1000003 (x transform=sorted_bins)"]
    assert (ordered[1:] >= ordered[:-1]).all() and ordered.unique().numel() == 256


def test_an_integer_input_without_a_transform_is_still_drawn_as_small_ints(tmp_path):
    folder = write_spec(tmp_path, transform_line="")
    x = generate(load_spec(folder), load_spec(folder).cases[0], 3)["x"]
    assert x.dtype == torch.int32 and int(x.min()) >= 1 and int(x.max()) < 100


def test_a_case_transform_that_is_not_a_name_is_refused_at_load(tmp_path):
    folder = write_spec(tmp_path, case_line='inputs.x = { transform = "one bin" }\n')
    with pytest.raises(SpecError, match="inputs.x.transform = 'one bin': an input's transform names a function"):
        load_spec(folder)


def write_spec(tmp_path, transform_line='transform = "bins"\n', case_line=""):
    folder = tmp_path / "ex"
    folder.mkdir()
    (folder / "reference.py").write_text(
        "import torch\n\ndef reference(x):\n    return x\n\ndef bins(x):\n    return (x * 4).floor()\n"
    )
    (folder / "spec.toml").write_text(
        'id = "ex"\n[variants.cuda]\nstub = "a.cu"\nentry = "f"\nargs = ["x", "y"]\n'
        f'[inputs.x]\nshape = ["n"]\ndtype = "int32"\n{transform_line}[outputs.y]\nshape = ["n"]\n'
        f"[[cases]]\nn = 1000\n{case_line}[tolerance.float32]\natol = 0\nrtol = 0\n"
    )
    return folder


# --- the exercise's cases against the classic mistakes, played in torch ----------------------------------


def count(x: torch.Tensor) -> torch.Tensor:
    return torch.bincount(x.long(), minlength=256)


def blocks_of(x: torch.Tensor, size: int) -> list[torch.Tensor]:
    return list(x.split(size))


def lost_updates(x: torch.Tensor) -> torch.Tensor:
    """hist[v]++ without an atomic: of the 32 lanes of a warp that hit one counter at once, one +1 lands."""
    warps = torch.nn.functional.pad(x.long(), (0, -x.numel() % 32), value=-1).reshape(-1, 32).sort(dim=1).values
    first = torch.ones_like(warps, dtype=torch.bool)
    first[:, 1:] = warps[:, 1:] != warps[:, :-1]  # the first lane of each distinct value in its warp
    landed = warps[first & (warps >= 0)]
    return count(landed)


def last_block_wins(x: torch.Tensor) -> torch.Tensor:
    """counts[b] = hist[b] (a store, not an atomicAdd): the last block to store each bin is all that is left."""
    return count(blocks_of(x, 256 * 16)[-1])


MISTAKES = {
    "counts never zeroed": lambda x, counts: counts.add_(count(x).int()),  # atop the poison
    "the 0-3 values past the last int4 dropped": lambda x, counts: counts.copy_(count(x[: x.numel() // 4 * 4])),
    "float counters (stop at 2^24)": lambda x, counts: counts.copy_(count(x).clamp(max=2**24)),
    "hist[v]++ in shared memory (a race)": lambda x, counts: counts.copy_(lost_updates(x)),
    "blocks merged with a store": lambda x, counts: counts.copy_(last_block_wins(x)),
}
CORRECT = {
    "one count per value": lambda x, counts: counts.copy_(count(x)),
    "per-block histograms summed": lambda x, counts: counts.copy_(sum(count(b) for b in blocks_of(x, 4096))),
}


def simulated_verdict(kernel, case: Case, made: dict[str, torch.Tensor]) -> str:
    """The grader's verdict code for `kernel` run on one case's inputs: ok, or how compare failed."""
    outputs = make_outputs(SPEC, case, "cpu")
    kernel(made["x"], outputs["counts"])
    (want,) = reference_outputs(REFERENCE, SPEC, made, case.params)
    result = compare("counts", outputs["counts"], want, SPEC.tolerance_of(case), case.label())
    return "ok" if result.ok else result.code


@pytest.mark.parametrize("name", list(MISTAKES))
def test_every_classic_mistake_fails_some_case(name, inputs):
    smallest_first = sorted(
        ((i, made) for (i, trial), made in inputs.items() if trial == 0),
        key=lambda item: CPU_CASES[item[0]].params["n"],
    )
    assert any(simulated_verdict(MISTAKES[name], CPU_CASES[i], made) != "ok" for i, made in smallest_first), (
        f"{name} passes every case"
    )


def test_float_counters_fail_only_past_two_to_the_24_in_one_bin(inputs):
    failing = [
        CPU_CASES[i].label()
        for (i, trial), made in inputs.items()
        if trial == 0 and simulated_verdict(MISTAKES["float counters (stop at 2^24)"], CPU_CASES[i], made) != "ok"
    ]
    assert failing == ["n=16777259 (x transform=one_bin)"]


@pytest.mark.parametrize("name", list(CORRECT))
def test_correct_counting_passes_every_case_and_trial(name, inputs):
    for (i, trial), made in inputs.items():
        assert simulated_verdict(CORRECT[name], CPU_CASES[i], made) == "ok", (name, CPU_CASES[i].label(), trial)


def test_torch_histc_counts_int32_exactly_on_the_gpu_path_as_bincount_does_here():
    """The reference's GPU branch is the timed anchor; on int32 its bin arithmetic is exact: v * 256 / 256."""
    x = torch.arange(256, dtype=torch.int32).repeat(3)
    (want,) = reference_outputs(REFERENCE, SPEC, {"x": x})
    assert want.tolist() == [3] * 256
    assert torch.equal(torch.histc(x.float(), bins=256, min=0, max=256).long(), want)


# --- nvcc: the stub, the solution and the fixtures compile for sm_90 ----------------------------------------

FIXTURES = [
    "histogram_global_atomics.cu",
    "histogram_shared.cu",
    "histogram_no_memset.cu",
    "histogram_plain_increment.cu",
]


@pytest.mark.slow
@pytest.mark.nvcc
@pytest.mark.solutions
def test_stub_and_solution_build_for_sm_90_and_the_solution_spills_nothing():
    build_without_spills([SPEC.folder / "histogram.cu", ROOT / "solutions" / "histogram" / "histogram.cu"])


@pytest.mark.slow
@pytest.mark.nvcc
def test_the_fixtures_compile_for_sm_90():
    compile_fixtures(FIXTURES)


# --- on a GPU: the real kernels ------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.solutions
@pytest.mark.all_sizes  # the one-bin size beside the verdict's uniform one
def test_the_solution_passes_near_copy_bandwidth_and_beats_torch_histc():
    result = grade(resolve(("histogram",)), source="solutions", seed=SEED, record=False)
    assert result.status == "passed", result.verdict
    print(f"\nhistogram solution: {figures(result)}")
    uniform, one_bin = result.timings[-1], result.timings[-2]
    print(
        f"histogram: uniform at 2^28 {uniform.learner_rate:.0f} GB/s ({uniform.roofline_pct:.0f}% of copy), "
        f"all in one bin at 2^26 {one_bin.learner_rate:.0f} GB/s ({one_bin.roofline_pct:.0f}%); torch.histc "
        f"{uniform.torch_rate:.0f} / {one_bin.torch_rate:.0f} GB/s"
    )
    assert uniform.roofline_pct >= 85 and uniform.learner_ms < uniform.torch_ms


@pytest.mark.gpu
def test_the_stub_fails_numerics_on_the_gpu():
    result = grade(resolve(("histogram",)), source="stubs", seed=SEED, record=False)
    assert numerics(result).details.get("code") == "not_written", result.verdict


@pytest.mark.bench
@pytest.mark.gpu
@pytest.mark.parametrize("name", ["histogram_global_atomics.cu", "histogram_shared.cu"])
def test_ladder_steps_pass_numerics_and_print_their_figures(name):
    result = grade(resolve(("histogram",)), submission=submission(name), seed=SEED, record=False)
    assert next(c for c in result.checks if c.name == "numerics").status == "passed", result.verdict
    print(f"\nhistogram ladder {name}: {figures(result)}")
