"""Hints keyed to the way a kernel failed: each failure mode gets its own next step under the check,
read from the check's code and details (synthetic results here; one real grade at the end)."""

import pytest
from conftest import submission

from grader.checks import hints
from grader.core.discovery import discover_exercises, resolve
from grader.core.records import Check, GradeResult, Timing
from grader.reports import console


def spec_of(exercise):
    return discover_exercises()[exercise]


def hint_for(exercise, lang, check, **result_fields):
    result = GradeResult(exercise=exercise, lang=lang, source="learner", seed=11, checks=[check], **result_fields)
    hints.annotate(result, spec_of(exercise))
    return check.details.get("hint")


LADDER = """# x

## Ladder

Some words first.

1. **Naive**: one thread per element (about 10% of roofline).
2. **Tiles**: shared memory,
   reused TILE times (about 17% of roofline).
3. **Registers**: a block of C per thread.

A paragraph after the list,
   indented, belongs to no step.

### Ladder (Triton)

1. **Correct**: masked.
2. **Fused**: one read (about 92% of roofline).

## Next section

4. not a step
"""


def test_the_ladder_is_read_from_its_section_with_titles_and_figures():
    steps = hints.parse_ladder(LADDER, "cuda")
    assert [(s.number, s.title, s.roofline_pct) for s in steps] == [
        (1, "Naive", 10.0),
        (2, "Tiles", 17.0),
        (3, "Registers", None),
    ]
    assert steps[1].text == "Tiles: shared memory, reused TILE times (about 17% of roofline)."
    assert "paragraph" not in steps[2].text


def test_a_language_ladder_serves_only_its_language():
    triton = hints.parse_ladder(LADDER, "triton")
    assert [s.title for s in triton] == ["Naive", "Tiles", "Registers", "Correct", "Fused"]
    assert [s.title for s in hints.parse_ladder(LADDER.replace("## Ladder\n", "## Ladder (CUDA)\n"), "triton")] == [
        "Correct",
        "Fused",
    ]


@pytest.mark.parametrize("exercise", sorted(discover_exercises()))
def test_every_exercise_readme_has_a_ladder_per_language(exercise):
    spec = spec_of(exercise)
    for variant in spec.variants.values():
        steps = hints.read_ladder(spec, variant.lang)
        assert len(steps) >= 2 and [s.number for s in steps] == list(range(1, len(steps) + 1)), (exercise, variant.lang)
        assert all(s.title for s in steps)


def test_the_next_step_is_the_first_clearly_above_the_learners_roofline():
    steps = hints.parse_ladder(LADDER, "cuda")
    assert [s.number for s in hints.next_steps(steps, 9.0)] == [2]
    assert [s.number for s in hints.next_steps(steps, 16.5)] == [3]  # step 2's 17% is where they already are
    assert [s.number for s in hints.next_steps(steps, None)] == [2, 3]  # no figure: every step after a correct kernel


def speed_check(ratio, case="M=4096 N=4096 K=4096"):
    return Check(
        "speed",
        "failed",
        f"{case}: 25.6 ms, 5.36 TFLOP/s; your speed is {ratio:.2f}× the solution's (needed: 0.15×)",
        {"ratio": ratio, "threshold": 0.15, "bar": "live solution"},
    )


def test_correct_but_slow_names_the_next_ladder_step_with_the_roofline_reached():
    timing = Timing(case="M=4096 N=4096 K=4096", learner_ms=25.6, roofline_pct=10.4, ratio=0.126)
    hint = hint_for("matmul", "cuda", speed_check(0.126), timings=[timing])
    assert hint.startswith("correct, at 10% of this GPU's roofline, 0.13× the solution's speed (needed: 0.15×)")
    assert "step 2: Shared-memory tiles" in hint and "exercises/matmul/README.md" in hint
    assert "kcourse tune matmul" in hint  # within reach of the bar: tuning the tile may be enough


def test_a_reduction_stuck_at_a_tree_per_block_is_sent_to_the_grid_stride_loop():
    timing = Timing(case="n=268435456", learner_ms=1.94, roofline_pct=18.4, ratio=0.19)
    check = Check("speed", "failed", "n=268435456: 1.94 ms", {"ratio": 0.19, "threshold": 0.5})
    hint = hint_for("reduction", "cuda", check, timings=[timing])
    assert "step 4: A grid-stride loop" in hint and "Warp shuffles" not in hint


def test_without_a_roofline_the_hint_lists_the_steps_after_a_correct_kernel():
    check = Check("speed", "failed", "n=16777216: 60 ms", {"ratio": 0.5, "threshold": 0.7})
    hint = hint_for("vector_add", "cuda", check, timings=[Timing(case="n=16777216", learner_ms=60.0)])
    assert "step 2: Only the copies you need" in hint and "% of this GPU's roofline" not in hint


def test_a_tail_never_written_says_where_it_starts_and_how_to_mask_it():
    def check():
        return Check(
            "numerics",
            "failed",
            "n=1000 (seed 1011): 232 of 1000 elements of c never written (first at index 768)",
            {"code": "partial_write", "unwritten": 232, "first_index": 768, "case": {"n": 1000}, "seed": 1011},
        )

    hint = hint_for("vector_add", "triton", check())
    assert hint.startswith(
        "the last 232 elements (from index 768 = 3 × 256, where a block of 256 starts) were never written"
    )
    assert "mask = offsets < n" in hint and "triton.cdiv(n, BLOCK)" in hint
    assert "(n + threads - 1) / threads" in hint_for("vector_add", "cuda", check())


def test_columns_never_written_past_a_block_point_at_the_column_mask():
    rows, cols, first_col = 37, 781, 512
    check = Check(
        "numerics",
        "failed",
        "M=37 N=781: elements of out never written",
        {
            "code": "partial_write",
            "unwritten": rows * (cols - first_col),
            "first_index": first_col,
            "case": {"M": rows, "N": cols},
        },
    )
    hint = hint_for("softmax", "triton", check)
    assert "the last columns (from column 512 = 1 × 512" in hint and "mask = cols < n_cols" in hint


def test_wrong_values_only_at_the_tail_are_called_a_bounds_problem():
    check = Check(
        "numerics",
        "failed",
        "n=1000003: 3 of 1000003 elements of c wrong",
        {
            "code": "mismatch",
            "wrong": 3,
            "first_index": 1000000,
            "last_wrong": 1000002,
            "total": 1000003,
            "got": 0.0,
            "expected": 1.5,
            "nan": 0,
        },
    )
    hint = hint_for("vector_add", "cuda", check)
    assert hint.startswith("only the last 3 elements (from index 1000000") and "if (i < n)" in hint and "n % 4" in hint


def test_rows_after_the_first_wrong_point_at_the_row_stride():
    rows, cols = 37, 781
    check = Check(
        "numerics",
        "failed",
        "M=37 N=781 (x layout=row_slice), trial 1: 28116 of 28897 elements of out wrong; 28116 NaN",
        {
            "code": "mismatch",
            "wrong": (rows - 1) * cols,
            "first_index": cols,
            "last_wrong": rows * cols - 1,
            "total": rows * cols,
            "nan": (rows - 1) * cols,
            "got": float("nan"),
            "expected": 0.0003,
            "case": {"M": rows, "N": cols},
            "trial": 1,
        },
    )
    hint = hint_for("softmax", "triton", check)
    assert hint.startswith(
        "row 0 is right and every row from 1 on is wrong: a row is found with N where it takes the row stride"
    )
    assert "x.stride(0)" in hint and "out.stride(0)" in hint and "its row stride is not N" in hint


def test_nan_in_the_output_is_a_stability_hint():
    check = Check(
        "numerics",
        "failed",
        "M=3 N=5: 15 of 15 elements of out wrong; 15 NaN",
        {
            "code": "mismatch",
            "wrong": 15,
            "first_index": 0,
            "total": 15,
            "nan": 15,
            "got": float("nan"),
            "expected": 0.2,
        },
    )
    hint = hint_for("softmax", "triton", check)
    assert hint.startswith("15 NaN where the reference is finite: a numerical-stability problem")
    assert "subtract the row max before tl.exp" in hint


def test_wrong_on_a_later_trial_of_a_size_that_passed_is_a_race_or_a_value_problem():
    def check(trial):
        return Check(
            "numerics",
            "failed",
            f"n=1000003, trial {trial}: out wrong",
            {
                "code": "mismatch",
                "wrong": 1,
                "first_index": 0,
                "total": 1,
                "got": 1.5e5,
                "expected": 1.6e5,
                "nan": 0,
                "case": {"n": 1000003},
                "trial": trial,
            },
        )

    hint = hint_for("reduction", "cuda", check(2))
    assert hint.startswith("trial 1 of this size passed and trial 2 failed. Grade again with the same --seed")
    assert "__syncthreads()" in hint and "racecheck" in hint and "trials differ in scale" in hint
    assert "race" not in hint_for("reduction", "cuda", check(1))  # the first trial: nothing passed before it


def test_a_reduction_off_by_rounding_is_told_to_sum_in_a_tree():
    check = Check(
        "numerics",
        "failed",
        "n=268435459: out wrong",
        {
            "code": "mismatch",
            "wrong": 1,
            "first_index": 0,
            "total": 1,
            "got": 1.34217e8,
            "expected": 1.34218e8,
            "nan": 0,
            "trial": 1,
        },
    )
    assert "rounding, not logic" in hint_for("reduction", "cuda", check)


@pytest.mark.parametrize(
    "code, expected",
    [
        ("race", "__syncthreads() between writing shared memory"),
        ("racecheck", "__syncthreads() between writing shared memory"),
        ("sync", "not every thread of the block reaches"),
        ("memcheck", "an access outside an allocation"),
        ("initcheck", "a read of device memory nothing wrote"),
    ],
)
def test_each_sanitizer_finding_gets_its_own_hint(code, expected):
    check = Check("sanitizer", "failed", "racecheck: 2 hazards in sum_kernel at reduction.cu:14", {"code": code})
    assert expected in hint_for("reduction", "cuda", check)


def test_not_implemented_points_at_the_todo_lines_of_the_graded_file():
    check = Check("numerics", "failed", "not implemented yet: write add_kernel", {"code": "not_implemented"})
    hint = hint_for("vector_add", "triton", check, file="exercises/vector_add/vector_add.py")
    assert hint.startswith("write the TODOs in vector_add.py (lines 14, 21)")
    unwritten = Check("numerics", "failed", "n=1: no element of out was written", {"code": "not_written"})
    assert "TODOs in reduction.cu (lines 9, 14)" in hint_for(
        "reduction", "cuda", unwritten, file="exercises/reduction/reduction.cu"
    )


def test_load_and_build_failures_say_what_the_grader_expects():
    missing = Check("load", "failed", "x.cu does not export `reduction`", {"code": "missing_entry"})
    assert "reduction(x, out, n)" in hint_for("reduction", "cuda", missing) and 'extern "C"' in hint_for(
        "reduction", "cuda", missing
    )
    signature = Check("load", "failed", "cannot be called", {"code": "bad_signature"})
    assert "vector_add(a, b, c)" in hint_for("vector_add", "triton", signature)
    build = Check(
        "build",
        "failed",
        'r.cu did not compile:\nr.cu:5: error: identifier "f" is undefined\n  f();',
        {"code": "build_error"},
    )
    assert hint_for("reduction", "cuda", build) == (
        "fix the first error first, later ones often follow from it: r.cu:5: "
        'error: identifier "f" is undefined (a misspelt name, a missing '
        "#include, or a function used before it is declared)"
    )


def test_passed_checks_get_no_hint_and_an_existing_hint_is_kept():
    passed = Check("numerics", "passed", "ok", {"code": "partial_write"})
    kept = Check("run", "failed", "hang", {"code": "timeout", "hint": "from the worker"})
    result = GradeResult(exercise="vector_add", lang="triton", source="learner", seed=1, checks=[passed, kept])
    hints.annotate(result, spec_of("vector_add"))
    assert "hint" not in passed.details and kept.details["hint"] == "from the worker"


def test_the_console_prints_the_hint_under_its_check():
    check = Check("run", "failed", "your code ran past the 20 s limit\nsecond line", {"code": "timeout"})
    result = GradeResult(exercise="vector_add", lang="cuda", source="learner", seed=1, checks=[check])
    hints.annotate(result, spec_of("vector_add"))
    lines = console.format_grade(result.finish()).splitlines()
    at = lines.index("  [FAIL] run: your code ran past the 20 s limit")
    assert lines[at + 1] == "         second line"
    assert lines[at + 2].startswith("         hint: a loop whose bound or index never changes")


@pytest.mark.slow
def test_a_real_grade_of_a_dropped_tail_shows_the_mask_hint():
    target = resolve(("vector_add",), lang="triton")
    result = hints_grade(target, "vector_add_no_tail.py")
    check = next(c for c in result.checks if c.status == "failed")
    assert check.details["code"] == "partial_write"
    assert check.details["hint"].startswith("the last 232 elements (from index 768 = 3 × 256")
    assert "         hint: the last 232 elements" in console.format_grade(result)


@pytest.mark.slow
@pytest.mark.parametrize(
    "exercise, name, start",
    [
        ("softmax", "softmax_no_max.py", "NaN where the reference is finite: a numerical-stability problem"),
        ("softmax", "softmax_ncols_stride.py", "row 0 is right and every row from 1 on is wrong"),
    ],
)
def test_real_grades_of_softmax_mistakes_get_their_own_hints(exercise, name, start):
    result = hints_grade(resolve((exercise,)), name)
    check = next(c for c in result.checks if c.status == "failed")
    assert start in check.details["hint"]


def hints_grade(target, name):
    from grader.run.grade import grade

    result = grade(target, submission=submission(name), seed=11)
    hints.annotate(result, target.spec)  # a no-op once grade() annotates: a hint already there is kept
    return result


# Ladders whose steps are not rungs of speed: the first kernels (vector_add, sm_id), the streams' speed-up
# over one stream (stream_overlap), an aside for one skewed input (embedding_backward's step 4).
NO_FIGURES = {
    "vector_add:cuda": {1, 2},
    "vector_add:triton": {1},
    "sm_id:cuda": {1, 2},
    "stream_overlap:cuda": {1, 2, 3},
    "embedding_backward:cuda": {4},
}


def test_every_step_of_a_timed_exercises_ladder_has_the_figure_the_next_step_hint_reads():
    from grader.core.discovery import all_targets

    missing = {}
    for target in all_targets():
        if not target.spec.performance.cases:
            continue
        steps = hints.read_ladder(target.spec, target.variant.lang)
        unread = {s.number for s in steps if s.roofline_pct is None} - NO_FIGURES.get(target.key, set())
        if not steps or unread:
            missing[target.key] = sorted(unread) or "no ladder"
    assert not missing, f"write 'about N% of roofline' in these steps (estimates say so): {missing}"
