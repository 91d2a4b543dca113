"""The GPU tier's order under `--dist worksteal` (tests/worker_order.py) and the script that lists its longest
tests from a junit file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import worker_order

ROOT = Path(__file__).resolve().parents[2]


def first_cut(order: list, workers: int) -> list[list]:
    """xdist's worksteal scheduler's first distribution: what is pending, shared by the idle workers in turn."""
    runs = []
    for i in range(workers):
        size = len(order) // (workers - i)
        runs.append(order[:size])
        order = order[size:]
    return runs


def test_each_workers_run_starts_with_its_share_of_the_longest_tests_and_nothing_is_lost():
    longest = [f"long{i}" for i in range(7)]
    rest = [f"t{i}" for i in range(40)]
    order = worker_order.deal(longest, rest, 3)
    assert sorted(order) == sorted(longest + rest)
    runs = first_cut(order, 3)
    assert [run[:3] for run in runs] == [
        ["long0", "long3", "long6"],
        ["long1", "long4", "t12"],
        ["long2", "long5", "t26"],
    ]
    assert [t for t in order if t.startswith("t")] == rest  # the others keep their order


class Item:
    def __init__(self, nodeid: str):
        self.nodeid = nodeid


@pytest.mark.parametrize("enabled", ["", "1"])
def test_the_deal_is_made_only_when_asked_for(monkeypatch, enabled):
    listed = worker_order.LONGEST.read_text().split()[:2]
    items = [Item(f"tests/test_x.py::test_{i}") for i in range(10)] + [Item(nodeid) for nodeid in listed]
    before = [item.nodeid for item in items]
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    monkeypatch.setenv(worker_order.DIST, "worksteal")
    monkeypatch.setenv(worker_order.ENABLE, enabled)
    worker_order.longest_at_each_workers_head(None, items)
    after = [item.nodeid for item in items]
    assert sorted(after) == sorted(before)
    if enabled:
        assert [after[0], after[6]] == listed  # each of the two workers' runs starts with one of them
    else:
        assert after == before  # the collection's order: the default


def test_more_long_tests_than_room_still_keeps_every_test():
    order = worker_order.deal([f"long{i}" for i in range(9)], ["t0"], 4)
    assert sorted(order) == sorted([f"long{i}" for i in range(9)] + ["t0"])


def test_the_script_lists_a_junit_files_longest_tests_as_node_ids(tmp_path):
    script = ROOT / "scripts" / "longest_tests.py"
    if not script.is_file():
        pytest.skip("scripts/longest_tests.py is the instructors' (not in the learner's kit)")
    junit = tmp_path / "junit.xml"
    junit.write_text(
        "<testsuites><testsuite>"
        '<testcase classname="tests.test_a" name="test_x[p-1]" time="3.0"/>'
        '<testcase classname="tests.unit.test_b" name="test_y" time="9.5"/>'
        '<testcase classname="tests.test_a" name="test_z" time="0.1"/>'
        "</testsuite></testsuites>"
    )
    out = subprocess.run(
        [sys.executable, str(script), str(junit), "2"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == ["tests/unit/test_b.py::test_y", "tests/test_a.py::test_x[p-1]"]


def test_the_listed_tests_are_still_collected_by_the_gpu_tier():
    listed = worker_order.LONGEST.read_text().split()
    files = {nodeid.split("::")[0] for nodeid in listed}
    assert all((ROOT / f).is_file() for f in files), "tests/gpu_longest.txt names a file that is gone: remake it"
