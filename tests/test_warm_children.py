"""grade-batch starts each grade's child one grade ahead (grader/warm_children.py): fresh children only,
one spare per thread and device, and a spare nobody takes ends itself."""

from __future__ import annotations

import time

from grader.warm_children import WarmChildren


def test_the_first_grade_starts_its_own_child_and_the_next_takes_one_already_started():
    children = WarmChildren()
    try:
        assert children.take(None) is None
        spare = children.take(None)
        assert spare is not None and spare.device == "cpu"
        assert spare.wait_ready()["pid"] == spare.proc.pid  # a fresh worker, waiting for its one job
        another = children.take(None)
        assert another is not spare  # never handed out twice
        another.close()
    finally:
        children.close()
    assert spare.proc.poll() is None  # closing the pool leaves a child it handed out to its grade
    spare.close()


def test_a_spare_child_nobody_takes_ends_itself():
    children = WarmChildren(idle_s=1)
    try:
        children.take(None)
        spare = children._ready[next(iter(children._ready))]
        spare.wait_ready()
        deadline = time.monotonic() + 15
        while spare.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert spare.proc.poll() == 0, "an idle spare child kept running"
        assert children.take(None) is None  # an ended spare is not handed out; a new one is started instead
    finally:
        children.close()
