import json

from grader.core import store


def test_records_are_appended_and_read_back(isolated_state):
    store.append({"kind": "grade", "exercise": "a", "lang": "cuda", "source": "learner", "status": "failed"})
    store.append({"kind": "grade", "exercise": "a", "lang": "cuda", "source": "learner", "status": "passed"})
    store.append({"kind": "grade", "exercise": "a", "lang": "cuda", "source": "solutions", "status": "failed"})
    assert store.latest_grades()["a:cuda"]["status"] == "passed"  # solution runs are not the learner's


def test_a_torn_last_line_from_an_interrupted_write_loses_nothing_earlier(isolated_state):
    store.append({"kind": "env", "n": 1})
    with open(store.results_path(), "a") as f:
        f.write('{"kind": "grade", "exercise": "x", "sta')  # killed mid-write
    store.append({"kind": "env", "n": 2})
    records = list(store.read_all())
    assert [r["n"] for r in records] == [1, 2]
    lines = store.results_path().read_text().splitlines()
    assert json.loads(lines[-1])["n"] == 2


def grade(exercise, status, file="", lang="cuda", **extra):
    store.append(
        {
            "kind": "grade",
            "exercise": exercise,
            "lang": lang,
            "source": "learner",
            "status": status,
            "file": file,
            **extra,
        }
    )


def test_the_best_grade_is_a_pass_even_when_a_later_try_failed(isolated_state):
    grade("reduction", "passed", "exercises/reduction/reduction.cu")
    grade("reduction", "failed", "try.cu")
    assert store.best_grades()["reduction:cuda"]["file"] == "exercises/reduction/reduction.cu"
    assert store.latest_grades()["reduction:cuda"]["file"] == "try.cu"


def test_among_passes_the_newest_is_the_best(isolated_state):
    grade("reduction", "passed", "v1.cu")
    grade("reduction", "passed", "v2.cu")
    grade("reduction", "error", "v3.cu")
    assert store.best_grades()["reduction:cuda"]["file"] == "v2.cu"


def test_ranking_is_passed_skipped_failed_error_then_unknown_statuses(isolated_state):
    for status, exercise in (
        ("error", "a"),
        ("failed", "a"),
        ("timeout", "b"),
        ("error", "b"),
        ("failed", "c"),
        ("skipped", "c"),
    ):
        grade(exercise, status)
    best = store.best_grades()
    assert {k: r["status"] for k, r in best.items()} == {"a:cuda": "failed", "b:cuda": "error", "c:cuda": "skipped"}


def test_records_naming_no_exercise_are_left_out_of_per_exercise_views(isolated_state):
    store.append({"kind": "grade", "status": "passed"})
    store.append({"kind": "grade", "exercise": "gelu_op", "status": "failed"})  # an old record without a language
    assert list(store.latest_grades()) == list(store.best_grades()) == ["gelu_op:unknown"]
