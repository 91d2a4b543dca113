"""compute-sanitizer on one small case (issue 7, item 3): hazards numerics cannot see fail the grade,
naming the kernel and file:line; clean code passes and is not re-checked; where it cannot run, the check
says skipped and why."""

from __future__ import annotations

import re

import pytest
from conftest import HAS_GPU, submission

from grader.core.discovery import resolve
from grader.run import sanitize
from grader.run.grade import grade

pytestmark = pytest.mark.sanitizer  # its GPU grades run compute-sanitizer (the other tests' leave it out: conftest.py)

RACECHECK_LOG = """========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at sum_kernel(const float *, float *, int)+0x1b0 in /tmp/k/try.cu:11
=========     and Read access at sum_kernel(const float *, float *, int)+0x230 in /tmp/k/try.cu:11 [62 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""

MEMCHECK_LOG = """========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 4 bytes
=========     at void sum_kernel<256>(const float *, float *, int)+0x80 in /home/me/reduction.cu:8
=========     by thread (17,0,0) in block (16,0,0)
=========     Address 0x7f3a00004004 is out of bounds
=========
========= ERROR SUMMARY: 239 errors
"""


def by_name(result):
    return {c.name: c for c in result.checks}


def test_a_race_report_names_both_accesses_the_kernel_and_the_line():
    report = sanitize.summarize("racecheck", RACECHECK_LOG)
    assert report["kernel"] == "sum_kernel" and report["places"] == ["try.cu:11"]
    assert report["message"].strip() == (
        "racecheck: Race reported between Write access and Read access in kernel `sum_kernel` at try.cu:11"
    )


def test_a_memcheck_report_names_the_access_the_template_kernel_and_the_count():
    report = sanitize.summarize("memcheck", MEMCHECK_LOG)
    assert report["kernel"] == "sum_kernel<256>" and report["count"] == 239
    assert "Invalid __global__ read of size 4 bytes in kernel `sum_kernel<256>` at reduction.cu:8" in report["message"]


def test_the_small_case_is_ragged_and_a_spec_can_choose_it():
    assert sanitize.small_case(resolve(("reduction",)).spec).params == {"n": 4097}
    spec = resolve(("softmax",)).spec
    chosen = sanitize.small_case(spec)
    assert chosen is not None and not chosen.gpu_only and "layout" not in str(chosen.inputs)
    spec.cases[0].sanitize = True
    assert sanitize.small_case(spec) is spec.cases[0]


def test_without_the_tool_the_check_is_skipped_and_says_where_to_get_it(monkeypatch):
    monkeypatch.setattr(sanitize, "executable", lambda: None)
    target = resolve(("reduction",))
    check = sanitize.start(target.spec, target.variant, submission("reduction_warp_race.cu"), None)
    assert check.status == "skipped" and "compute-sanitizer not found" in check.message and "CUDA_HOME" in check.message


@pytest.mark.slow
@pytest.mark.solutions
@pytest.mark.skipif(HAS_GPU, reason="checks the no-GPU path")
def test_without_a_gpu_the_sanitizer_is_reported_skipped_never_passed():
    result = grade(resolve(("vector_add",), lang="triton"), source="solutions", seed=3, record=False)
    check = by_name(result)["sanitizer"]
    assert check.status == "skipped" and "no GPU" in check.message


@pytest.mark.slow
@pytest.mark.solutions
def test_no_sanitize_is_reported_as_skipped():
    result = grade(
        resolve(("vector_add",), lang="triton"), source="solutions", seed=3, record=False, sanitize_code=False
    )
    assert by_name(result)["sanitizer"].details["code"] == "no_sanitize"


# --- on a GPU: real hazards ------------------------------------------------------------------------
gpu = pytest.mark.gpu


def grade_fixture(words, name, lang=None):
    """Numerics and the sanitizer (--quick keeps it): the timing would add nothing these tests read."""
    return grade(resolve(words, lang=lang), submission=submission(name), seed=11, record=False, quick=True)


@gpu
def test_a_race_that_gives_the_right_answer_fails_with_the_line():
    result = grade_fixture(("reduction",), "reduction_warp_race.cu")
    checks = by_name(result)
    assert checks["numerics"].status == "passed"  # the race is invisible to the numbers ...
    assert checks["sanitizer"].status == "failed" and checks["sanitizer"].details["code"] == "race"
    assert re.search(r"reduction_warp_race\.cu:1[0-8]\b", checks["sanitizer"].message), checks["sanitizer"].message
    assert "sum_kernel" in checks["sanitizer"].message
    assert "__syncthreads" in checks["sanitizer"].details["hint"]
    assert result.status == "failed"
    print("\n" + checks["sanitizer"].message, f"({checks['sanitizer'].details['seconds']} s)")


@gpu
def test_a_load_past_the_end_that_is_thrown_away_fails_memcheck_with_the_line():
    check = by_name(grade_fixture(("reduction",), "reduction_reads_past_end.cu"))["sanitizer"]
    assert check.status == "failed" and check.details["code"] == "memcheck"
    assert "reduction_reads_past_end.cu:8" in check.message


@gpu
def test_host_code_that_never_frees_is_a_leak():
    check = by_name(grade_fixture(("vector_add",), "vector_add_leaks.cu", lang="cuda"))["sanitizer"]
    assert check.status == "failed" and check.details["code"] == "leak", check.message
    assert "cudaFree" in check.details["hint"]


@gpu
def test_a_triton_load_without_a_mask_fails_memcheck():
    check = by_name(grade_fixture(("softmax",), "softmax_reads_past_row.py"))["sanitizer"]
    assert check.status == "failed" and check.details["code"] == "memcheck", check.message
    print("\n" + check.message, f"({check.details['seconds']} s)")


@gpu
@pytest.mark.parametrize("words", [("reduction",), ("matmul",), ("softmax",), ("vector_add", "cuda"), ("gelu_op",)])
def test_solutions_are_clean_and_an_unchanged_file_is_not_checked_again(words):
    target = resolve(words[:1], lang=words[1] if len(words) > 1 else None)
    first = by_name(grade(target, source="solutions", seed=1, record=False, quick=True))["sanitizer"]
    again = by_name(grade(target, source="solutions", seed=2, record=False, quick=True))["sanitizer"]
    assert first.status == "passed", first.message
    assert again.status == "passed" and again.details.get("cached")
    print(f"\n{target.key}: {first.message}")


def test_a_spec_can_leave_a_tool_out_and_the_passed_check_says_which_and_why(tmp_path, monkeypatch):
    target = resolve(("tk_gemm",))
    assert set(target.variant.sanitizer_skip) == {"synccheck"}
    started = []
    monkeypatch.setattr(sanitize, "executable", lambda: "/bin/true")
    monkeypatch.setattr(sanitize, "_launch", lambda path, tool, *rest: started.append(tool) or _Done())
    monkeypatch.setattr(sanitize, "_load", lambda key: None)
    monkeypatch.setattr(sanitize, "_store", lambda key, check: None)
    running = sanitize.start(target.spec, target.variant, target.spec.folder / target.variant.stub, None)
    assert started == ["racecheck", "memcheck", "initcheck"]
    for tool in started:
        (running.folder / f"{tool}.log").write_text("")
    check = running.collect()
    assert check.status == "passed" and "synccheck not run: it does not model warp-specialised" in check.message


def test_an_unknown_tool_to_leave_out_is_a_spec_error(tmp_path):
    from grader.core.spec import SpecError, _sanitizer_skip

    with pytest.raises(SpecError, match="racecheck, synccheck, memcheck, initcheck"):
        _sanitizer_skip({"synchcheck": "typo"}, "spec.toml: variants.cuda.sanitizer_skip")
    with pytest.raises(SpecError):
        _sanitizer_skip({"racecheck": ""}, "spec.toml: variants.cuda.sanitizer_skip")


class _Done:
    """A finished tool process that found nothing."""

    def poll(self):
        return 0

    def wait(self, timeout=None):
        return 0


def test_the_tools_run_on_the_grading_childs_gpu(tmp_path):
    # grade-batch and validate grade on several GPUs from one process: a grade's tools must not land on
    # GPU 0 while another grade is timed there
    fake = tmp_path / "compute-sanitizer"
    fake.write_text('#!/bin/sh\necho "sees GPU $CUDA_VISIBLE_DEVICES"\n')
    fake.chmod(0o755)
    sanitize._launch(str(fake), "memcheck", "cuda", tmp_path / "job.json", tmp_path, visible_devices="1").wait(30)
    assert (tmp_path / "memcheck.out").read_text().strip() == "sees GPU 1"
