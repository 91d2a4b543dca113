"""Every report renders from recorded fixture results with the right content; plots are real PNGs
with the data drawn; the learner's notes survive re-rendering."""

import pytest

from grader.core import store
from grader.core.plans import load_plans
from grader.core.records import Check, GradeResult, Timing
from grader.reports import plots, reporting

GPU = {
    "name": "NVIDIA H100 80GB HBM3",
    "capability": "9.0",
    "memory_gb": 85.0,
    "multiprocessors": 132,
    "copy_gbps": 3002.0,
    "matmul_fp32_tflops": 51.6,
}


def env_record():
    return {
        "kind": "env",
        "python": "3.12",
        "platform": "Linux",
        "torch": "2.11.0",
        "torch_cuda": "13.0",
        "triton": "3.6.0",
        "ninja": True,
        "nvcc": "13.0",
        "nvcc_path": "/usr/bin/nvcc",
        "driver": "580.1",
        "triton_interpreter": True,
        "triton_interpreter_note": "",
        "gpu": GPU,
        "ready": True,
        "can_do": ["Triton and CUDA exercises: build, numerics and timing on the GPU"],
        "training": {
            "description": "A 3-layer MLP",
            "epochs": 5,
            "speedup": 12.5,
            "runs": [
                {"device": "cpu", "seconds": 2.5, "per_epoch_s": 0.5, "final_loss": 0.1},
                {"device": "cuda", "seconds": 0.2, "per_epoch_s": 0.04, "final_loss": 0.1},
            ],
        },
    }


def grade_record(exercise, lang, unit, sizes, learner_ms, source="learner"):
    result = GradeResult(exercise=exercise, lang=lang, source=source, seed=1, device={"name": GPU["name"], **GPU})
    result.add(Check("numerics", "passed", "all matched"))
    result.add(Check("speed", "passed", "fast enough"))
    for i, size in enumerate(sizes):
        ms = learner_ms * (i + 1)
        result.timings.append(
            Timing(
                case=size,
                learner_ms=ms,
                solution_ms=ms * 0.8,
                torch_ms=ms * 0.9,
                unit=unit,
                learner_rate=100.0 * (i + 1),
                solution_rate=125.0 * (i + 1),
                torch_rate=111.0 * (i + 1),
                roofline_pct=42.0 + i,
                ratio=0.8,
                intensity=0.25 if unit == "GB/s" else 500.0,
                learner_tflops=0.7 if unit == "GB/s" else 30.0,
                runs=100,
            )
        )
    return result.finish().to_dict()


@pytest.fixture
def recorded(isolated_state):
    store.append(env_record())
    store.append(grade_record("reduction", "cuda", "GB/s", ["n=1048576", "n=268435456"], 0.5))
    store.append(grade_record("matmul", "cuda", "TFLOP/s", ["M=1024 N=1024 K=1024", "M=4096 N=4096 K=4096"], 3.0))
    store.append(grade_record("softmax", "triton", "GB/s", ["M=4096 N=781", "M=4096 N=4096"], 0.05))
    store.append(grade_record("softmax", "triton", "GB/s", ["M=4096 N=4096"], 0.06, source="/home/me/replace_op.ipynb"))
    store.append(
        {
            "kind": "tune",
            "exercise": "softmax",
            "lang": "triton",
            "device": GPU["name"],
            "case": "M=4096 N=4096",
            "unit": "GB/s",
            "speedup": 1.5,
            "rows": [
                {
                    "config": f"num_warps={w}",
                    "ms": 0.05 * w / 4,
                    "rate": 2000 / w,
                    "roofline_pct": 60 / w,
                    "correct": True,
                    "error": "",
                }
                for w in (2, 4, 8)
            ],
            "best": {"config": "num_warps=2", "ms": 0.025},
        }
    )
    store.append(
        {
            "kind": "profile",
            "exercise": "softmax",
            "lang": "triton",
            "device": GPU["name"],
            "case": "M=4096 N=4096",
            "calls": 5,
            "trace": "/tmp/trace.json",
            "ncu": [],
            "ncu_note": "Nsight Compute said: ==ERROR== ERR_NVGPUCTRPERM",
            "top": [{"name": "softmax_kernel", "calls": 5, "device_us": 250.0, "cpu_us": 40.0}],
        }
    )
    return isolated_state / "reports"


def test_day1_shows_the_gpu_and_the_training_comparison(recorded):
    text = reporting.render("day1").read_text()
    assert "NVIDIA H100 80GB HBM3" in text and "3002 GB/s" in text
    assert "| cuda | 0.200 s |" in text and "12.5× faster than the CPU" in text


def test_day2_compares_the_two_triton_scripts(recorded):
    text = reporting.render("day2").read_text()
    assert "softmax (triton) | M=4096 N=4096 | 0.06 | 0.048 | 0.054" in text  # the newest attempt (the notebook)
    assert "vector_add: not graded yet" in text


def test_day4_has_the_notebook_grade_and_the_profiler_table(recorded):
    text = reporting.render("day4").read_text()
    assert "| softmax_kernel | 5 | 250.0 | 40.0 |" in text
    assert "Nsight Compute: nothing recorded. Nsight Compute said: ==ERROR== ERR_NVGPUCTRPERM" in text  # never silent
    assert "softmax (triton) | M=4096 N=4096 | 0.06" in text  # the notebook's own grade


def test_day5_has_a_tuning_table_of_at_least_three_configurations_and_a_conclusion(recorded):
    text = reporting.render("day5").read_text()
    assert text.count("| num_warps=") == 3
    assert "Best: **num_warps=2**" in text and "1.50× the slowest" in text


def test_every_day_and_week_of_the_plans_renders(recorded):
    plans = load_plans()
    for unit in plans["triton-5-day"].units + plans["cuda-11-week"].units:
        path = reporting.render(unit.key)
        text = path.read_text()
        assert unit.key in path.name and "<!-- notes:" in text
    week2 = (recorded / "week2_report.md").read_text()
    assert "Advanced CUDA concepts" in week2 and "reduction (cuda) | n=268435456 | 1 | 0.8 | 0.9" in week2
    assert "- parallel patterns: reduction, scan, sort" in week2  # the week's topics are listed
    week11 = (recorded / "week11_summary.md").read_text()
    assert "matmul (cuda)" in week11 and "roofline.png" in week11


def test_final_report_tables_every_graded_exercise_and_links_its_plots(recorded):
    text = reporting.render("final").read_text()
    assert "| matmul | cuda | passed |" in text
    assert (
        "matmul (cuda) | M=4096 N=4096 K=4096 | 6 | 4.8 | 5.4 | 200 TFLOP/s | 250 TFLOP/s | 222 TFLOP/s | 43% | 0.80× | live solution |"
        in text
    )
    assert "![Roofline](roofline.png)" in text and "(speed_reduction_cuda.png)" in text
    for name in ("roofline.png", "speed_reduction_cuda.png", "speed_matmul_cuda.png"):
        assert (recorded / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _red_pixels(path):
    import matplotlib.image

    image = matplotlib.image.imread(str(path))
    red = (image[..., 0] > 0.75) & (image[..., 1] < 0.3) & (image[..., 2] < 0.3)
    return int(red.sum()), image.shape


def test_plots_draw_the_learners_data(recorded, tmp_path):
    from grader.core.records import grade_from_dict

    grades = [grade_from_dict(r) for r in store.latest_grades().values()]
    speed = plots.speed_vs_size(next(g for g in grades if g.exercise == "reduction"), tmp_path / "s.png")
    pixels, shape = _red_pixels(speed)
    assert shape[0] > 200 and shape[1] > 300 and pixels > 50  # the learner's line is drawn in red
    roof = plots.roofline_chart(grades, env_record(), tmp_path / "r.png")
    assert _red_pixels(roof)[0] > 20  # the learner's points
    empty = grades[0]
    empty.timings = []
    assert plots.speed_vs_size(empty, tmp_path / "none.png") is None


def test_learner_notes_survive_re_rendering(recorded):
    path = reporting.render("day1")
    text = path.read_text()
    start = text.index("<!-- notes:day1 -->") + len("<!-- notes:day1 -->\n")
    end = text.index("<!-- /notes:day1 -->")
    path.write_text(text[:start] + "My GPU was busy; I re-ran it twice.\n" + text[end:])
    store.append({**env_record(), "driver": "999.9"})
    text = reporting.render("day1").read_text()
    assert "My GPU was busy; I re-ran it twice." in text and "999.9" in text
    assert "this part is yours" not in text.split("## Notes")[1]


def test_unknown_report_suggests_the_nearest(recorded):
    with pytest.raises(reporting.ReportError, match="Did you mean 'week2'"):
        reporting.render("wek2")


def test_a_failed_grade_shows_where_its_output_was_wrong_in_the_unit_report(recorded):
    """The failing check's picture (output_map.py) as a PNG with the failure's colours, and as the characters."""
    import torch

    from grader.checks.checking import compare
    from grader.core.spec import Tolerance

    ref = torch.randn(16, 40)
    out = ref.clone()
    out[3:5] = float("nan")
    comparison = compare("out", out, ref, Tolerance(atol=1e-6, rtol=1e-5), "M=16 N=40")
    failed = GradeResult(exercise="vector_add", lang="cuda", source="learner", seed=1, device=GPU)  # no pass
    failed.add(Check("numerics", "failed", comparison.message, {"code": comparison.code, **comparison.details}))
    store.append(failed.finish().to_dict())
    text = reporting.render("week1").read_text()
    assert "Where the failing outputs are wrong" in text and "![vector_add (cuda): M=16 N=40" in text
    assert "NNNNNNNN" in text and "where out (16×40) is wrong" in text
    import matplotlib.image

    image = matplotlib.image.imread(str(recorded / "map_vector_add_cuda.png"))
    purple = (image[..., 0] > 0.3) & (image[..., 0] < 0.5) & (image[..., 1] < 0.1) & (image[..., 2] > 0.6)
    assert int(purple.sum()) > 50  # the NaN rows, in the NaN colour
