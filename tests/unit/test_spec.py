"""spec.toml parsing (grader/core/spec.py): what a good spec loads into, and the SpecError each malformed one gets,
naming the file and the field."""

from __future__ import annotations

import subprocess
import sys

import pytest

from grader.core.paths import course_root
from grader.core.spec import Case, SpecError, TensorSpec, Tolerance, load_spec, shape_of

from .conftest import TOY_SPEC, toy_spec, toy_with

CASE_5 = "[[cases]]\nn = 5\n"


def test_the_toy_spec_loads_into_its_variant_tensors_cases_and_bar(toy):
    variant = toy.variant(None)
    assert (variant.lang, variant.kind, variant.entry) == ("triton", "triton", "toy")
    assert [a.name for a in variant.args] == ["a", "b", "c"]
    assert [t.name for t in toy.inputs] == ["a", "b"] and [t.name for t in toy.outputs] == ["c"]
    assert [c.params for c in toy.cases] == [{"n": 5}, {"n": 37}]
    assert toy.trials == 2 and toy.performance.threshold == 0.7
    assert toy.scoring == {"numerics": 7.0, "speed": 3.0}
    assert toy.tolerance["float32"] == Tolerance(1e-6, 1e-6, None)


def test_a_case_keeps_its_options_apart_from_its_parameters(exercise_dir):
    case_line = '[[cases]]\nn = 5\ntrials = 4\ngpu_only = true\ninputs = { a = { layout = "row_slice" } }\n'
    spec = load_spec(exercise_dir(toy_spec(replace={CASE_5: case_line})))
    case = spec.cases[0]
    assert case.params == {"n": 5}
    assert (case.trials, case.gpu_only, case.inputs) == (4, True, {"a": {"layout": "row_slice"}})
    assert spec.trials_for(case) == 4 and spec.trials_for(spec.cases[1]) == 2


def test_a_case_label_names_its_parameters_and_tensor_options():
    case = Case({"n": 5, "dtype": "float16"}, inputs={"a": {"layout": "transposed"}})
    assert case.label() == "n=5 dtype=float16 (a layout=transposed)"
    assert case.dtype == "float16" and Case({"n": 1}).dtype == "float32"


def test_shapes_are_evaluated_from_the_case_and_must_be_whole():
    tensor = TensorSpec("x", ["M", "N // 2", 3])
    assert shape_of(tensor, Case({"M": 4, "N": 10})) == [4, 5, 3]
    with pytest.raises(ValueError, match="not a whole number"):
        shape_of(TensorSpec("x", ["N / 4"]), Case({"N": 10}))


def test_a_stride_argument_names_its_tensor_and_dimension(exercise_dir):
    spec = load_spec(exercise_dir(toy_with(args=["a", "b", "c", "a.stride(0):int64"])))
    stride = spec.variant("triton").args[-1]
    assert (stride.stride_of, stride.stride_dim, stride.ctype) == ("a", 0, "int64")


def test_accumulated_rtol_grows_with_the_square_root_of_the_sum_length():
    tol = Tolerance(0.0, 1e-6, accumulate="n")
    assert tol.rtol_for({"n": 4}, "float32") == 1e-6  # 2 * 2 * 2^-24 < 1e-6
    assert tol.rtol_for({"n": 2**20}, "float32") == pytest.approx(2 * 2**10 * 2.0**-24)
    assert Tolerance(0.0, 1e-6).rtol_for({"n": 2**20}, "float32") == 1e-6


def test_an_output_with_its_own_tolerance_table_is_judged_by_it(exercise_dir):
    spec = load_spec(
        exercise_dir(toy_with(output_c='tolerance = "loose"', after="[tolerance.loose]\natol = 0.1\nrtol = 0.2\n"))
    )
    assert spec.tolerance_of(spec.cases[0], spec.outputs[0]) == Tolerance(0.1, 0.2)
    assert spec.tolerance_of(spec.cases[0]) == Tolerance(1e-6, 1e-6)


def test_a_missing_tolerance_for_a_dtype_names_the_table_to_add(toy):
    with pytest.raises(SpecError, match=r"no \[tolerance.float16\] for a float16 case"):
        toy.tolerance_for("float16")


TWO_VERSIONS = toy_spec(
    after='[variants.cuda]\nkind = "cuda"\nstub = "toy.cu"\nentry = "toy"\nargs = ["a", "b", "c", "n"]\n'
)


def test_two_versions_without_a_default_ask_for_lang(exercise_dir):
    spec = load_spec(exercise_dir(TWO_VERSIONS))
    with pytest.raises(SpecError, match=r"toy exists in cuda and triton: add --lang cuda\|triton"):
        spec.variant(None)
    assert spec.variant("cuda").kind == "cuda"


def test_default_lang_picks_the_version_without_lang(exercise_dir):
    spec = load_spec(exercise_dir('default_lang = "cuda"\n' + TWO_VERSIONS))
    assert spec.variant(None).lang == "cuda"


def test_a_language_finds_the_only_version_in_it_whatever_its_name(exercise_dir):
    spec = load_spec(exercise_dir(toy_spec(replace={"[variants.triton]": "[variants.fused]"})))
    assert spec.variant("triton").lang == "fused"
    with pytest.raises(SpecError, match="toy has no cuda version; it has: fused: pick one with --lang fused"):
        spec.variant("cuda")


def test_loading_a_spec_imports_no_torch(exercise_dir):
    """The worker's start-up overlaps the parent's: a spec load that imported torch would serialise them."""
    folder = exercise_dir()
    code = (
        f"import sys; from grader.core.spec import load_spec; load_spec(__import__('pathlib').Path({str(folder)!r})); "
        "sys.exit('torch' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], cwd=course_root()).returncode == 0


def test_an_unreadable_file_is_a_spec_error_naming_it(tmp_path):
    with pytest.raises(SpecError, match="spec.toml"):
        load_spec(tmp_path / "nowhere")
    (tmp_path / "spec.toml").write_text("id = \n")
    with pytest.raises(SpecError, match=str(tmp_path / "spec.toml")):
        load_spec(tmp_path)


def test_a_missing_required_key_is_a_spec_error_not_a_key_error(exercise_dir):
    with pytest.raises(SpecError, match="KeyError: 'entry'"):
        load_spec(exercise_dir(toy_spec(replace={'entry = "toy"\n': ""})))


NO_CASES = TOY_SPEC.replace(CASE_5, "").replace("[[cases]]\nn = 37\n", "")

# (what is wrong, the spec text, what the message must say)
MALFORMED = [
    (
        "unknown kind",
        toy_spec(replace={'kind = "triton"': 'kind = "opencl"'}),
        "variants.triton.kind = 'opencl'; known kinds",
    ),
    ("upper-case version name", toy_spec(replace={"[variants.triton]": "[variants.Triton]"}), "lower case letters"),
    (
        "a language name of another kind",
        toy_spec(replace={"[variants.triton]": "[variants.cuda]"}),
        "[variants.cuda] has kind 'triton', a triton kind: name it triton",
    ),
    ("no cases", "cases = []\n" + NO_CASES, "at least one [[cases]] entry is needed"),
    (
        "id differs from folder",
        toy_spec(replace={'id = "toy"': 'id = "other"'}),
        "id 'other' differs from its folder name 'toy'",
    ),
    (
        "argument of nothing",
        toy_with(args=["a", "b", "c", "m"]),
        "argument 'm' of triton is neither a tensor nor a case parameter",
    ),
    (
        "a parameter only some cases have",
        toy_with(args=["a", "b", "c", "k"], case_5="k = 2"),
        "argument 'k' of triton is neither",
    ),
    ("stride of no tensor", toy_with(args=["a", "b", "c", "z.stride(0)"]), "'z' is not a tensor of the spec"),
    (
        "stride dimension out of range",
        toy_with(args=["a", "b", "c", "a.stride(1)"]),
        "a has 1 dimension(s); give a dimension from 0 to 0",
    ),
    ("unknown tensor dtype", toy_with(input_a='dtype = "float8"'), "a.dtype = 'float8'; known:"),
    ("unknown init", toy_with(input_a='init = "zeros"'), "a.init = 'zeros'; known: normal, uniform, positive"),
    ("an input with a tolerance", toy_with(input_a='tolerance = "x"'), "inputs.a.tolerance: only outputs are judged"),
    ("an input with a check", toy_with(input_a='check = "ok"'), "inputs have no check: remove it"),
    ("a transform that is no name", toy_with(input_a='transform = "a b"'), "a.transform = 'a b': name a function"),
    ("a case dtype without tolerance", toy_with(case_5='dtype = "float16"\n'), "no [tolerance.float16]"),
    (
        "a case tolerance naming no table",
        toy_with(case_5='tolerance = "loose"\n'),
        "tolerance = 'loose' names no table",
    ),
    (
        "an output tolerance naming no table",
        toy_with(output_c='tolerance = "loose"'),
        "outputs.c.tolerance = 'loose' names no table",
    ),
    (
        "case options for an unknown tensor",
        toy_with(case_5="inputs = { z = { scale = 2 } }\n"),
        "inputs.z is not one of the spec's inputs",
    ),
    (
        "an unknown layout",
        toy_with(case_5='inputs = { a = { layout = "diagonal" } }\n'),
        "inputs.a.layout = 'diagonal'; known: contiguous, row_slice, transposed, interleaved",
    ),
    (
        "interleaved on a vector",
        toy_with(case_5='outputs = { c = { layout = "interleaved" } }\n'),
        "swaps dimensions 1 and 2 in memory: c has 1",
    ),
    (
        "an unknown special",
        toy_with(case_5='inputs = { a = { special = "nan" } }\n'),
        "inputs.a.special = 'nan'; known:",
    ),
    ("an output transform", toy_with(case_5='outputs = { c = { transform = "f" } }\n'), "outputs have none"),
    ("an unknown reference device", 'reference_device = "tpu"\n' + TOY_SPEC, "reference_device = 'tpu'"),
    (
        "a default_lang of no version",
        'default_lang = "cuda"\n' + TOY_SPEC,
        "default_lang = 'cuda' is not one of its variants (triton)",
    ),
    ("an unknown variant dtype", toy_with(variant='dtypes = ["float8"]'), "variants.triton.dtypes has float8"),
    ("variant dtypes leaving no case", toy_with(variant='dtypes = ["float16"]'), "leaves it no [[cases]] entry"),
    (
        "variant dtypes excluding the timed size",
        toy_with(
            variant='dtypes = ["float16"]',
            case_5='dtype = "float16"',
            after="[tolerance.float16]\natol = 1e-3\nrtol = 1e-3\n",
        ),
        "excludes the timed size(s) n=64",
    ),
    (
        "a memory limit of unknown names",
        toy_with(performance='max_extra_bytes = "4 * m"'),
        "performance.max_extra_bytes = '4 * m': unknown name 'm'",
    ),
    ("a version's flops of unknown names", toy_with(variant='flops = "2 * q"'), "variants.triton.flops = '2 * q'"),
    (
        "pinned host memory on a triton version",
        toy_with(variant='host_memory = "pinned"'),
        'host_memory applies to kind "cuda_host" only',
    ),
    (
        "an unknown host memory",
        toy_with(variant='host_memory = "mapped"'),
        "host_memory = 'mapped'; known: pageable, pinned",
    ),
    (
        "baseline_args not a timed parameter",
        toy_with(performance="baseline_args = { n_streams = 1 }"),
        "baseline_args names n_streams",
    ),
    ("a build for a triton version", toy_with(variant='build = "cmake"'), 'build and files apply to kind "torch_op"'),
    ("an unknown build", toy_with(variant='build = "make"'), "build = 'make'; known: jit, setup, cmake"),
    (
        "link on a triton version",
        toy_with(variant='link = ["cublas"]'),
        'only kinds "cuda" and "cuda_host" link libraries',
    ),
    (
        "a link flag instead of a name",
        toy_with(variant='link = ["-lcublas"]'),
        "give a list of library names as -l takes them",
    ),
    ("an unknown requirement", toy_with(variant='requires = ["cutlass"]'), "give a list of thunderkittens"),
    (
        "a sanitizer skip of an unknown tool",
        toy_with(variant='sanitizer_skip = { leakcheck = "x" }'),
        "TOOL one of racecheck, synccheck, memcheck, initcheck",
    ),
    ("a sanitizer skip without a reason", toy_with(variant='sanitizer_skip = { synccheck = " " }'), "sanitizer_skip"),
    (
        "a reference function reference.py lacks",
        toy_with(variant='reference = "gelu"'),
        "reference = 'gelu' is not a function of",
    ),
    (
        "an in-place output of another shape",
        toy_with(output_c='[outputs.a]\nshape = ["n", 2]'),
        "outputs.a has the name of an input",
    ),
    (
        "op_checks without [checks]",
        toy_with(case_5="op_checks = true\n"),
        "has op_checks = true but the spec has no [checks]",
    ),
    (
        "[checks] with an unknown key",
        toy_spec(after='[checks]\ncustom_op = "toy::add(Tensor a, Tensor b) -> Tensor"\nfast = true\n'),
        "unknown: fast",
    ),
]


@pytest.mark.parametrize(
    "text, message", [(text, message) for _, text, message in MALFORMED], ids=[what for what, _, _ in MALFORMED]
)
def test_a_malformed_spec_is_refused_with_the_field_named(exercise_dir, text, message):
    folder = exercise_dir(text)
    with pytest.raises(SpecError) as raised:
        load_spec(folder)
    assert message in str(raised.value)
    assert str(folder / "spec.toml") in str(raised.value)


def test_spec_expressions_evaluate_from_many_threads_at_once():
    """The judge and the input feed's producer evaluate shapes at the same time: each gets its own answer from the
    cached, one-at-a-time parses. (Unlocked, CPython 3.11's ast.parse raised SystemError in about one grade of
    test_judge.py in fifteen; the race is too rare to provoke on demand here.)"""
    from concurrent.futures import ThreadPoolExecutor

    from grader.core import exprs

    def many(start: int) -> list[int]:
        return [exprs.evaluate_int(f"{i} * n + ((({i} + 1)))", {"n": 2}) for i in range(start, start + 300)]

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(many, range(0, 8 * 300, 300)))
    assert [r for chunk in results for r in chunk] == [3 * i + 1 for i in range(8 * 300)]


def test_a_spec_edited_in_place_is_read_again_and_each_load_is_a_spec_of_its_own(tmp_path):
    from .conftest import write_exercise

    folder = write_exercise(tmp_path, toy_spec(replace={"trials = 2": "trials = 3"}))
    first = load_spec(folder)
    first.cases.clear()  # what one caller does to its spec is not the next one's
    assert load_spec(folder).cases and load_spec(folder).trials == 3
    (folder / "spec.toml").write_text(toy_spec(replace={"trials = 2": "trials = 4"}))  # same size, same instant
    assert load_spec(folder).trials == 4
