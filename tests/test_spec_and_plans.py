import pytest

from grader.core import exprs
from grader.core.discovery import discover_exercises
from grader.core.plans import load_plans
from grader.core.spec import SpecError, load_spec


def test_every_exercise_spec_loads_and_has_its_files():
    exercises = discover_exercises()
    assert {"vector_add", "reduction", "matmul", "softmax", "gelu_op"} <= set(exercises)
    for spec in exercises.values():
        assert (spec.folder / "reference.py").exists()
        assert (spec.folder / "README.md").exists()
        for variant in spec.variants.values():
            assert (spec.folder / variant.stub).exists(), f"{spec.id}: stub {variant.stub} missing"


def test_every_exercise_has_sizes_that_are_not_block_multiples_and_a_timed_size():
    for spec in discover_exercises().values():
        sizes = [v for c in spec.cases for v in c.params.values() if isinstance(v, int)]
        assert any(s % 2 for s in sizes), f"{spec.id}: no odd size"
        assert spec.performance.cases, f"{spec.id}: no timed size"
        assert spec.performance.bytes or spec.performance.flops


def test_vector_add_has_both_languages():
    spec = discover_exercises()["vector_add"]
    assert set(spec.variants) == {"cuda", "triton"}
    assert spec.variants["cuda"].kind == "cuda_host"


def write_spec(folder, args='["x"]', case_extra=""):
    folder.mkdir()
    (folder / "spec.toml").write_text(
        f'id = "{folder.name}"\n[variants.triton]\nstub = "b.py"\nentry = "f"\nargs = {args}\n'
        f'[inputs.x]\nshape = ["n"]\n[outputs.y]\nshape = ["n"]\n[[cases]]\nn = 3\n{case_extra}'
        "[tolerance.float32]\natol = 0\nrtol = 0\n"
    )
    return folder


def test_spec_with_unknown_argument_is_rejected_with_the_file_named(tmp_path):
    folder = write_spec(tmp_path / "broken", args='["x", "nope"]')
    with pytest.raises(SpecError, match=r"broken/spec.toml: argument 'nope'"):
        load_spec(folder)


def test_a_layout_that_swaps_dimensions_1_and_2_needs_three_of_them(tmp_path):
    folder = write_spec(tmp_path / "flat", case_extra='inputs.x = { layout = "interleaved" }\n')
    with pytest.raises(SpecError, match="swaps dimensions 1 and 2 in memory: x has 1"):
        load_spec(folder)


def test_spec_without_tolerance_for_a_case_dtype_is_rejected(tmp_path):
    folder = write_spec(tmp_path / "t", case_extra='dtype = "float16"\n')
    with pytest.raises(SpecError, match=r"no \[tolerance.float16\]"):
        load_spec(folder)


def test_a_case_may_name_its_own_tolerance_table_and_it_must_exist(tmp_path):
    with pytest.raises(SpecError, match=r"tolerance = 'exact_zero' names no table: add \[tolerance.exact_zero\]"):
        load_spec(write_spec(tmp_path / "missing", case_extra='tolerance = "exact_zero"\n'))
    spec = load_spec(
        write_spec(
            tmp_path / "named",
            case_extra='tolerance = "loose"\n[[cases]]\nn = 4\n[tolerance.loose]\natol = 1e-6\nrtol = 0\n',
        )
    )
    named, plain = spec.cases
    assert "tolerance" not in named.params
    assert spec.tolerance_of(named).atol == 1e-6 and spec.tolerance_of(plain).atol == 0


def test_expressions_allow_arithmetic_on_case_names_only():
    assert exprs.evaluate("2 * M * N * K", {"M": 2, "N": 3, "K": 4}) == 48
    assert exprs.evaluate_int("n // 4 + 1", {"n": 9}) == 3
    with pytest.raises(ValueError, match="unknown name"):
        exprs.evaluate("n * q", {"n": 1})
    with pytest.raises(ValueError, match="unsupported"):
        exprs.evaluate("__import__('os')", {})


def test_five_plans_with_the_eleven_week_plan_as_default():
    plans = load_plans()
    assert set(plans) == {"cuda-11-week", "triton-5-day", "challenge-100-day", "transformer-ops", "thunderkittens"}
    assert plans["cuda-11-week"].default
    assert len(plans["cuda-11-week"].units) == 11
    assert len(plans["triton-5-day"].units) == 5
    assert len(plans["challenge-100-day"].units) == 100
    assert [u.key for u in plans["challenge-100-day"].units][:3] == ["day1", "day2", "day3"]


def test_every_exercise_a_plan_names_exists_and_unwritten_ones_are_listed_as_planned():
    exercises = discover_exercises()
    for plan in load_plans().values():
        for unit in plan.units:
            for item in unit.exercises:
                assert item.id in exercises, f"{plan.id} {unit.key} names missing exercise {item.id}"
                assert item.lang in exercises[item.id].variants
            assert unit.exercises or unit.planned or unit.deliverable, f"{plan.id} {unit.key} is empty"


def test_every_exercise_reading_heads_through_strides_grades_them_interleaved():
    """Where (B, H, N, d) tensors come as row slices (the kernel must use their strides), a case also gives them
    interleaved, as a fused QKV projection does: row slices alone pass a kernel that finds head h at
    (b * H + h) * N rows, since their head stride is N row strides."""

    def layouts(spec, kind):
        return {
            options.get("layout")
            for case in spec.cases
            for name, options in getattr(case, kind).items()
            if list(next(t for t in getattr(spec, kind) if t.name == name).shape)[:2] == ["B", "H"]
        }

    checked = []
    for spec in discover_exercises().values():
        if "row_slice" in layouts(spec, "inputs"):
            assert "interleaved" in layouts(spec, "inputs"), (
                f"{spec.id}: add a case with its (B, H, N, d) inputs interleaved"
            )
            checked.append(spec.id)
    assert {"flash_attention_v1", "flash_attention_v2", "flash_attention_v2_backward", "attention_patterns"} <= set(
        checked
    )
