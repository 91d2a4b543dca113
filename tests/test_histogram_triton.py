"""histogram --lang triton (100-day day 39: atomics, race conditions): the Triton version beside the CUDA one,
the same cases.

On the CPU: the solution graded under the interpreter (passes), the stub (fails), and the classic mistakes
of the solution run in this process under the interpreter (tests/interpreted.py), each failing its case.
The classic race — each program merging its counts with a plain load, add and store
(tests/fixtures/submissions/histogram_load_add_store.py) — PASSES under the interpreter, which runs
programs one after another; here it is played as a GPU interleaves it (programs in waves, every load of a
wave before its stores) and fails the spec's cases. On a GPU the real fixture is graded and fails (the spec's
[[mistakes]] load_add_store_race: tests/test_exercise_mistakes.py); `python -m pytest -m gpu -s
tests/test_histogram_triton.py` prints the solution's figures beside torch.histc's."""

from __future__ import annotations

import pytest
import torch
from conftest import ROOT, submission
from interpreted import as_model, load_interpreted, load_module
from simulated_kernels import first_failure, trial_verdict

from grader.checks.checking import compare, load_reference, reference_outputs
from grader.checks.inputs import generate, make_outputs
from grader.core.discovery import discover_exercises, resolve
from grader.run.grade import grade

SPEC = discover_exercises()["histogram"]
SOLUTION = ROOT / "solutions" / "histogram" / "histogram.py"
SEED = 13


def case_labelled(label: str):
    return next(c for c in SPEC.cases if c.label() == label)


# --- the Triton version beside the CUDA one -------------------------------------------------------------------


def test_the_cuda_version_stays_the_default_and_triton_is_picked_by_lang():
    assert resolve(("histogram",)).variant.lang == "cuda"
    triton = resolve(("histogram",), lang="triton").variant
    assert triton.kind == "triton" and [a.name for a in triton.args] == ["x", "counts"]


def test_each_language_has_its_own_ladder_with_figures():
    from grader.checks import hints

    for lang in ("cuda", "triton"):
        steps = hints.read_ladder(SPEC, lang)
        assert [s.number for s in steps] == [1, 2, 3] and all(s.roofline_pct for s in steps), lang
    assert "tl.atomic_add" in hints.read_ladder(SPEC, "triton")[0].text


# --- classic mistakes: one line of the solution changed, run under the interpreter -----------------------------

MISTAKES = {  # name: (the solution's text, its replacement, the case it fails, the verdict there)
    # masked lanes loaded as 0 and counted: bin 0 gains BLOCK - n values
    "tail_in_bin_zero": ("tl.histogram(values, BINS, mask=mask)", "tl.histogram(values, BINS)", "n=1", "mismatch"),
    # counts never zeroed: the kernel adds onto the poison, and the 255 empty bins keep it
    "counts_not_zeroed": ("    counts.zero_()\n", "", "n=1", "partial_write"),
    # each program stores its counts instead of adding them: the last program's are all that is left
    "stored_not_added": (
        'tl.atomic_add(counts_ptr + bins, local, mask=local > 0, sem="relaxed")',
        "tl.store(counts_ptr + bins, local)",
        "n=1000003",
        "mismatch",
    ),
}


@pytest.mark.solutions
@pytest.mark.parametrize("name", list(MISTAKES))
def test_each_classic_mistake_fails_on_its_case(tmp_path, name):
    old, new, label, verdict = MISTAKES[name]
    text = SOLUTION.read_text()
    assert text.count(old) == 1, f"{name}: the line to change is not in the solution once: update MISTAKES"
    path = tmp_path / f"histogram_{name}.py"
    path.write_text(text.replace(old, new))
    model = as_model(SPEC, load_interpreted(path, f"histogram_{name}"))
    case = case_labelled(label)
    assert trial_verdict(SPEC, case, model, SEED, 0) == verdict


# --- the race: invisible to the interpreter, fatal on a GPU ---------------------------------------------------


@pytest.mark.slow
def test_the_racy_merge_passes_under_the_interpreter_which_runs_programs_one_at_a_time():
    """What a learner sees on the CPU: the load-add-store version counts right. The GPU test below grades it."""
    model = as_model(SPEC, load_interpreted(submission("histogram_load_add_store.py"), "histogram_load_add_store"))
    case = case_labelled("n=1000003")
    assert trial_verdict(SPEC, case, model, SEED, 0) == "ok"


def racy_counts(x: torch.Tensor, block: int, wave: int) -> torch.Tensor:
    """The fixture's merge as a GPU runs it: programs (one per block) in waves of `wave` at once; in a wave every
    program loads the counters before any stores, so each counter keeps the last store of the wave."""
    counts = torch.zeros(256, dtype=torch.int64)
    blocks = x.long().split(block)
    for start in range(0, len(blocks), wave):
        loaded = counts.clone()  # what each program of this wave read
        for values in blocks[start : start + wave]:
            counts = loaded + torch.bincount(values, minlength=256)  # each store overwrites the previous one
    return counts


@pytest.mark.parametrize("wave, verdict", [(1, "ok"), (2, "mismatch"), (132, "mismatch")])
def test_the_race_played_as_a_gpu_interleaves_it_fails_once_two_programs_overlap(wave, verdict):
    """wave 1 is the interpreter (one program at a time); 2 is the least a GPU overlaps; 132 one per H100 SM."""
    case = case_labelled("n=1000003")
    made = generate(SPEC, case, SEED)
    counts = make_outputs(SPEC, case, "cpu")["counts"]
    counts.copy_(racy_counts(made["x"], block=1024, wave=wave))
    (want,) = reference_outputs(load_reference(SPEC.folder / "reference.py"), SPEC, made, case.params)
    result = compare("counts", counts, want, SPEC.tolerance_of(case), case.label())
    assert (result.code if not result.ok else "ok") == verdict


# --- on a GPU: the real kernels ----------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.solutions
@pytest.mark.all_sizes  # the one-bin size beside the verdict's uniform one
def test_the_solution_passes_and_beats_torch_histc():
    from cuda_checks import figures

    result = grade(resolve(("histogram",), lang="triton"), source="solutions", seed=SEED, record=False)
    assert result.status == "passed", result.verdict
    print(f"\nhistogram (triton) solution: {figures(result)}")
    uniform, one_bin = result.timings[-1], result.timings[-2]
    print(
        f"histogram (triton): uniform at 2^28 {uniform.learner_rate:.0f} GB/s ({uniform.roofline_pct:.0f}% of copy), "
        f"all in one bin at 2^26 {one_bin.learner_rate:.0f} GB/s ({one_bin.roofline_pct:.0f}%); torch.histc "
        f"{uniform.torch_rate:.0f} / {one_bin.torch_rate:.0f} GB/s"
    )
    assert uniform.learner_ms < uniform.torch_ms  # its speed bar is tl.histogram's own ceiling: the test below


@pytest.mark.gpu
@pytest.mark.solutions
def test_the_solution_runs_near_tl_histograms_own_ceiling():
    """The solution's bar is not 85% of copy, which tl.histogram cannot reach (README: its ballots cost about 100
    instructions a warp for 32 values), but 85% of the rate of tl.histogram counting with no loads at all
    (scripts/design_kernels.py): the counting, not memory, is the limit. H200: 802 us against 765 (95%)."""
    from grader.child import timing

    designs = load_module(ROOT / "scripts" / "design_kernels.py", "design_kernels_gpu")
    solution = load_module(SOLUTION, "histogram_solution_gpu")
    n = 2**28
    x = torch.randint(0, 256, (n,), dtype=torch.int32, device="cuda")
    counts, scratch = (
        torch.empty(256, dtype=torch.int32, device="cuda"),
        torch.zeros(256, dtype=torch.int32, device="cuda"),
    )
    solution.histogram(x, counts)
    assert torch.equal(counts, torch.bincount(x, minlength=256).to(torch.int32))
    measured = timing.time_alternating(
        {
            "solution": lambda: solution.histogram(x, counts),
            "counting only": lambda: designs.histogram_counting_only(x, scratch, n, 2048, 16, 4),
        }
    )
    solution_ms, ceiling_ms = measured["solution"]["median_ms"], measured["counting only"]["median_ms"]
    print(
        f"\nhistogram (triton) at 2^28: solution {solution_ms * 1000:.0f} us, tl.histogram with no loads "
        f"{ceiling_ms * 1000:.0f} us ({100 * ceiling_ms / solution_ms:.0f}% of its rate)"
    )
    assert ceiling_ms >= 0.85 * solution_ms


@pytest.mark.gpu
def test_the_stub_fails_on_the_gpu():
    result = grade(resolve(("histogram",), lang="triton"), source="stubs", seed=SEED, record=False)
    assert first_failure(result).details.get("code") == "not_implemented", result.verdict


@pytest.mark.bench
@pytest.mark.gpu
def test_ladder_step_one_passes_numerics_and_prints_its_figures():
    from cuda_checks import figures

    result = grade(
        resolve(("histogram",), lang="triton"),
        submission=submission("histogram_atomic_per_value.py"),
        seed=SEED,
        record=False,
    )
    assert next(c for c in result.checks if c.name == "numerics").status == "passed", result.verdict
    print(f"\nhistogram (triton) ladder step 1, one atomic per value: {figures(result)}")
