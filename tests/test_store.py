import json

from grader import store


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
