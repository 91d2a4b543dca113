"""Every plan follows its source document unit by unit (../shared/seeds/001_*.txt: the 11-week plan,
002_*.txt: the 5-day plan, 003_*.txt: the 100-day table, 004_*.txt: the transformer-operator course: the same
weeks, days and steps, topics, exercises and deliverables, in order); plan files hold only fields the loader
reads; prompts become notes sections of the unit's report; extras do not block "done"; a unit whose topic is
not a kernel names what the kit checks for it (`requires`), and its line in `kcourse progress` says so."""

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from grader.cli import main
from grader.core import store
from grader.core.discovery import discover_exercises
from grader.core.paths import exercises_dir, plans_dir
from grader.core.plans import Requirement, Unit, load_plans
from grader.core.spec import load_spec, tomllib
from grader.reports import reporting

UNIT_FIELDS = {"key", "title", "exercises", "planned", "deliverable", "requires", "topics", "prompts", "reading"}
EXERCISE_FIELDS = {"id", "lang", "extra"}
SEEDS = Path(__file__).resolve().parents[2] / "shared" / "seeds"  # beside the repository, not in a learner's kit


def exercises(unit: Unit) -> list[tuple]:
    return [(e.id, e.lang) + (("extra",) if e.extra else ()) for e in unit.exercises]


def run(*args):
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.slow
def test_plan_files_hold_only_fields_the_loader_reads_and_requirements_the_kit_records():
    known = discover_exercises()
    for path in plans_dir().glob("*.toml"):
        for unit in tomllib.loads(path.read_text()).get("units", []):
            assert set(unit) <= UNIT_FIELDS, f"{path.name} {unit['key']}: unknown {set(unit) - UNIT_FIELDS}"
            for text in unit.get("requires", []):
                Requirement.parse(text)  # a kind the kit records (or the report), and an exercise/language
            for item in unit.get("exercises", []):
                versions = known[item["id"]].variants  # cuda, triton, or a version's own name (add2's)
                assert set(item) <= EXERCISE_FIELDS and item.get("lang") in versions, f"{path.name} {unit['key']}"


def test_the_11_week_plan_follows_its_document_week_by_week():
    weeks = load_plans()["cuda-11-week"].units
    assert [u.key for u in weeks] == [f"week{i}" for i in range(1, 12)]
    assert [exercises(u) for u in weeks] == [
        [("hello_cuda", "cuda"), ("vector_add", "cuda")],
        [("matmul", "cuda"), ("reduction", "cuda")],
        [("stream_overlap", "cuda"), ("gelu_op", "cuda", "extra")],
        [("vector_add", "triton"), ("matmul_triton", "triton")],
        [
            ("softmax", "triton"),
            ("layer_norm", "triton"),
            ("softmax_backward", "triton", "extra"),
            ("layer_norm_backward", "triton", "extra"),
        ],
        [("naive_attention", "triton")],
        [("flash_attention_v1", "triton")],
        [("flash_attention_v1", "cuda")],
        [
            ("flash_attention_v2", "triton"),
            ("flash_attention_v2_backward", "triton"),
            ("flash_attention_v2", "cuda", "extra"),
            ("flash_attention_v2_backward", "cuda", "extra"),
        ],
        [],
        [],
    ]
    assert [str(r) for u in weeks[:3] for r in u.requires] == ["compare", "profile"]
    assert "kcourse compare reduction" in weeks[1].deliverable and "kcourse profile" in weeks[2].deliverable
    assert any("Flash Attention paper" in p for p in weeks[5].prompts)  # week 6 reads the paper
    assert [[str(r) for r in u.requires] for u in weeks[9:]] == [["compare_attention"], ["report"]]
    assert "kcourse compare attention" in weeks[9].deliverable
    assert (
        len(weeks[10].prompts) == 4
        and weeks[6].title.startswith("Weeks 7-8")
        and weeks[9].title.startswith("Weeks 9-10")
    )


def test_the_5_day_plan_follows_its_document_day_by_day():
    days = load_plans()["triton-5-day"].units
    assert [u.key for u in days] == [f"day{i}" for i in range(1, 6)]
    assert [exercises(u) for u in days] == [
        [],
        [("vector_add", "triton"), ("softmax", "triton"), ("softmax_backward", "triton")],
        [("matmul_triton", "triton"), ("tk_gemm", "cuda", "extra")],
        [("softmax", "triton"), ("tk_tile_softmax", "cuda", "extra")],
        [],
    ]
    assert [u.requires for u in days] == [["env"], [], [], ["profile"], ["tune"]]
    assert (
        "ThunderKittens README summary" in days[2].prompts[0]
        and "Triton (a Python kernel DSL) vs ThunderKittens" in days[2].prompts[1]
    )
    assert "replace_op.ipynb" in days[3].deliverable and "kcourse notebook day4" in days[3].deliverable
    assert "three" in days[4].topics[0] and "kcourse report final" in days[4].deliverable


def test_every_unit_of_the_two_plans_says_what_the_kit_checks():
    plans = load_plans()
    for unit in plans["cuda-11-week"].units + plans["triton-5-day"].units:
        assert "The kit checks" in unit.deliverable, unit.key


def test_prompts_are_notes_sections_of_the_units_report_and_answers_survive(isolated_state):
    path = reporting.render("week6")
    text = path.read_text()
    assert (
        "## Questions for this week" in text
        and "### Flash Attention paper: what is its core optimisation idea?" in text
    )
    assert (
        "<!-- notes:week6-2 -->" in text
        and "- the mathematics of attention" in text
        and "arxiv.org/abs/2205.14135" in text
    )
    start = text.index("<!-- notes:week6-2 -->\n") + len("<!-- notes:week6-2 -->\n")
    path.write_text(
        text[:start] + "Tiling keeps the N x N matrix out of HBM.\n" + text[text.index("<!-- /notes:week6-2 -->") :]
    )
    assert "Tiling keeps the N x N matrix out of HBM." in reporting.render("week6").read_text()
    store.append({"kind": "env"})
    for key in ("day1", "day3", "day5", "week11"):  # the days and weeks with templates of their own too
        assert f"<!-- notes:{key}-1 -->" in reporting.render(key).read_text(), key


def test_an_extra_exercise_is_listed_but_not_needed_to_finish_the_week():
    store.append(
        {"kind": "grade", "exercise": "stream_overlap", "lang": "cuda", "source": "learner", "status": "passed"}
    )
    assert "[~]  week3" in run("progress")  # the profile is still missing
    store.append({"kind": "profile", "exercise": "reduction", "lang": "cuda"})
    progress = run("progress")
    assert "[x]  week3" in progress and "gelu_op (cuda, extra): not graded" in progress
    assert "- gelu_op [cuda] (extra): not graded" in run("list")


# --- The 100-day plan: the table of ../shared/seeds/003_*.txt, day by day ---------------------------------

# A sample of the table's topics as written (Korean or English) and the plan's translation.
TRANSLATED = {
    1: ("벡터 연산 기초", "Vector operation basics"),
    2: ("Device 함수", "Device functions"),
    6: ("고급 기법", "Advanced techniques"),
    8: ("다양한 커널", "Various kernels"),
    17: ("cuBLAS 활용", "Using cuBLAS"),
    23: ("Occupancy 최적화", "Occupancy optimisation"),
    26: ("성능 프로파일링", "Performance profiling"),
    29: ("Triton 설치 및 환경 설정", "Triton installation and environment setup"),
    35: ("Triton 기초 종합", "Triton basics synthesis"),
    53: ("Triton 실전 프로젝트 5", "Triton hands-on project 5"),
    79: ("메모리 사용량 분석", "Memory usage analysis"),
    89: ("에러 처리", "Error handling"),
    97: ("100일 회고 1", "100-day retrospective 1"),
    100: ("포트폴리오 작성 2", "Writing the portfolio 2"),
}
# Days whose topic is not a kernel (practice, profiling, benchmarking, an install, reviews, projects, writing):
# each must name a check besides exercises (`requires`).
NOT_KERNEL_DAYS = {
    23,
    24,
    26,
    27,
    28,
    29,
    35,
    42,
    52,
    55,
    56,
    57,
    58,
    59,
    60,
    61,
    62,
    63,
    70,
    81,
    82,
    83,
    84,
    85,
    *range(89, 101),
}


def hundred_days():
    return load_plans()["challenge-100-day"]


def seed_table() -> list[tuple[int, str, list[str]]]:
    """(day, topic, content items) of the 100-day document's tables."""
    paths = sorted(SEEDS.glob("003_*.txt"))
    if not paths:
        pytest.skip("the seed documents are not beside this checkout (../shared/seeds)")
    rows = re.findall(r"^\| (\d+) \| ([^|]+) \| ([^|]+) \| \[ \] \|$", paths[0].read_text(), re.M)
    return [(int(day), topic.strip(), content.strip().split("<br>")) for day, topic, content in rows]


def test_the_100_day_plan_has_every_day_in_order_and_no_filler():
    days = hundred_days().units
    assert [u.key for u in days] == [f"day{i}" for i in range(1, 101)]
    assert len({u.title for u in days}) == 100  # no repeated "(round N: faster)" days
    assert not any("round" in u.title.lower() for u in days)


def test_each_day_has_the_tables_topic_and_its_content_items():
    table = seed_table()
    days = hundred_days().units
    assert [day for day, _, _ in table] == list(range(1, 101))
    for (day, topic, content), unit in zip(table, days):
        assert len(unit.topics) == len(content), f"day{day}: the table lists {content}"
        if topic.isascii():  # the table's English topics are kept as written
            assert unit.title == topic, f"day{day}"
    for day, (korean, english) in TRANSLATED.items():
        assert table[day - 1][1] == korean and days[day - 1].title == english, f"day{day}"


def test_kernel_days_map_to_their_exercises():
    days = {u.key: u for u in hundred_days().units}
    assert exercises(days["day1"]) == [("hello_cuda", "cuda"), ("vector_add", "cuda")]
    assert exercises(days["day3"]) == [("matrix_add", "cuda"), ("matrix_transform", "cuda")]
    assert exercises(days["day4"]) == [("layer_norm", "cuda")]
    assert exercises(days["day5"]) == [("reduction", "cuda"), ("scan", "cuda", "extra")]
    assert exercises(days["day6"]) == [
        ("sm_id", "cuda"),
        ("softmax", "cuda"),
        ("transpose", "cuda"),
        ("gelu_op", "cuda"),
    ]
    assert exercises(days["day7"]) == [("matmul", "cuda"), ("conv1d", "cuda")] and days["day7"].requires == [
        "compare:matmul:cuda"
    ]
    assert exercises(days["day8"]) == [
        ("matvec", "cuda"),
        ("rgb_to_gray", "cuda"),
        ("blur", "cuda"),
        ("self_attention", "cuda"),
    ]
    assert "online softmax" in days["day8"].deliverable
    assert exercises(days["day9"]) == exercises(days["day10"]) == [("flash_attention_v1", "cuda")]
    assert exercises(days["day13"]) == [("rms_norm", "cuda")] and days["day13"].requires == ["compare:rms_norm:cuda"]
    assert exercises(days["day11"]) == [("flash_attention_v2_backward", "cuda")]
    assert exercises(days["day14"])[:3] == [
        ("flash_attention_v2", "cuda"),
        ("flash_attention_v2_backward", "cuda"),
        ("conv2d", "cuda"),
    ]
    assert exercises(days["day16"]) == [("flash_attention_v2", "cuda"), ("flash_attention_v2_backward", "cuda")]
    assert exercises(days["day15"]) == [("self_attention", "cuda"), ("spmm_csr", "cuda")]
    assert exercises(days["day17"]) == [("cublas_blas1", "cuda")] and exercises(days["day19"]) == [
        ("cublas_gemm", "cuda"),
        ("cublas_attention", "cuda"),
    ]
    assert exercises(days["day20"]) == [("rope", "cuda")] and exercises(days["day23"]) == [("occupancy", "cuda")]
    assert exercises(days["day18"]) == [("atomic_max", "cuda"), ("histogram", "cuda", "extra")]
    assert exercises(days["day21"]) == [("transpose", "cuda")]
    # day 25 is a CUDA day: its kernels integrated into one are CUDA (Triton's fusion, from day 29 on, is extra)
    assert exercises(days["day25"]) == [
        ("stream_overlap", "cuda"),
        ("residual_activation", "cuda"),
        ("fusion", "triton", "extra"),
    ]
    # day 28's synthesis tables every exercise days 15-25 required, in their order
    weeks = [e for d in range(15, 26) for e in exercises(days[f"day{d}"]) if "extra" not in e]
    assert exercises(days["day28"]) == list(dict.fromkeys(weeks)) and days["day28"].requires == ["report"]
    assert exercises(days["day43"]) == [("flash_attention_v1", "triton")]
    assert exercises(days["day46"]) == [("layer_norm", "triton"), ("layer_norm_backward", "triton")]
    # days 29-51 (issue 10's Triton exercises): each kernel day names its exercise, none is left planned
    assert exercises(days["day33"]) == [("row_reduce", "triton")] and exercises(days["day40"]) == [
        ("reduction", "triton")
    ]
    assert exercises(days["day39"]) == [("histogram", "triton")] and exercises(days["day48"]) == [
        ("custom_op", "triton")
    ]
    assert exercises(days["day41"]) == [("swiglu", "triton"), ("add_rms_norm", "triton"), ("activations", "bias_gelu")]
    assert [lang for _, lang in exercises(days["day47"])] == ["gelu_erf", "gelu_tanh", "silu", "bias_gelu"]
    assert not any(days[f"day{d}"].planned for d in (31, 33, 34, 39, 40, 41, 46, 47, 48, 49, 50, 64, 66, 67, 69))
    assert exercises(days["day64"]) == [("fusion", "triton")] and exercises(days["day66"]) == [
        ("autograd_function", "triton")
    ]
    # every day of the table: its kernels have exercises (day 19's cuBLAS self-attention is cublas_attention,
    # day 25's kernels integrated into one pass are residual_activation); nothing is left planned
    assert not any(unit.planned for unit in days.values())


def test_days_that_are_not_kernels_name_the_record_or_report_that_finishes_them():
    days = hundred_days().units
    for unit in days:
        day = int(unit.key.removeprefix("day"))
        assert "The kit checks" in unit.deliverable, unit.key
        if day in NOT_KERNEL_DAYS:
            assert unit.requires, f"{unit.key} ({unit.title}) is not a kernel: it needs a check in `requires`"
        if not unit.required_exercises and not unit.requires:
            assert unit.planned and "The kit checks nothing" in unit.deliverable, unit.key
        if "report" in unit.requires:
            assert unit.prompts and "notes section" in unit.deliverable, unit.key
    by_key = {u.key: u for u in days}
    assert by_key["day29"].requires == ["env"] and by_key["day26"].requires == ["profile"]
    assert by_key["day23"].requires == ["tune:matmul:cuda"] and by_key["day57"].requires == ["profile:matmul:cuda"]
    assert by_key["day62"].requires == ["profile:flash_attention_v1:cuda", "compare:flash_attention_v1:cuda"]
    assert by_key["day79"].requires == ["compare_attention"]  # memory over sequence lengths, every implementation


def test_every_exercise_the_plans_name_exists():
    """May fail while other helpers' exercises are being written (matrix_add, transpose, sm_id, rms_norm,
    conv1d/conv2d, matvec, rgb_to_gray, blur, histogram, scan, atomic_max, spmm_csr, flash_attention_v2 and its
    backward, the cuda variants of layer_norm, softmax and flash_attention_v1): re-run it once they have landed."""
    missing = []
    for plan in load_plans().values():
        named = [(e.id, e.lang) for u in plan.units for e in u.exercises]
        named += [(r.exercise, r.lang) for u in plan.units for r in u.requirements if r.exercise]
        for exercise_id, lang in dict.fromkeys(named):
            folder = exercises_dir() / exercise_id
            if not (folder / "spec.toml").exists():
                missing.append(f"{plan.id}: {exercise_id} (no exercise folder)")
            elif lang and lang not in load_spec(folder).variants:
                missing.append(f"{plan.id}: {exercise_id} has no {lang} variant")
    assert not missing, "missing (written by other helpers? re-run once they land): " + "; ".join(missing)


# --- The transformer-operator course: ../shared/seeds/004_*.txt in its order --------------------------------


def test_the_transformer_course_follows_its_document_in_order():
    steps = load_plans()["transformer-ops"].units
    assert [u.key for u in steps] == [f"step{i}" for i in range(1, 12)]
    assert [u.title.split(":")[0].split(" in CUDA")[0] for u in steps] == [
        "Custom operator",
        "Memory and reduction",
        "GEMM",
        "LayerNorm",
        "Softmax",
        "Cross entropy",
        "The AdamW optimizer",
        "Activation functions and the residual connection",
        "Embedding and LM head layers",
        "Self-attention",
        "The Transformer",
    ]
    assert [exercises(u) for u in steps] == [
        [("add2", "jit"), ("add2", "setup"), ("add2", "cmake"), ("gelu_op", "cuda", "extra")],
        [("reduction", "cuda")],
        [("matmul", "cuda")],
        [("layer_norm", "cuda")],
        [("softmax", "cuda")],
        [("cross_entropy", "cuda")],
        [("adamw", "cuda")],
        [("residual_activation", "cuda"), ("gelu_op", "cuda", "extra")],
        [("embedding", "cuda"), ("embedding_backward", "cuda"), ("cublas_gemm", "cuda")],  # the LM head: one GEMM
        [("self_attention", "cuda"), ("flash_attention_v1", "cuda", "extra")],
        [],
    ]
    assert "three ways" in steps[0].deliverable and "torch.ops.load_library" in steps[0].deliverable
    assert steps[1].requires == ["compare:reduction:cuda", "profile:reduction:cuda"]
    for step, word in zip(steps[5:10], ("log-sum-exp", "in place", "residual", "scatter-add", "online softmax")):
        assert word in step.deliverable, step.key
    assert steps[10].requires == ["capstone"] and not steps[10].planned
    if sorted(SEEDS.glob("004_*.txt")):  # the document's list, in this order
        text = sorted(SEEDS.glob("004_*.txt"))[0].read_text()
        names = [
            "custom op",
            "memory & reduction",
            "Gemm",
            "LayerNorm",
            "SoftMax",
            "Cross Entropy",
            "AdamW",
            "激活函数与残差连接",
            "embedding",
            "self-attention",
            "train_gpt2",
        ]
        assert [text.index(n) for n in names] == sorted(text.index(n) for n in names)


# --- Requirements besides exercises (grader/core/plans.py Requirement) ------------------------------------------


def test_a_requirement_is_a_record_kind_optionally_of_one_exercise_and_language_or_the_report():
    assert Requirement.parse("profile") == Requirement("profile")
    assert Requirement.parse("compare:softmax:cuda") == Requirement("compare", "softmax", "cuda")
    assert Requirement.parse("report") == Requirement("report")
    assert Requirement.parse("compare_attention") == Requirement("compare_attention")  # `kcourse compare attention`
    for bad in (
        "profiles",
        "env:x",
        "report:day3",
        "compare_attention:naive_attention",
        "tune:",
        "compare:softmax:c++",
        "tune:a:cuda:x",
    ):
        with pytest.raises(ValueError, match="requirement"):
            Requirement.parse(bad)


def test_a_plan_with_an_unknown_requirement_names_the_file_and_the_unit(tmp_path):
    (tmp_path / "p.toml").write_text('id = "p"\n[[units]]\nkey = "day1"\ntitle = "x"\nrequires = ["profil"]\n')
    with pytest.raises(ValueError, match=r"p\.toml: day1: requirement 'profil': write one of env, profile"):
        load_plans(tmp_path)


def test_a_unit_with_only_a_planned_topic_is_planned_and_says_what_is_planned(tmp_path):
    from grader.reports.progress import unit_status, what_counts

    (tmp_path / "p.toml").write_text('id = "p"\n[[units]]\nkey = "day1"\ntitle = "x"\nplanned = ["a kernel to come"]\n')
    unit = load_plans(tmp_path)["p"].units[0]
    assert unit_status(unit, {}, []) == "planned" and what_counts(unit, {}, []) == "a kernel to come"


def progress_lines(plan: str) -> dict[str, str]:
    return {line[3:].split()[0]: line for line in run("progress", "--plan", plan).splitlines() if line.startswith("[")}


def test_progress_says_what_counts_for_a_day_without_exercises():
    days = progress_lines("challenge-100-day")
    assert "env check: not yet (`kcourse env-check`)" in days["day29"]
    assert "tuning of matmul (cuda): not yet (`kcourse tune matmul --lang cuda`)" in days["day23"]
    assert "your notes in the report: not written (`kcourse report day97 --plan challenge-100-day`" in days["day97"]
    assert days["day51"].startswith("[ ]") and "linear_gelu" in days["day51"]
    store.append({"kind": "env"})
    store.append({"kind": "tune", "exercise": "matmul", "lang": "cuda"})
    days = progress_lines("challenge-100-day")
    assert days["day29"].startswith("[x]") and "env check: recorded" in days["day29"]
    assert "tuning of matmul (cuda): recorded" in days["day23"] and "occupancy (cuda): not graded" in days["day23"]
