"""Results as data (grader/core/records.py): the overall status and one-line verdict a list of checks gives, and
records of other kit versions read back."""

from __future__ import annotations

import pytest

from grader.core.records import (
    ERROR,
    FAILED,
    PASSED,
    SKIPPED,
    Check,
    GradeResult,
    Timing,
    grade_from_dict,
    overall_status,
    summary_verdict,
)

NUMERICS_OK = Check("numerics", PASSED, "2 cases matched")
SPEED_SLOW = Check("speed", FAILED, "n=64: 1 ms; your speed is 0.5× the solution's\nmore")
BUILD_ERROR = Check("build", ERROR, "nvcc crashed")
SPEED_SKIPPED = Check("speed", SKIPPED, "no GPU: timing needs one")


@pytest.mark.parametrize(
    "checks, status",
    [
        ([NUMERICS_OK, SPEED_SLOW, BUILD_ERROR], ERROR),
        ([NUMERICS_OK, SPEED_SLOW], FAILED),
        ([NUMERICS_OK, SPEED_SKIPPED], PASSED),
        ([Check("compile", PASSED, "built")], SKIPPED),  # compiled here, never run: not "passed"
        ([], SKIPPED),
    ],
    ids=["an error beats a failure", "a failure beats a pass", "numerics passed", "only compiled", "nothing"],
)
def test_the_overall_status_puts_failures_first_and_passes_only_run_numerics(checks, status):
    assert overall_status(checks) == status


def test_the_verdict_of_a_failed_grade_is_the_first_failures_first_line():
    assert summary_verdict([NUMERICS_OK, SPEED_SLOW, BUILD_ERROR]) == "n=64: 1 ms; your speed is 0.5× the solution's"


def test_the_verdict_of_a_passed_grade_lists_what_passed_and_why_the_rest_was_skipped():
    assert (
        summary_verdict([Check("load", PASSED, ""), NUMERICS_OK, SPEED_SKIPPED])
        == "passed: load, numerics; skipped: speed (no GPU)"
    )
    assert summary_verdict([]) == "nothing could run here"


def test_finish_sets_status_and_verdict_but_keeps_a_verdict_given():
    result = GradeResult("toy", "triton", "learner", 1, checks=[NUMERICS_OK, SPEED_SLOW]).finish()
    assert (result.status, result.verdict.startswith("n=64")) == (FAILED, True) and result.duration_s >= 0
    given = GradeResult("toy", "triton", "learner", 1, verdict="set by hand", checks=[NUMERICS_OK]).finish()
    assert (given.status, given.verdict) == (PASSED, "set by hand")


def test_a_result_survives_its_dict_form():
    result = GradeResult("toy", "triton", "learner", 3, checks=[NUMERICS_OK], timings=[Timing("n=64", learner_ms=1.0)])
    again = grade_from_dict(result.to_dict())
    assert again == result


def test_a_record_of_another_kit_version_drops_the_fields_this_one_lacks():
    data = GradeResult("toy", "triton", "learner", 3, timings=[Timing("n=64")]).to_dict()
    data["from_the_future"] = 1
    data["timings"][0]["warp_efficiency"] = 0.9
    del data["phases"]  # and one written before a field existed gets its default
    again = grade_from_dict(data)
    assert again.timings == [Timing("n=64")] and again.phases == {}
