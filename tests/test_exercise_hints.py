"""An exercise's own hints ([[mistakes]] in its spec.toml): each classic mistake its README names says how it
fails first and what the learner reads, tried before the grader's generic hints (grader/checks/hints.py).

Here the matcher logic on fake checks and the spec's errors (fast). Every mistake's fixture is graded end to end,
its verdict and its hint expected, by tests/test_exercise_mistakes.py."""

from __future__ import annotations

import re

import pytest
from unit.conftest import toy_spec, write_exercise

from grader.checks import hints
from grader.core.discovery import discover_exercises
from grader.core.records import FAILED, Check, GradeResult
from grader.core.spec import SpecError, load_spec

SOFTMAX_OVERFLOW = "tl.exp of a large value overflows"  # the generic NaN hint's first cause: softmax's topic


def mistakes_toml(*entries: str) -> str:
    return "".join(f"\n[[mistakes]]\n{entry.strip()}\n" for entry in entries)


TWO_ALIKE = mistakes_toml(
    'name = "first"\nhint = "first hint"\ncheck = "numerics"\ncode = "mismatch"\nfirst_case = "n=5"\nnan = true',
    'name = "second"\nhint = "second hint"\ncode = ["mismatch", "partial_write"]\nfirst_case = ["n=5", "n=37"]\nnan = true',
    'name = "wrong"\nhint = "wrong hint"\nfirst_case = "n=37"\nnan = false\nmessage = "elements of c wrong"',
    'name = "cuda_only"\nhint = "cuda hint"\nlang = "cuda"\ncode = "mismatch"',
    'name = "declared_only"\ncode = "mismatch"\nfirst_case = "n=64"',  # no hint: the generic one answers
)


CUDA_VERSION = '[variants.cuda]\nkind = "cuda"\nstub = "toy.cu"\nentry = "toy"\nargs = ["a", "b", "c", "n:int32"]\n'


@pytest.fixture
def toy(tmp_path):
    return load_spec(write_exercise(tmp_path, toy_spec(after=CUDA_VERSION + TWO_ALIKE)))


def failed(message: str, lang: str = "triton", **details) -> tuple[Check, GradeResult]:
    check = Check("numerics", FAILED, message, {"code": "mismatch", **details})
    return check, GradeResult("toy", lang, "learner", 1, checks=[check])


def hint_of(spec, message: str, lang: str = "triton", **details) -> str | None:
    check, result = failed(message, lang, **details)
    hints.annotate(result, spec)
    return check.details.get("hint")


# --- the matchers, on fake checks (fast) ---------------------------------------------------------


def test_the_spec_parses_mistakes_into_typed_entries(toy):
    first, second, wrong, cuda, declared = toy.mistakes
    assert (first.name, first.check, first.code, first.first_case, first.nan) == (
        "first",
        "numerics",
        ["mismatch"],
        ["n=5"],
        True,
    )
    assert (
        second.code == ["mismatch", "partial_write"] and second.first_case == ["n=5", "n=37"] and second.check is None
    )
    assert (
        wrong.nan is False and wrong.message == "elements of c wrong" and cuda.lang == "cuda" and cuda.fixture is None
    )
    assert declared.hint is None


def test_mistakes_that_fail_alike_give_each_hint_in_spec_order(toy):
    text = hint_of(toy, "n=5, trial 1: 5 of 5 elements of c wrong; 5 NAN", case={"n": 5}, nan=5, got=float("nan"))
    assert text == "2 mistakes fail this way here; fix the one you made:\n1. first hint\n2. second hint"


def test_one_matching_mistake_gives_its_hint_alone(toy):
    assert (
        hint_of(toy, "n=37, trial 2: 3 of 37 elements of c never written", case={"n": 37}, nan=1, code="partial_write")
        == "second hint"
    )
    assert (
        hint_of(toy, "n=37, trial 1: 4 of 37 elements of c wrong; max abs error 1", case={"n": 37}, nan=0, got=1.0)
        == "wrong hint"
    )


def test_nan_false_rejects_a_nan_and_a_non_finite_got_counts_as_one(toy):
    assert hint_of(toy, "n=37, trial 1: 4 of 37 elements of c wrong", case={"n": 37}, got=float("inf")) != "wrong hint"


def test_first_case_matches_whole_words_of_the_case_label(tmp_path):
    spec = load_spec(
        write_exercise(
            tmp_path,
            toy_spec(
                replace={
                    "[[cases]]\nn = 37\n": "[[cases]]\nn = 37\n[[cases]]\nn = 5000\ninputs.a = { offset = 100.0 }\n"
                },
                after=mistakes_toml(
                    'name = "five"\nhint = "five"\nfirst_case = "n=5"',
                    'name = "shifted"\nhint = "shifted"\nfirst_case = "a offset=100.0"',
                ),
            ),
        )
    )
    assert hint_of(spec, "n=5, trial 1: wrong", case={"n": 5}) == "five"
    assert hint_of(spec, "n=5000 (a offset=100.0), trial 1: wrong", case={"n": 5000}) == "shifted"  # not "n=5"
    assert hints.case_label(Check("numerics", FAILED, "timed size n=64: out wrong", {"case": {"n": 64}})) == "n=64"
    assert hints.case_label(Check("load", FAILED, "toy.py: no `toy`", {})) is None  # a check about no case


def test_lang_picks_the_version_by_its_name_or_its_language(toy):
    assert hint_of(toy, "n=64: something else", lang="cuda", case={"n": 64}) == "cuda hint"
    assert hint_of(toy, "n=64: something else", lang="triton", case={"n": 64}) != "cuda hint"


def test_the_exercise_hint_comes_before_the_generic_one_and_the_generic_answers_otherwise(toy):
    nan_at_5 = hint_of(toy, "n=5, trial 1: 5 of 5 elements of c wrong; 5 NAN", case={"n": 5}, nan=5, got=float("nan"))
    assert SOFTMAX_OVERFLOW not in nan_at_5
    generic = hint_of(
        toy, "n=64, trial 1: 64 of 64 elements of c wrong; 64 NAN", case={"n": 64}, nan=64, got=float("nan")
    )
    assert SOFTMAX_OVERFLOW in generic  # only the hint-less mistake of the toy's matches n=64: the generic answers
    check, result = failed("n=64, trial 1: wrong", case={"n": 64})
    assert [m.name for m in hints.matching_mistakes(check, hints.Context(result, toy))] == ["declared_only"]


def test_a_hintless_mistake_leaves_the_answer_to_the_generic_rule_that_names_the_row_stride():
    rows, cols = 37, 781  # softmax's x as a row slice read with N: NaN from the gaps, taken for never written
    check = Check(
        "numerics",
        FAILED,
        f"M={rows} N={cols} (x layout=row_slice), trial 1: 28116 of 28897 elements of out "
        "never written (first at index [1, 0])",
        {
            "code": "partial_write",
            "case": {"M": rows, "N": cols},
            "unwritten": (rows - 1) * cols,
            "first_index": cols,
            "last_unwritten": rows * cols - 1,
            "total": rows * cols,
        },
    )
    result = GradeResult("softmax", "triton", "learner", 1, checks=[check])
    spec = discover_exercises()["softmax"]
    assert [m.name for m in hints.matching_mistakes(check, hints.Context(result, spec))] == ["row_stride_n"]
    hints.annotate(result, spec)
    assert check.details["hint"].startswith("row 0 is right and every row from 1 on is wrong: a row is found with N")


@pytest.mark.parametrize(
    "entry, error",
    [
        ('name = "a"\nhint = "h"\nfirst_case = "n=5"\ncases = "n=5"', "unknown key(s) cases"),
        ('name = "a"\nhint = "h"\ncheck = "numerics"', "give at least one of code, first_case, nan, message"),
        ('name = "a"\nhint = "h"\nfirst_case = "n=6"', "first_case = 'n=6' is in no case's label"),
        ('name = "a"\nhint = "h"\nfirst_case = "n=3"', "first_case = 'n=3' is in no case's label"),  # n=37: whole words
        ('name = "a"\nhint = "h"\nmessage = "(unclosed"', "is not a regular expression"),
        ('name = "a"\nhint = "h"\nnan = "yes"\n', "nan = 'yes'"),
        ('name = "a"\nhint = "h"\ncode = ["mismatch", 3]', "give a string or a list of strings"),
        ('name = "a"\nhint = "h"\ncode = "mismatch"\nlang = "cuda"', "lang = 'cuda'; this exercise has: triton"),
        ('name = "A b"\nhint = "h"\ncode = "mismatch"', "name = 'A b'"),
        ('name = "a"\nhint = " "\ncode = "mismatch"', "hint = ' '"),
    ],
)
def test_a_bad_mistake_entry_is_an_error_naming_it(tmp_path, entry, error):
    with pytest.raises(SpecError, match="mistakes") as raised:
        load_spec(write_exercise(tmp_path, toy_spec(after=mistakes_toml(entry))))
    assert error in str(raised.value)


def test_two_mistakes_with_one_name_are_an_error(tmp_path):
    twice = mistakes_toml('name = "a"\nhint = "h"\nnan = true', 'name = "a"\nhint = "h2"\nnan = false')
    with pytest.raises(SpecError, match="a second mistake named 'a'"):
        load_spec(write_exercise(tmp_path, toy_spec(after=twice)))


def test_on_a_gpu_a_mistake_matches_its_gpu_code_and_elsewhere_its_code(tmp_path):
    """A mistake whose GPU verdict differs (gpu_code: a store past the end is out_of_bounds on a GPU, a wrong
    value on the interpreter) gets its hint on either machine."""
    entry = mistakes_toml(
        'name = "tail"\nhint = "tail hint"\ncode = "mismatch"\ngpu_code = "out_of_bounds"\n'
        'fixture = "x.py"\ntiers = ["cpu", "gpu"]'
    )
    spec = load_spec(write_exercise(tmp_path, toy_spec(after=entry)))
    for device, code, hinted in [
        ({"type": "cpu"}, "mismatch", True),
        ({"type": "cuda"}, "out_of_bounds", True),
        ({"type": "cuda"}, "mismatch", False),
        ({"type": "cpu"}, "out_of_bounds", False),
    ]:
        check = Check("numerics", FAILED, "n=5: wrong", {"code": code})
        result = GradeResult("toy", "triton", "learner", 1, checks=[check], device=device)
        hints.annotate(result, spec)
        assert (check.details.get("hint") == "tail hint") is hinted, (device, code)


def test_an_exercise_whose_readme_names_classic_mistakes_declares_them_with_hints():
    """A README that tells the learner its classic mistakes declares them as [[mistakes]] (whose fixtures
    tests/test_exercise_mistakes.py grades, expecting each hint), so a grade says what the README says."""
    naming = re.compile(r"classic mistake|common mistake|the mistakes that", re.IGNORECASE)
    for exercise, spec in sorted(discover_exercises().items()):
        if naming.search((spec.folder / "README.md").read_text()):
            assert spec.mistakes, f"{exercise}: its README names classic mistakes; declare them as [[mistakes]]"
