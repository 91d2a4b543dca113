"""`kcourse compare`: several versions of one exercise through the ordinary pipeline, each recorded as a
grade labelled with its file name, one comparison record holding the table; the unit's report shows the
table and a bar chart, and the week's progress counts the comparison."""

import shutil

import pytest
from click.testing import CliRunner
from conftest import HAS_GPU, ROOT

from grader.cli import main
from grader.commands import compare
from grader.core import store
from grader.core.discovery import ResolveError
from grader.core.records import Check, GradeResult, Timing
from grader.reports import reporting

GPU = {"name": "NVIDIA H100 80GB HBM3", "copy_gbps": 3002.0}


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


# --- the real pipeline, on the CPU (Triton under the interpreter) -------------------------------------------


@pytest.mark.slow
@pytest.mark.solutions
def test_compare_grades_each_file_records_it_labelled_and_reports_the_table(tmp_path, isolated_state):
    fused = tmp_path / "fused.py"
    shutil.copy(ROOT / "solutions/softmax/softmax.py", fused)
    stub = tmp_path / "stub.py"
    shutil.copy(ROOT / "exercises/softmax/softmax.py", stub)
    result = run("compare", "softmax", str(fused), str(stub), "--seed", "4")
    assert result.exit_code == 1  # the stub failed: the exit code of `kcourse grade`
    assert "graded fused.py: PASSED" in result.output and "graded stub.py: FAILED: not implemented yet" in result.output
    table = {line.split()[0]: line for line in result.output.splitlines() if line.startswith(("fused.py", "stub.py"))}
    if not HAS_GPU:  # the speed columns say why they are empty
        assert table["fused.py"].split()[1:7] == ["passed", "skipped", "skipped", "skipped", "skipped", "skipped"]
    assert table["stub.py"].split()[1:7] == ["failed", "—", "—", "—", "—", "not"]  # failed before timing: not run
    assert "seed 4" in result.output and "`kcourse report week5`" in result.output

    grades = [r for r in store.read_all() if r["kind"] == "grade"]
    assert [g["extra"]["compare"]["label"] for g in grades] == ["fused.py", "stub.py"]
    assert {g["seed"] for g in grades} == {4} and len({g["extra"]["compare"]["run"] for g in grades}) == 1
    assert [g["status"] for g in grades] == ["passed", "failed"] and grades[0]["source"] == str(fused)
    [record] = [r for r in store.read_all() if r["kind"] == "compare"]
    assert record["run"] == grades[0]["extra"]["compare"]["run"]
    assert record["device"] == grades[0]["device"]["name"] and record["device"]

    week5 = reporting.render("week5").read_text()
    assert "### softmax (triton): 2 versions" in week5
    assert "| stub.py | failed | — |" in week5
    if HAS_GPU:
        assert "![softmax (triton): versions compared](compare_softmax_triton.png)" in week5
    else:
        assert (
            "| fused.py | passed | skipped | skipped | skipped | skipped |" in week5
            and "No chart: nothing was timed" in week5
        )


def test_files_of_the_other_language_or_the_same_file_twice_are_usage_errors(tmp_path):
    py = tmp_path / "a.py"
    py.write_text("")
    result = CliRunner().invoke(main, ["compare", "matmul", str(py)])
    assert result.exit_code == 2 and "matmul has no triton version" in result.output
    result = CliRunner().invoke(main, ["compare", "matmul", str(py), "--lang", "cuda"])
    assert result.exit_code == 2 and "matmul (cuda) takes .cu files, not a.py" in result.output
    with pytest.raises(ResolveError, match="the same file is named twice"):
        compare.entries_for_files("softmax", [py, tmp_path / "." / "a.py"])
    with pytest.raises(ResolveError, match="Did you mean 'softmax'"):
        compare.entries_for_files("softmx", [py])


def test_an_exercise_in_two_languages_takes_the_files_suffix_or_asks(tmp_path):
    cu, py = tmp_path / "v.cu", tmp_path / "v.py"
    assert compare.entries_for_files("vector_add", [cu])[0].target.variant.lang == "cuda"
    assert compare.entries_for_files("vector_add", [py])[0].target.variant.lang == "triton"
    with pytest.raises(ResolveError, match="--lang"):
        compare.entries_for_files("vector_add", [cu, py])


def test_labels_are_file_names_and_paths_where_names_repeat(tmp_path):
    assert compare.labels([tmp_path / "a/x.cu", tmp_path / "b.cu"]) == ["x.cu", "b.cu"]
    files = [tmp_path / "v1/reduction.cu", tmp_path / "v2/reduction.cu"]
    assert compare.labels(files) == [str(f) for f in files]


# --- the module with grade() stubbed: what it records, and that grade() does the work ----------------------


def timed_result(target, ms, solution_ms=0.5, status="passed"):
    result = GradeResult(exercise=target.spec.id, lang=target.variant.lang, source="x", seed=1, device=dict(GPU))
    result.add(Check("numerics", status, "all matched" if status == "passed" else "size 1000: 17 outputs differ"))
    if status == "passed":
        result.add(Check("speed", "passed" if ms < 2 * solution_ms else "failed", "speed"))
        for case, scale in (("n=1048576", 0.01), ("n=268435456", 1.0)):
            result.timings.append(
                Timing(
                    case=case,
                    learner_ms=ms * scale,
                    solution_ms=solution_ms * scale,
                    torch_ms=0.55 * scale,
                    learner_rate=1073.7 / ms,
                    solution_rate=1073.7 / solution_ms,
                    torch_rate=1952.0,
                    unit="GB/s",
                    roofline_pct=36.0 / ms,
                    ratio=solution_ms / ms,
                    runs=50,
                )
            )
    return result.finish()


@pytest.fixture
def fake_grade(monkeypatch):
    """grade.grade replaced: (file name -> (ms, status)); the calls it saw are kept."""
    calls, outcomes = [], {}

    def grade(target, submission=None, seed=None, timeout_s=None, record=True, **kwargs):
        calls.append({"file": submission.name, "seed": seed, "record": record})
        ms, status = outcomes[submission.name]
        return timed_result(target, ms, status=status)

    import grader.run.grade

    monkeypatch.setattr(grader.run.grade, "grade", grade)
    return calls, outcomes


def compare_reduction(tmp_path, outcomes, fake_grade, seed=7):
    calls, known = fake_grade
    known.update(outcomes)
    files = []
    for name in outcomes:
        files.append(tmp_path / name)
        files[-1].write_text("// a version\n")
    entries = compare.entries_for_files("reduction", files)
    return compare.compare("reduction", entries, seed=seed)


def test_each_file_goes_through_grade_once_with_one_seed_and_the_table_takes_the_largest_size(tmp_path, fake_grade):
    record, results = compare_reduction(
        tmp_path, {"naive.cu": (4.0, "passed"), "shuffle.cu": (0.4, "passed"), "racy.cu": (1.0, "failed")}, fake_grade
    )
    calls, _ = fake_grade
    assert [c["file"] for c in calls] == ["naive.cu", "shuffle.cu", "racy.cu"]
    assert {c["seed"] for c in calls} == {7} and not any(c["record"] for c in calls)  # recorded once, labelled
    naive, shuffle, racy = record["rows"]
    assert (naive["case"], naive["ms"], naive["speed"]) == ("n=268435456", 4.0, "failed")
    assert shuffle["ratio"] == pytest.approx(1.25) and shuffle["rate"] == pytest.approx(2684.25)
    assert (racy["numerics"], racy["ms"], racy["speed"]) == ("failed", None, "not run")
    assert (record["case"], record["unit"], record["device"]) == ("n=268435456", "GB/s", GPU["name"])
    grades = [r for r in store.read_all() if r["kind"] == "grade"]
    assert [g["extra"]["compare"]["label"] for g in grades] == ["naive.cu", "shuffle.cu", "racy.cu"]
    text = compare.format_comparison(record)
    assert "reduction (cuda): 3 versions on NVIDIA H100 80GB HBM3, seed 7, timed at n=268435456" in text
    assert "GB/s" in text.splitlines()[1] and "1.25×" in text and "`kcourse report week2`" in text


def test_week2_report_shows_the_comparison_table_and_a_bar_chart(tmp_path, fake_grade, isolated_state):
    compare_reduction(tmp_path, {"naive.cu": (4.0, "passed"), "shuffle.cu": (0.4, "passed")}, fake_grade)
    week2 = reporting.render("week2").read_text()
    assert "## Versions compared" in week2 and "### reduction (cuda): 2 versions, timed at n=268435456" in week2
    assert "| naive.cu | passed | 4 | 268.4 | 9% | 0.12× |" in week2
    assert "| shuffle.cu | passed | 0.4 | 2684 | 90% | 1.25× |" in week2
    assert "solution took 0.5 ms, torch 0.55 ms" in week2
    assert "![reduction (cuda): versions compared](compare_reduction_cuda.png)" in week2
    chart = isolated_state / "reports" / "compare_reduction_cuda.png"
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from test_reports import _red_pixels

    assert _red_pixels(chart)[0] > 200  # the two versions' bars
    assert "compare_reduction_cuda.png" in reporting.render("final").read_text()
    assert "Versions compared" not in reporting.render("week5").read_text()  # another week's exercises


def test_the_latest_comparison_of_an_exercise_is_the_one_shown(tmp_path, fake_grade):
    compare_reduction(tmp_path, {"old.cu": (4.0, "passed")}, fake_grade)
    compare_reduction(tmp_path, {"new.cu": (0.4, "passed")}, fake_grade)
    week2 = reporting.render("week2").read_text()
    assert "| new.cu |" in week2 and "| old.cu |" not in week2


def test_week2_is_done_only_with_a_comparison_recorded(tmp_path, fake_grade):
    for exercise in ("matmul", "reduction"):
        store.append({"kind": "grade", "exercise": exercise, "lang": "cuda", "source": "learner", "status": "passed"})
    progress = run("progress").output
    assert "[~]  week2" in progress
    compare_reduction(tmp_path, {"a.cu": (0.4, "passed")}, fake_grade)
    assert "[x]  week2" in run("progress").output


OLD_COMPARISONS = [
    {"kind": "compare", "exercise": "reduction", "lang": "cuda"},
    {"kind": "compare", "exercise": "reduction", "lang": "cuda", "rows": "junk", "device": {}, "at": "yesterday"},
    {
        "kind": "compare",
        "exercise": "reduction",
        "lang": "cuda",
        "seed": None,
        "unit": 3,
        "rows": [{"label": "a.cu", "ms": "fast", "rate": None, "speed": "skipped"}, {}, "junk"],
    },
]


@pytest.mark.parametrize("old", OLD_COMPARISONS)
def test_a_partial_or_old_comparison_record_still_renders(old, isolated_state):
    store.append(old)
    for key in ("week2", "final"):
        text = reporting.render(key).read_text()
        assert "### reduction (cuda)" in text and "None" not in text and "Undefined" not in text
