"""The 11-week and 5-day plans follow their source documents unit by unit (../shared/seeds/001_*.txt and
002_*.txt: the same weeks and days, topics, exercises and deliverables, in order); plan files hold only
fields the loader reads; prompts become notes sections of the unit's report; extras do not block "done"."""

from click.testing import CliRunner

from grader import reporting, store
from grader.cli import main
from grader.paths import plans_dir
from grader.plans import Unit, load_plans
from grader.spec import tomllib

UNIT_FIELDS = {"key", "title", "exercises", "planned", "deliverable", "requires", "topics", "prompts", "reading"}
EXERCISE_FIELDS = {"id", "lang", "extra"}
RECORD_KINDS = {"env", "profile", "tune", "compare"}  # what env-check, profile, tune and compare record


def exercises(unit: Unit) -> list[tuple]:
    return [(e.id, e.lang) + (("extra",) if e.extra else ()) for e in unit.exercises]


def run(*args):
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_plan_files_hold_only_fields_the_loader_reads_and_requirements_the_kit_records():
    for path in plans_dir().glob("*.toml"):
        for unit in tomllib.loads(path.read_text()).get("units", []):
            assert set(unit) <= UNIT_FIELDS, f"{path.name} {unit['key']}: unknown {set(unit) - UNIT_FIELDS}"
            assert set(unit.get("requires", [])) <= RECORD_KINDS, f"{path.name} {unit['key']}"
            for item in unit.get("exercises", []):
                assert set(item) <= EXERCISE_FIELDS and item.get("lang") in ("cuda", "triton"), f"{path.name} {unit['key']}"


def test_the_11_week_plan_follows_its_document_week_by_week():
    weeks = load_plans()["cuda-11-week"].units
    assert [u.key for u in weeks] == [f"week{i}" for i in range(1, 12)]
    assert [exercises(u) for u in weeks] == [
        [("hello_cuda", "cuda"), ("vector_add", "cuda")],
        [("matmul", "cuda"), ("reduction", "cuda")],
        [("stream_overlap", "cuda"), ("gelu_op", "cuda", "extra")],
        [("vector_add", "triton"), ("matmul_triton", "triton")],
        [("softmax", "triton"), ("layer_norm", "triton"), ("softmax_backward", "triton", "extra")],
        [("naive_attention", "triton")],
        [("flash_attention_v1", "triton")],
        [], [], [], [],
    ]
    assert [u.requires for u in weeks[:3]] == [[], ["compare"], ["profile"]]
    assert "kcourse compare reduction" in weeks[1].deliverable and "kcourse profile" in weeks[2].deliverable
    assert any("Flash Attention paper" in p for p in weeks[5].prompts)  # week 6 reads the paper
    assert "flash_attention_v1 in CUDA" in weeks[7].planned[0]
    assert [p.split(" (")[0] for p in weeks[8].planned[:2]] == ["flash_attention_v2 forward", "flash_attention_v2 backward"]
    assert weeks[9].planned[0].startswith("kcourse compare attention")
    assert len(weeks[10].prompts) == 4 and weeks[6].title.startswith("Weeks 7-8") and weeks[9].title.startswith("Weeks 9-10")


def test_the_5_day_plan_follows_its_document_day_by_day():
    days = load_plans()["triton-5-day"].units
    assert [u.key for u in days] == [f"day{i}" for i in range(1, 6)]
    assert [exercises(u) for u in days] == [
        [], [("vector_add", "triton"), ("softmax", "triton"), ("softmax_backward", "triton")],
        [("matmul_triton", "triton")], [("softmax", "triton")], [],
    ]
    assert [u.requires for u in days] == [["env"], [], [], ["profile"], ["tune"]]
    assert "ThunderKittens README summary" in days[2].prompts[0] and "Triton (a Python kernel DSL) vs ThunderKittens" in days[2].prompts[1]
    assert "replace_op.ipynb" in days[3].deliverable and "kcourse notebook day4" in days[3].deliverable
    assert "three" in days[4].topics[0] and "kcourse report final" in days[4].deliverable


def test_every_unit_of_the_two_plans_says_what_the_kit_checks():
    plans = load_plans()
    for unit in plans["cuda-11-week"].units + plans["triton-5-day"].units:
        assert "The kit checks" in unit.deliverable, unit.key


def test_prompts_are_notes_sections_of_the_units_report_and_answers_survive(isolated_state):
    path = reporting.render("week6")
    text = path.read_text()
    assert "## Questions for this week" in text and "### Flash Attention paper: what is its core optimisation idea?" in text
    assert "<!-- notes:week6-2 -->" in text and "- the mathematics of attention" in text and "arxiv.org/abs/2205.14135" in text
    start = text.index("<!-- notes:week6-2 -->\n") + len("<!-- notes:week6-2 -->\n")
    path.write_text(text[:start] + "Tiling keeps the N x N matrix out of HBM.\n" + text[text.index("<!-- /notes:week6-2 -->"):])
    assert "Tiling keeps the N x N matrix out of HBM." in reporting.render("week6").read_text()
    store.append({"kind": "env"})
    for key in ("day1", "day3", "day5", "week11"):  # the days and weeks with templates of their own too
        assert f"<!-- notes:{key}-1 -->" in reporting.render(key).read_text(), key


def test_an_extra_exercise_is_listed_but_not_needed_to_finish_the_week():
    store.append({"kind": "grade", "exercise": "stream_overlap", "lang": "cuda", "source": "learner", "status": "passed"})
    assert "[~]  week3" in run("progress")  # the profile is still missing
    store.append({"kind": "profile", "exercise": "reduction", "lang": "cuda"})
    progress = run("progress")
    assert "[x]  week3" in progress and "gelu_op (cuda, extra): not graded" in progress
    assert "- gelu_op [cuda] (extra): not graded" in run("list")
