"""`kcourse progress`, `list` and the reports show the learner's best grade of each exercise, and the
latest attempt beside it when that is a different, worse one: a failed scratch file never hides a pass."""

from click.testing import CliRunner

from grader.cli import main
from grader.core import store
from grader.core.records import Check, GradeResult, Timing
from grader.reports import reporting


def run(*args):
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def grade(status, file, learner_ms=None, exercise="vector_add", source="learner"):
    result = GradeResult(exercise=exercise, lang="cuda", source=source, seed=1, file=file)
    result.add(Check("numerics", status, "all matched" if status == "passed" else "size 1000: 17 outputs differ"))
    if learner_ms:
        result.timings.append(Timing(case="n=1048576", learner_ms=learner_ms, unit="GB/s"))
    store.append(result.finish().to_dict())


def test_a_failed_scratch_file_does_not_undo_a_pass_in_progress():
    grade("passed", "exercises/hello_cuda/hello_cuda.cu", exercise="hello_cuda")  # week1's other exercise
    grade("passed", "exercises/vector_add/vector_add.cu")
    grade("failed", "/home/me/try.py", source="/home/me/try.py")
    output = run("progress")
    assert "vector_add (cuda): passed (latest: failed, try.py)" in output
    assert "[x]  week1" in output and "1 of 11 done" in output


def test_progress_shows_only_the_status_when_the_latest_grade_is_the_best():
    grade("failed", "exercises/vector_add/vector_add.cu")
    grade("passed", "exercises/vector_add/vector_add.cu")
    output = run("progress")
    week1 = next(line for line in output.splitlines() if "week1" in line)
    assert week1.rstrip().endswith("vector_add (cuda): passed") and "latest" not in output


def test_a_failure_after_a_failure_shows_the_newest_failure():
    grade("failed", "exercises/vector_add/vector_add.cu")
    grade("failed", "/home/me/try.py", source="/home/me/try.py")
    assert "latest" not in run("progress") and "[~]  week1" in run("progress")


def test_list_shows_the_best_status_and_the_latest_attempt():
    grade("passed", "exercises/vector_add/vector_add.cu")
    grade("error", "/home/me/try.py", source="/home/me/try.py")
    assert "- vector_add [cuda]: passed (latest: error, try.py)" in run("list")


def test_reports_show_the_best_grade_its_timings_and_the_latest_attempt(isolated_state):
    grade("passed", "exercises/vector_add/vector_add.cu", learner_ms=0.25)
    grade("failed", "/home/me/try.py", learner_ms=9.0, source="/home/me/try.py")
    for key in ("final", "week1"):
        text = reporting.render(key).read_text()
        assert "| vector_add | cuda | passed (latest: failed, try.py) | passed: numerics |" in text
        assert "| vector_add (cuda) | n=1048576 | 0.25 |" in text and "| 9 |" not in text


def test_the_day4_report_shows_the_notebooks_own_grade_after_a_newer_grade_of_the_exercise_file(isolated_state):
    grade("passed", "replace_op.ipynb", exercise="softmax", source="/home/me/replace_op.ipynb")
    grade("failed", "exercises/softmax/softmax.py", exercise="softmax")
    text = reporting.render("day4").read_text()
    assert "| softmax | cuda | passed | passed: numerics |" in text


def test_progress_in_a_terminal_wraps_topic_and_what_counts_to_its_width():
    from grader.reports.progress import format_progress

    whole = format_progress("cuda-11-week")
    assert max(len(line) for line in whole.splitlines()) > 150  # a file or a pipe: one line a unit, as before
    wrapped = format_progress("cuda-11-week", width=100)
    assert max(len(line) for line in wrapped.splitlines()) <= 100

    def words(text):  # the header's rule of dashes is as wide as its column
        return sorted(w for w in text.split() if set(w) != {"-"})

    assert words(wrapped) == words(whole)  # every word still there
    narrow = format_progress("cuda-11-week", width=40)  # too narrow to fit: wider than asked, not a word a line
    assert 40 < max(len(line) for line in narrow.splitlines()) <= 80 and words(narrow) == words(whole)
