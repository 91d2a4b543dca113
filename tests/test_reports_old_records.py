"""Every report renders from any mix of records: grades from a CPU-only machine (device {}, no timings),
and records written by earlier or later versions of the kit (missing fields, strings for numbers,
unknown statuses, unknown keys, env/profile/tune records with partial content)."""

import re

import pytest
from click.testing import CliRunner

from grader.cli import main
from grader.core import store
from grader.core.plans import load_plans
from grader.core.records import Check, GradeResult
from grader.reports import reporting


def cuda_grade_on_a_cpu_machine(exercise="reduction"):
    """What `kcourse grade week2 reduction` records without a GPU: compiled only, device {}."""
    result = GradeResult(
        exercise=exercise, lang="cuda", source="learner", seed=7, file=f"exercises/{exercise}/{exercise}.cu"
    )
    result.add(Check("build", "passed", "compiled for sm_90"))
    result.add(Check("numerics", "skipped", "no GPU found: compiled and checked the resource report only"))
    return result.finish().to_dict()


OLD_AND_ODD_RECORDS = [
    {"kind": "grade", "exercise": "matmul", "lang": "cuda", "status": "passed"},  # an early kit: status only
    {
        "kind": "grade",
        "exercise": "vector_add",
        "lang": "triton",
        "source": "learner",
        "status": "timeout",
        "verdict": None,
        "device": "NVIDIA H100 80GB HBM3",
        "sanitizer": {"racecheck": "clean"},
        "phases_s": [1, 2],
        "checks": [{"name": "numerics"}, "not a check"],
        "timings": [{"case": "n=4096", "learner_ms": "0.5", "learner_rate": "fast", "unit": "GB/s", "new_field": 1}, 3],
    },
    {
        "kind": "grade",
        "exercise": "softmax",
        "lang": "triton",
        "source": "/home/me/replace_op.ipynb",
        "status": "passed",
        "device": {},
        "timings": [
            {"case": "M=4096 N=4096", "learner_rate": 900.0, "unit": "GB/s", "intensity": 0.25, "learner_tflops": 0.2}
        ],
    },
    {"kind": "grade", "exercise": "gelu_op", "status": "failed"},  # no language
    {"kind": "grade", "status": "passed"},  # names no exercise: nothing to file it under
    {"status": "passed", "exercise": "reduction"},  # no kind at all
    {"kind": "env"},
    {"kind": "tune", "exercise": "softmax", "lang": "triton"},
    {
        "kind": "tune",
        "exercise": "vector_add",
        "lang": "triton",
        "device": {},
        "rows": [{"config": "BLOCK=128"}, None],
        "best": {},
        "speedup": "n/a",
    },
    {
        "kind": "profile",
        "exercise": "softmax",
        "lang": "triton",
        "device": {},
        "top": [{"name": "softmax_kernel"}],
        "ncu": [{"kernel": "softmax_kernel"}],
    },
    {"kind": "profile", "exercise": "vector_add", "lang": "triton"},
    {"kind": "a kind from a newer kit", "exercise": "softmax", "lang": "triton"},
]


@pytest.fixture
def mixed_records(isolated_state):
    store.append(cuda_grade_on_a_cpu_machine())
    for record in OLD_AND_ODD_RECORDS:
        store.append(record)
    return isolated_state / "reports"


def test_a_cuda_grade_from_a_cpu_machine_renders_in_the_final_and_week2_reports(isolated_state):
    store.append(cuda_grade_on_a_cpu_machine())
    for which in ("final", "week2"):
        result = CliRunner().invoke(main, ["report", which])
        assert result.exit_code == 0, result.output
    week2 = (isolated_state / "reports" / "week2_report.md").read_text()
    assert "| reduction | cuda | skipped | passed: build; skipped: numerics (no GPU found) | — |" in week2
    assert "No timings recorded: timing needs an NVIDIA GPU." in week2
    assert "| reduction | cuda | skipped |" in (isolated_state / "reports" / "final_report.md").read_text()


def every_report():
    """(key, plan) for every unit of every plan, and the final report."""
    return [(unit.key, plan.id) for plan in load_plans().values() for unit in plan.units] + [("final", None)]


@pytest.mark.slow
def test_every_report_of_every_plan_renders_from_old_partial_and_unknown_records(mixed_records):
    reports = every_report()
    assert len(reports) > 100  # the 100-day plan's days are in it too
    for key, plan_id in reports:
        text = reporting.render(key, plan_id=plan_id).read_text()
        assert "<!-- notes:" in text and "Undefined" not in text and "None" not in text, (key, plan_id)


def test_old_records_show_what_they_hold_and_a_dash_for_what_they_lack(mixed_records):
    final = reporting.render("final").read_text()
    assert "| matmul | cuda | passed | (no verdict recorded) | — |" in final
    assert "| vector_add | triton | timeout | (no verdict recorded) | NVIDIA H100 80GB HBM3 |" in final
    assert "| gelu_op | unknown | failed |" in final  # filed under an unknown language, not dropped
    assert "| vector_add (triton) | n=4096 | 0.5 | — | — | — GB/s |" in final  # "0.5" read as a number, "fast" as none
    day5 = reporting.render("day5").read_text()
    assert "| BLOCK=128 | — | — | — | not run |  |" in day5 and "No configuration was both correct and timed." in day5
    day4 = reporting.render("day4").read_text()
    assert "### softmax (triton) on unknown device" in day4 and "| softmax_kernel |  | — | — |" in day4
    assert "`(no trace recorded)`" in day4


def test_the_plot_of_an_old_record_is_drawn_inside_the_reports_folder(isolated_state):
    store.append(
        {
            "kind": "grade",
            "exercise": "../../escape",
            "lang": "triton/x",
            "status": "passed",
            "timings": [{"case": "n=1", "learner_rate": 1.0, "unit": "GB/s"}],
        }
    )
    text = reporting.render("final").read_text()
    [plot] = re.findall(r"\]\((speed_[^)]*\.png)\)", text)
    assert "/" not in plot and (isolated_state / "reports" / plot).read_bytes()[:4] == b"\x89PNG"
    assert not list(isolated_state.parent.rglob("escape*"))


ENV_CHECKS_OF_OLDER_KITS = [
    {"kind": "env"},
    {"kind": "env", "gpu": {}, "training": {}, "can_do": None},
    {
        "kind": "env",
        "python": 3.10,
        "gpu": {"name": "NVIDIA H100 80GB HBM3"},
        "can_do": "not a list",
        "training": {"runs": [{"device": "cpu"}, "junk"], "speedup": "n/a"},
        "an_unknown_key": True,
    },
]


@pytest.mark.parametrize("env", ENV_CHECKS_OF_OLDER_KITS)
def test_day1_renders_from_an_env_check_of_an_older_kit(env, isolated_state):
    store.append(env)
    text = reporting.render("day1").read_text()
    assert "| Python | " in text and "Status: **not ready" in text
    if env.get("gpu"):
        assert "| GPU | NVIDIA H100 80GB HBM3, compute capability ?" in text
        assert "| measured copy bandwidth | — GB/s |" in text and "| cpu | — | — | — |" in text
    else:
        assert "| GPU | none found |" in text


def test_every_field_of_a_grade_record_is_shaped_for_the_templates():
    """A field added to records.py with a type the normaliser does not know would reach the templates
    raw from old records: give it an entry in reporting.BY_ANNOTATION."""
    import dataclasses

    from grader.core.records import Check, GradeResult, Timing

    unknown = [
        f"{cls.__name__}.{f.name}: {f.type}"
        for cls in (GradeResult, Check, Timing)
        for f in dataclasses.fields(cls)
        if str(f.type) not in reporting.BY_ANNOTATION
    ]
    assert unknown == []
