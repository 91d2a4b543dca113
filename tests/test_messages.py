"""Failure messages end with what to do next: a compile failure names the compiler's first error (or the
nvcc command to run by hand when it printed nothing), a file in the wrong language says which to give."""

import pytest
from conftest import submission

from grader.child import loading
from grader.core.discovery import resolve
from grader.toolchain import build


def test_a_cu_file_given_to_a_triton_exercise_says_to_give_a_py_file_or_pick_cuda(tmp_path):
    source = tmp_path / "mine.cu"
    source.write_text("__global__ void k() {}\n")
    with pytest.raises(loading.EntryError) as raised:
        loading.load(resolve(("vector_add",), lang="triton").variant, source, None, "learner")
    assert raised.value.code == "wrong_language"
    assert str(raised.value) == (
        "mine.cu is not a Python file: the Triton version of vector_add expects a .py file like "
        "vector_add.py; to grade a .cu file, pick the CUDA version with --lang cuda"
    )


def test_an_exercise_without_a_cuda_version_says_so(tmp_path):
    source = tmp_path / "mine.cu"
    source.write_text("")
    with pytest.raises(loading.EntryError) as raised:
        loading.load(resolve(("softmax_backward",)).variant, source, None, "learner")
    assert raised.value.code == "wrong_language"
    assert str(raised.value) == (
        "mine.cu is not a Python file, and softmax_backward has no CUDA version: give a .py "
        "file like softmax_backward.py with --file"
    )


def test_grading_a_cu_file_as_triton_is_a_load_verdict_not_a_traceback(tmp_path):
    from grader.run.grade import grade

    source = tmp_path / "x.cu"
    source.write_text("x = 1\n")
    result = grade(resolve(("softmax_backward",)), submission=source, seed=3)
    check = next(c for c in result.checks if c.status == "failed")
    assert check.name == "load" and check.details["code"] == "wrong_language"
    assert "give a .py file like softmax_backward.py" in result.verdict and "AttributeError" not in result.verdict


def test_a_cu_file_picks_the_cuda_version_of_an_exercise_that_has_both(tmp_path):
    from grader.cli.options import _resolve

    assert _resolve(("softmax",), None, None, tmp_path / "mine.cu").variant.lang == "cuda"
    assert _resolve(("softmax",), None, None, tmp_path / "mine.py").variant.lang == "triton"
    assert _resolve(("softmax",), None, None).variant.lang == "triton"  # the spec's default_lang
    assert _resolve(("softmax_backward",), None, None, tmp_path / "mine.cu").variant.lang == "triton"


def test_a_compile_failure_message_names_the_first_error_on_its_first_line(tmp_path):
    log = (
        'r.cu:3: warning: variable "unused" was declared but never referenced\n'
        'r.cu:5: error: identifier "undefined_function" is undefined\n      undefined_function(x);\n'
        'r.cu:9: error: expected a ";"\n2 errors detected in the compilation of "r.cu".'
    )
    message = build.failure_message(tmp_path / "r.cu", log)
    first, *rest = message.splitlines()
    assert first == 'r.cu did not compile: r.cu:5: error: identifier "undefined_function" is undefined'
    assert "\n".join(rest) == log


def test_a_silent_compiler_failure_gives_the_nvcc_command_to_run_by_hand(monkeypatch, tmp_path):
    source = tmp_path / "quiet.cu"
    source.write_text("// nvcc was killed before it said anything\n")
    ninja_only = "FAILED: lib.partial.so\n/usr/bin/nvcc -O3 ... -Xptxas -v -shared ...\nninja: build stopped: subcommand failed.\n"
    monkeypatch.setattr(build, "_run_ninja", lambda out_dir, nvcc, flags, src, name: (False, ninja_only))
    monkeypatch.setattr(build, "nvcc_version", lambda nvcc: "13.0")
    result = build.build_shared_library(source, nvcc="/usr/bin/nvcc")
    assert not result.ok
    assert result.log.startswith("nvcc stopped without printing an error")
    assert "run it by hand to see why: /usr/bin/nvcc -O3" in result.log and str(source.resolve()) in result.log
    assert "ninja" not in result.log
    first = build.failure_message(source, result.log).splitlines()[0]
    assert first.startswith("quiet.cu did not compile: nvcc stopped without printing an error") and first.endswith(
        str(source.resolve())
    )


@pytest.mark.nvcc
def test_a_real_compile_error_gives_its_first_error_in_the_one_line_message():
    source = submission("reduction_broken.cu")
    built = build.build_shared_library(source)
    assert not built.ok
    assert build.failure_message(source, built.log).splitlines()[0] == (
        'reduction_broken.cu did not compile: reduction_broken.cu:5: error: identifier "undefined_function" is undefined'
    )


@pytest.mark.nvcc
def test_the_verdict_of_a_compile_failure_names_the_error():
    from grader.run.grade import grade

    result = grade(resolve(("reduction",)), submission=submission("reduction_broken.cu"), seed=5)
    assert (
        result.verdict
        == 'reduction_broken.cu did not compile: reduction_broken.cu:5: error: identifier "undefined_function" is undefined'
    )


def test_a_grade_found_in_another_plan_than_the_default_names_that_plan_in_its_first_line():
    from grader.core.records import GradeResult
    from grader.reports.console import format_grade

    def first_line(unit, plan):
        return format_grade(
            GradeResult(exercise="softmax", lang="cuda", source="learner", seed=1, unit=unit, plan=plan).finish()
        ).splitlines()[0]

    assert first_line("day12", "challenge-100-day").startswith("day12 (challenge-100-day) softmax (cuda)")
    assert first_line("week5", "cuda-11-week").startswith("week5 softmax (cuda)")  # the default plan goes unsaid


def test_a_store_outside_a_row_sliced_output_points_at_the_row_stride_not_the_bounds_check():
    from grader.core.spec import Case
    from grader.run.judge import Judge

    sliced = Case(params={"M": 3, "N": 2}, outputs={"C": {"layout": "row_slice"}})
    message = Judge._outside_message("M=3 N=2, trial 1", sliced, ["C"])
    assert "C is a row slice" in message and "row stride (leading dimension)" in message
    plain = Judge._outside_message("n=1, trial 1", Case(params={"n": 1}), ["out"])
    assert "wrote past the end of out" in plain and "if (i < n)" in plain
