"""Every exercise's classic mistakes, graded: one table, one test.

The table is each exercise's `[[mistakes]]` in its spec.toml (docs/spec.md): a mistake's fixture (a learner's
file in tests/fixtures/submissions/, instructor-only) and how its grade fails, the same matchers that pick the
hint the learner reads (grader/checks/hints.py). `tiers` says where the fixture is graded:

- "cpu" (the default): where no GPU is (marked `slow`; skipped where one is, as the no-GPU checks of
  tests/test_grading_cpu.py are): a Triton file under the interpreter, a CUDA file on the CPU emulator
  (docs/cuda-on-cpu.md). Every matcher must hold for the first failing check (its name, code, first case, NaN,
  message), and the learner reads the mistake's own hint, or, for a mistake without one, no other mistake's.
- "gpu": on a GPU (marked `gpu`: skipped without one). The first failing check has the mistake's check name and
  its code, `gpu_code` where a GPU's differs (a GPU's first failing case may come earlier, a race shows). A mistake
  that has both tiers is marked `slow` on the GPU as well: the GPU tier (`gpu and not slow`) keeps the mistakes only
  a GPU can show, and the whole GPU suite (`-m gpu`) grades every row.

A test's grade is the grader's own pipeline (grade(): build, the sandboxed child, the checks, the hints), with
one seed. The solutions and the stubs are graded on the CPU by tests/test_grading_cpu.py; what is specific to
an exercise (its cases, its ladder's figures, mistakes edited into a solution) stays in its own test file."""

from __future__ import annotations

import functools

import pytest
from conftest import EDIT_SUFFIX, HAS_GPU, SUBMISSIONS, edited_solution, submission
from unit.conftest import toy_spec, write_exercise

from grader.checks import hints
from grader.core.discovery import discover_exercises, resolve, solution_file
from grader.core.spec import SpecError, load_spec
from grader.core.vocabulary import CheckName, Code
from grader.kinds import NVCC_KINDS
from grader.run import sanitize
from grader.toolchain import build

SEED = 11
# The codes of compute-sanitizer's findings: a row that may fail with one grades with the sanitizer on (conftest.py)
SANITIZER_CODES = {Code.LEAK, *sanitize.CODES.values()}
CPU_ONLY = pytest.mark.skipif(HAS_GPU, reason="the cpu tier checks the no-GPU path (the gpu tier runs here)")


def _catalog() -> list:
    """(exercise, version, mistake, tier) for every tier of every declared mistake, with the tier's marks."""
    params = []
    for exercise, spec in sorted(discover_exercises().items()):
        for mistake in spec.mistakes:
            lang = mistake.lang or _lang_of(spec, mistake.fixture or "")
            cuda = spec.variant(lang).kind in NVCC_KINDS
            for tier in mistake.tiers:
                if tier == "gpu":  # a mistake the CPU tier grades too: its GPU run is in `gpu and slow`, not the tier
                    marks = [pytest.mark.gpu] + ([pytest.mark.slow] if "cpu" in mistake.tiers else [])
                    marks += [pytest.mark.sanitizer] if _sanitizer_may_catch(mistake) else []
                elif cuda:  # the emulator runs it; `pytest -m emulated` picks every CUDA mistake run there
                    marks = [pytest.mark.slow, CPU_ONLY, pytest.mark.nvcc, pytest.mark.emulator, pytest.mark.emulated]
                else:
                    marks = [pytest.mark.slow, CPU_ONLY]
                params.append(
                    pytest.param(
                        exercise, lang, mistake, tier, marks=marks, id=f"{exercise}-{lang}-{mistake.name}-{tier}"
                    )
                )
    return params


def _sanitizer_may_catch(mistake) -> bool:
    return mistake.check == CheckName.SANITIZER or bool(SANITIZER_CODES & set(mistake.gpu_code or mistake.code))


def _lang_of(spec, fixture: str) -> str:
    """The version a fixture is graded as, where its mistake names none: a .cu file's is cuda, a .py file's triton;
    an edited solution's is the exercise's only (or default) version."""
    if fixture.endswith(EDIT_SUFFIX):
        return spec.variant(None).lang
    return "cuda" if fixture.endswith(".cu") else "triton"


def learner_file(target, mistake, tmp_path):
    """The file that makes the mistake: its fixture, or the solution with the fixture's edits (`.edit.toml`)."""
    if not mistake.fixture.endswith(EDIT_SUFFIX):
        return submission(mistake.fixture)
    solution = solution_file(target.spec, target.variant)
    if not solution.is_file():
        pytest.skip("solutions/ is absent (a learner's kit)")
    return edited_solution(mistake.fixture, solution, tmp_path / "edited")


CATALOG = _catalog()


@functools.cache
def target_of(exercise: str, lang: str):
    """resolve() once per version and process: each call reads every spec, and the table has 400 rows."""
    return resolve((exercise,), lang=lang)


def test_every_mistake_names_a_fixture_that_exists():
    assert CATALOG, "no exercise declares [[mistakes]]"
    if not SUBMISSIONS.is_dir():
        pytest.skip("tests/fixtures/submissions/ is absent (a learner's kit)")
    mistakes = [(p.values[0], p.values[2]) for p in CATALOG]
    missing = sorted({f"{e}:{m.name}" for e, m in mistakes if not m.fixture or not (SUBMISSIONS / m.fixture).is_file()})
    assert not missing, f'give these [[mistakes]] a fixture = "..." in tests/fixtures/submissions/: {missing}'


def test_every_edited_solution_still_finds_the_text_it_edits(tmp_path):
    """A `.edit.toml` fixture whose `old` text the solution no longer has would grade nothing: caught here, fast."""
    edited = {(p.values[0], p.values[1], p.values[2].name): p.values[2] for p in CATALOG}
    for (exercise, lang, name), mistake in edited.items():
        if mistake.fixture.endswith(EDIT_SUFFIX):
            learner_file(target_of(exercise, lang), mistake, tmp_path / exercise / name)


@pytest.mark.parametrize("exercise, lang, mistake, tier", CATALOG)
def test_each_mistakes_fixture_fails_as_its_spec_says(exercise, lang, mistake, tier, tmp_path, monkeypatch):
    target = target_of(exercise, lang)
    if tier == "cpu" and target.variant.kind in NVCC_KINDS:
        from grader import cuda_cpu

        runs, how = cuda_cpu.mode()
        if not runs:
            pytest.skip(f"the CPU emulator does not run here: {how}")
        if mistake.check != CheckName.BUILD:  # graded as where nvcc is missing: the emulator's build and run alone
            monkeypatch.setattr(build, "find_nvcc", lambda: None)  # (nvcc's kernel compile: 1-2 s a row, no verdict)
    from grader.run.grade import grade

    learner = learner_file(target, mistake, tmp_path)
    result = grade(target, submission=learner, seed=SEED, record=False, quick=True)
    check = next((c for c in result.checks if c.status in ("failed", "error")), None)
    ran = "; ".join(f"{c.name} {c.status}: {c.message[:120]}" for c in result.checks)
    assert check is not None, (
        f"{mistake.fixture} fails nothing on the {tier} (a numerics gap, or tiers is wrong): {ran}"
    )
    got = (check.name, check.details.get("code"), hints.case_label(check))
    if tier == "gpu":
        codes = mistake.gpu_code or mistake.code
        assert mistake.check in (None, check.name) and got[1] in codes, f"{mistake.fixture}: {got}: {check.message}"
        return
    context = hints.Context(result, target.spec)
    assert hints.mistake_matches(mistake, check, context), (
        f"{mistake.fixture}: (check, code, case) {got}: {check.message}"
    )
    hint = check.details.get("hint") or ""
    if mistake.hint:
        assert mistake.hint in hint, (check.message, hint)
    else:  # no hint of its own: a generic one may answer, never another mistake's
        assert hints.exercise_hint(check, context) is None, (check.message, hint)


# --- the table's own keys ------------------------------------------------------------------------------


def _spec_with(entry: str) -> str:
    return toy_spec(after=f'\n[[mistakes]]\nname = "a"\n{entry.strip()}\n')


def test_tiers_default_to_the_cpu_and_gpu_code_is_kept_apart_from_code(tmp_path):
    spec = load_spec(
        write_exercise(
            tmp_path,
            toy_spec(
                after=(
                    '\n[[mistakes]]\nname = "cpu_only"\nfixture = "toy_a.py"\ncode = "mismatch"\n'
                    '\n[[mistakes]]\nname = "both"\nfixture = "toy_b.py"\ncode = "mismatch"\ntiers = ["cpu", "gpu"]\n'
                    'gpu_code = ["mismatch", "out_of_bounds"]\n'
                )
            ),
        )
    )
    cpu_only, both = spec.mistakes
    assert (cpu_only.tiers, cpu_only.gpu_code) == (["cpu"], [])
    assert (both.tiers, both.code, both.gpu_code) == (["cpu", "gpu"], ["mismatch"], ["mismatch", "out_of_bounds"])


@pytest.mark.parametrize(
    "entry, error",
    [
        ('fixture = "f.py"\ncode = "mismatch"\ntiers = ["gpu", "tpu"]', "tiers = ['gpu', 'tpu']: give [\"cpu\"]"),
        ('fixture = "f.py"\ncode = "mismatch"\ntiers = []', "tiers = []: give"),
        ('fixture = "f.py"\ncode = "mismatch"\ntiers = ["cpu", "cpu"]', "or both, each once"),
        ('code = "mismatch"\ntiers = ["gpu"]', "give fixture = "),
        ('fixture = "f.py"\ncode = "mismatch"\ngpu_code = "out_of_bounds"', 'has no "gpu": add "gpu" to tiers'),
        ('fixture = "f.py"\nnan = true\ntiers = ["gpu"]', "give code (or gpu_code"),
        ('fixture = "f.py"\ncode = "mismatch"\ntiers = ["gpu"]\ngpu_code = "mismatched"', "did you mean 'mismatch'"),
    ],
    ids=[
        "unknown_tier",
        "no_tier",
        "a_tier_twice",
        "no_fixture",
        "gpu_code_without_the_gpu",
        "gpu_without_a_code",
        "misspelt_gpu_code",
    ],
)
def test_a_bad_tier_or_gpu_code_is_an_error_saying_what_to_write(tmp_path, entry, error):
    with pytest.raises(SpecError, match="mistakes") as raised:
        load_spec(write_exercise(tmp_path, _spec_with(entry)))
    assert error in str(raised.value)
