"""Each cheat or mistake a learner can make gets its own clear verdict (Triton interpreter on the
CPU, real child processes). CUDA-only failures (faults, hung kernels) are in test_gpu.py."""

import pytest
from conftest import submission

from grader.core.discovery import resolve
from grader.run.grade import grade

VECTOR_ADD = ("week4", "vector_add")

pytestmark = pytest.mark.slow  # every test grades a fixture in a real child process


def failing_check(result):
    return next(c for c in result.checks if c.status in ("failed", "error"))


def grade_file(words, name, **kwargs):
    return grade(resolve(words), submission=submission(name), seed=11, **kwargs)


def test_calling_torch_softmax_instead_of_a_kernel_is_caught():
    check = failing_check(grade_file(("softmax",), "softmax_calls_torch.py"))
    assert check.name == "integrity" and check.details["code"] == "torch_compute"
    assert "aten::_softmax" in check.message and "your own kernel" in check.message


def test_calling_the_exercise_reference_is_caught():
    check = failing_check(grade_file(("softmax",), "softmax_via_reference.py"))
    assert check.details["code"] == "torch_compute"


def test_a_result_cached_from_an_earlier_call_is_caught():
    check = failing_check(grade_file(VECTOR_ADD, "vector_add_cached.py"))
    assert check.name == "integrity" and check.details["code"] == "cached_result"
    assert "caching results" in check.message


def test_correct_only_at_block_multiples_is_caught_at_the_first_ragged_size():
    check = failing_check(grade_file(VECTOR_ADD, "vector_add_no_tail.py"))
    assert check.details["code"] == "partial_write"
    assert check.message.startswith("n=1000, trial 1: ")
    assert "232 of 1000 elements of c never written (first at index 768)" in check.message
    assert "does your last block handle the tail?" in check.message


def test_modifying_an_input_in_place_is_caught():
    check = failing_check(grade_file(VECTOR_ADD, "vector_add_modifies_input.py"))
    assert check.details["code"] == "input_modified"
    assert "modified its input a in place" in check.message


def test_wrong_numbers_report_the_size_the_error_and_the_seed():
    result = grade_file(VECTOR_ADD, "vector_add_wrong.py")
    check = failing_check(result)
    assert check.details["code"] == "mismatch" and check.details["trial"] == 1 and result.seed == 11
    assert "max abs error" in check.message and "first at index" in check.message


def test_a_hang_is_stopped_at_the_time_limit():
    """And reported within the limit + 5 s of the child being ready to run the learner's code (issue 7)."""
    result = grade_file(VECTOR_ADD, "vector_add_hangs.py", timeout_s=6)
    check = failing_check(result)
    assert check.details["code"] == "timeout"
    assert "ran past the 6 s limit while checking n=1" in check.message
    assert result.duration_s - result.phases["start"] <= 6 + 5


def test_a_segfault_gives_a_crash_verdict_naming_the_step():
    check = failing_check(grade_file(VECTOR_ADD, "vector_add_segfault.py"))
    assert check.details["code"] == "crash" and "SIGSEGV" in check.message and "checking n=1" in check.message


def test_a_syntax_error_gives_file_and_line():
    check = failing_check(grade_file(VECTOR_ADD, "vector_add_syntax_error.py"))
    assert check.details["code"] == "syntax_error"
    assert check.message.startswith("vector_add_syntax_error.py:4: syntax error")


def test_a_missing_entry_point_says_which_name_to_keep():
    check = failing_check(grade_file(VECTOR_ADD, "vector_add_renamed.py"))
    assert check.details["code"] == "missing_entry" and "no function `vector_add`" in check.message


def test_a_wrong_signature_shows_the_expected_call():
    check = failing_check(grade_file(VECTOR_ADD, "vector_add_bad_signature.py"))
    assert check.details["code"] == "bad_signature" and "vector_add(a, b, c)" in check.message


def test_an_exception_shows_the_learners_frames_not_the_graders():
    check = failing_check(grade_file(VECTOR_ADD, "vector_add_raises.py"))
    assert check.details["code"] == "exception"
    assert "IndexError" in check.message and "vector_add_raises.py:5 in helper" in check.message
    assert "grader/" not in check.message and "worker.py" not in check.message


@pytest.mark.solutions
def test_loading_the_instructors_solution_is_refused_by_the_box():
    from grader.child import box

    if not box.available()[0]:
        pytest.skip("no Landlock here: the unboxed test below covers this machine")
    check = failing_check(grade_file(("softmax",), "softmax_imports_solution.py"))
    assert "solutions/softmax/softmax.py" in check.message and "the grading box refused this" in check.message


@pytest.mark.solutions
def test_loading_the_instructors_solution_unboxed_is_caught(monkeypatch):
    from grader.child import box

    monkeypatch.setenv(box.UNBOXED_ENV, "1")
    check = failing_check(grade_file(("softmax",), "softmax_imports_solution.py"))
    assert check.name == "integrity" and check.details["code"] == "solution_loaded"
    assert "softmax.py" in check.message
