"""The speed verdict and its bar (grader/checks/speed.py): pass, fail and skip at the threshold; the bar from the live
solution, the calibration for this GPU or an estimate; and the cross-checks of the child's claimed timings."""

from __future__ import annotations

import pytest

from grader.checks import speed
from grader.core.records import FAILED, PASSED, SKIPPED, Timing
from grader.core.spec import Case, load_spec

from .conftest import toy_spec

H200 = {"name": "H200", "copy_gbps": 4000.0, "matmul_tflops": 50.0, "matmul_tflops_float16": 700.0}


def record(learner_ms=1.0, solution_ms=None, ratio=None, source="live solution", **fields) -> Timing:
    if ratio is None and solution_ms:
        ratio = solution_ms / learner_ms
    return Timing(
        case="n=64",
        learner_ms=learner_ms,
        solution_ms=solution_ms,
        ratio=ratio,
        solution_source=source if solution_ms else "",
        **fields,
    )


# --- the verdict ---------------------------------------------------------------------------------


def test_no_timed_size_skips_the_speed_check(toy):
    check = speed.verdict(toy, toy.variant(None), None, None, H200)
    assert (check.status, check.details["code"]) == (SKIPPED, "no_timed_sizes")


def test_no_solution_and_no_calibration_skips_and_says_what_to_ask_for(toy):
    check = speed.verdict(toy, toy.variant(None), record(learner_ms=2.0), {}, H200)
    assert (check.status, check.details["code"]) == (SKIPPED, "no_solution")
    assert "you: 2 ms" in check.message and "calibration/calibration.json" in check.message


@pytest.mark.parametrize("ratio, status, code", [(0.7, PASSED, "ok"), (0.69999, FAILED, "slow"), (3.0, PASSED, "ok")])
def test_the_bar_is_the_spec_threshold_inclusive(toy, ratio, status, code):
    check = speed.verdict(toy, toy.variant(None), record(solution_ms=ratio, ratio=ratio), None, H200)
    assert (check.name, check.status, check.details["code"]) == ("speed", status, code)
    assert (check.details["ratio"], check.details["threshold"], check.details["bar"]) == (ratio, 0.7, "live solution")
    assert "(needed: 0.70×)" in check.message
    assert ("ladder" in check.message) == (status == FAILED)


def test_the_calibration_for_this_gpu_is_the_bar_without_a_solution(toy):
    calibration = {"n=64": {"H200": {"solution_ms": 0.5, "measured_at": "2025-01-02"}}}
    check = speed.verdict(toy, toy.variant(None), record(learner_ms=1.0), calibration, H200)
    assert (check.status, check.details["ratio"]) == (FAILED, 0.5)
    assert check.details["bar"] == "calibration for H200 (2025-01-02)"


def test_another_gpus_roofline_fraction_gives_an_estimated_bar(toy):
    calibration = {"n=64": {"A100": {"solution_ms": 9.0, "roofline_fraction": 0.5}}}
    rec = record(learner_ms=1e-6)
    check = speed.verdict(toy, toy.variant(None), rec, calibration, H200)
    # 768 bytes at half of 4000 GB/s: 3.84e-7 ms
    assert rec.solution_ms == pytest.approx(768e-9 / 2000 * 1000)
    assert check.details["bar"].startswith("ESTIMATE: the solution's 50% of roofline on A100")
    assert check.status == FAILED and check.details["ratio"] == pytest.approx(0.384)


def test_a_baseline_of_the_learners_own_code_is_reported_never_judged(toy):
    rec = record(solution_ms=0.8, baseline_ms=3.0, baseline_args="n_streams=1")
    check = speed.verdict(toy, toy.variant(None), rec, None, H200)
    assert check.status == PASSED and check.details["baseline_speedup"] == 3.0
    assert "3.00× the speed of your own code with n_streams=1" in check.message


# --- the record ------------------------------------------------------------------------------------


def test_a_timing_record_has_rates_roofline_and_the_ratio(toy):
    measured = {
        "learner": {"median_ms": 0.001, "runs": 50, "spread": 0.02},
        "solution": {"median_ms": 0.0005, "runs": 50},
        "torch": {"median_ms": 0.002, "runs": 50},
    }
    rec = speed.timing_record(toy, toy.variant(None), toy.performance.cases[0], measured, H200)
    assert (rec.case, rec.runs, rec.unit, rec.solution_source) == ("n=64", 50, "GB/s", "live solution")
    assert rec.learner_rate == pytest.approx(768e-9 / 1e-6)  # GB per second
    assert rec.roofline_pct == pytest.approx(100 * rec.learner_rate / 4000)
    assert rec.ratio == pytest.approx(0.5) and rec.learner_spread == 0.02


def test_without_a_solution_the_record_has_no_ratio(toy):
    rec = speed.timing_record(
        toy, toy.variant(None), toy.performance.cases[0], {"learner": {"median_ms": 1.0, "runs": 3}}, {}
    )
    assert rec.ratio is None and rec.solution_source == "" and rec.roofline_pct is None


def test_a_compute_bound_half_precision_case_is_measured_against_its_own_matmul_ceiling(exercise_dir):
    spec = load_spec(exercise_dir(toy_spec(replace={'bytes = "3 * n * elem"': 'flops = "2 * n"\nbound = "compute"'})))
    work, ceiling, unit = speed.work_and_ceiling(spec, spec.variant(None), Case({"n": 10**6, "dtype": "float16"}), H200)
    assert (work, ceiling, unit) == (2e-6, 700.0, "TFLOP/s")
    assert speed.work_and_ceiling(spec, spec.variant(None), Case({"n": 10**6}), H200)[1] == 50.0


def test_flops_without_bytes_is_compute_bound_and_a_versions_model_overrides_the_exercises(exercise_dir):
    spec = load_spec(
        exercise_dir(
            toy_spec(
                replace={'bytes = "3 * n * elem"': 'flops = "n"', 'entry = "toy"': 'entry = "toy"\nbytes = "8 * n"'}
            )
        )
    )
    assert speed.work_model(spec, spec.variant(None)) == ("n", "8 * n", False)
    assert spec.performance.is_compute_bound


def test_host_code_has_no_device_roofline(exercise_dir):
    spec = load_spec(
        exercise_dir(
            toy_spec(
                replace={
                    'kind = "triton"': 'kind = "cuda_host"',
                    "[variants.triton]": "[variants.cuda]",
                    'args = ["a", "b", "c"]': 'args = ["a", "b", "c", "n"]',
                }
            )
        )
    )
    assert speed.work_and_ceiling(spec, spec.variant(None), Case({"n": 64}), H200) == (768e-9, None, "GB/s")


# --- cross-checks of the child's claims ------------------------------------------------------------


def test_claimed_time_may_exceed_the_wall_clock_only_by_the_slack():
    measured = {"learner": {"median_ms": 10.0, "runs": 100}}  # 1 s claimed
    fits = (1.0 - 0.05) / speed.WALL_SLACK
    assert speed.implausible_claim(measured, fits + 1e-6) is None
    assert "add up to 1.00 s, but the timed phase took 0.50 s" in speed.implausible_claim(measured, 0.5)


def test_the_fastest_burst_per_run_is_kept_for_each_contestant():
    kept = speed.fastest_bursts(
        [("learner", 0.3, 10), ("learner", 0.1, 10), ("learner", 0.4, 40), ("baseline", 0.2, 0)]
    )
    assert kept == {"learner": {"wall_s": 0.1, "runs": 10}, "baseline": {"wall_s": 0.2, "runs": 0}}


def probe(learner_s, solution_s=None, baseline_s=0.0, runs=10):
    bursts = {
        "baseline": {"wall_s": baseline_s * runs, "runs": runs},
        "learner": {"wall_s": learner_s * runs, "runs": runs},
    }
    if solution_s is not None:
        bursts["solution"] = {"wall_s": solution_s * runs, "runs": runs}
    return bursts


def test_a_probe_agreeing_with_the_claim_raises_nothing():
    assert (
        speed.probe_disagrees(record(learner_ms=1.0, solution_ms=0.8), probe(1.1e-3, 0.9e-3, baseline_s=1e-4)) is None
    )


def test_a_probe_without_a_baseline_judges_nothing():
    assert speed.probe_disagrees(record(learner_ms=1e-6), {"learner": {"wall_s": 1.0, "runs": 1}}) is None


def test_a_claim_far_below_the_parents_clock_is_not_believed():
    said = speed.probe_disagrees(record(learner_ms=0.1), probe(learner_s=1e-3))
    assert said == "your run reported 0.1 ms per call, but the grader's own clock measured 1 ms"


def test_the_claim_may_fall_short_of_the_probe_by_the_agreement_factor_and_launch_slack():
    limit_s = 1e-3 * speed.PROBE_AGREEMENT + speed.LAUNCH_SLACK_S
    assert speed.probe_disagrees(record(learner_ms=1.0), probe(learner_s=limit_s * 0.999)) is None
    assert speed.probe_disagrees(record(learner_ms=1.0), probe(learner_s=limit_s * 1.01)) is not None


def test_a_claimed_ratio_the_probe_does_not_see_is_not_believed():
    """The child claims 4x the solution; the parent's clock sees both run about as fast."""
    said = speed.probe_disagrees(record(learner_ms=0.25, solution_ms=1.0), probe(learner_s=3e-4, solution_s=3e-4))
    assert said.startswith("your run reported 4.00× the solution's speed, but the grader's own clock measured about")


def test_a_calibrated_bar_is_not_cross_checked_against_a_solution_probe():
    rec = record(learner_ms=0.25, solution_ms=1.0, source="calibration for H200")
    assert speed.probe_disagrees(rec, probe(learner_s=3e-4, solution_s=3e-4)) is None


def test_a_zero_millisecond_claim_gets_a_verdict_not_an_exception(toy):
    measured = {"learner": {"median_ms": 0.0, "runs": 10}, "solution": {"median_ms": 0.5, "runs": 10}}
    rec = speed.timing_record(toy, toy.variant(None), toy.performance.cases[0], measured, H200)
    assert speed.verdict(toy, toy.variant(None), rec, None, H200).status in (FAILED, SKIPPED)


def test_a_learners_burst_that_waited_for_a_cpu_for_what_its_claim_cannot_explain_is_starved():
    honest = Timing(case="n=64", learner_ms=0.368)  # 10 calls at 0.368 ms: 6.9 ms with the probe's slack and baseline
    bursts = [("baseline", 0.0005, 10), ("learner", 0.012, 10), ("learner", 0.0114, 10), ("learner", 0.02, 10)]
    fastest = speed.fastest_bursts(bursts)
    # the verdict reads the fastest learner burst (11.4 ms): its wait decides, not the slower bursts'
    assert speed.starved(honest, fastest, bursts, [0.0, 0.0, 0.006, 0.05]) == {
        "wall_s": 0.0114,
        "runs": 10,
        "waited_s": 0.006,
    }
    assert speed.starved(honest, fastest, bursts, [0.0, 0.05, 0.0027, 0.05]) is None  # under a quarter of its 11.4 ms
    assert speed.starved(honest, fastest, bursts, [None, None, None, None]) is None  # unknown (not Linux): no excuse
    assert speed.starved(honest, {}, [("baseline", 0.01, 10)], [0.01]) is None  # no learner burst


def test_a_patched_timers_gpu_bound_burst_needs_to_have_waited_most_of_it_to_be_excused():
    patched = Timing(case="n=64", learner_ms=0.1)  # 40 calls of 1 ms claimed at 0.1 ms: 29.6 ms of 40 unexplained
    bursts = [("baseline", 0.002, 40), ("learner", 0.040, 40)]
    fastest = speed.fastest_bursts(bursts)
    assert (
        speed.starved(patched, fastest, bursts, [0.0, 0.012]) is None
    )  # 30% of it (queueing runs on a busy host): too little
    assert speed.starved(patched, fastest, bursts, [0.0, 0.016])["waited_s"] == 0.016  # half the excess: it was starved


def test_the_wait_for_a_cpu_adds_the_childs_and_the_graders_and_needs_the_childs():
    from grader.core import hostload

    before = ((1.0, 2.0), (5.0, 0.5))  # (child (cpu, wait), grader's thread (cpu, wait))
    after = ((1.5, 2.25), (5.1, 0.55))
    assert hostload.cpu_wait(before, after) == pytest.approx(0.30)
    assert hostload.cpu_wait(((1.0, 2.0), None), ((1.5, 2.25), None)) == pytest.approx(0.25)
    assert hostload.cpu_wait((None, (5.0, 0.5)), (None, (5.1, 0.55))) is None
