"""The order the GPU tier's tests go out in under `pytest -n N --dist worksteal`.

worksteal hands each worker an equal run of the collection and later moves tests only from the backs of the
queues, so a long test collected late also starts late: the tier's last minutes ran two workers of twelve. With
KCOURSE_TEST_LONGEST_FIRST=1 the longest tests (tests/gpu_longest.txt, longest first, made from a tier's junit file
by scripts/longest_tests.py) are dealt out instead, one at a time, to the heads of the workers' runs; a test not in
the file keeps its place. It is off by default: measured, it ended the tail but made the tier slower as a whole
(docs/testing.md). Its heads start the heaviest compiles all at once, on more processes than the host has cores,
and tests of one exercise that ran one after another, the later ones finding the solution's Triton kernels and
tunings cached, now compile them side by side."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

LONGEST = Path(__file__).resolve().parent / "gpu_longest.txt"
DIST = "KCOURSE_TEST_DIST"  # the controller's --dist, which conftest's pytest_configure hands the workers
ENABLE = "KCOURSE_TEST_LONGEST_FIRST"  # "1": deal the longest tests out (off by default, see above)


class LongestFirst:
    """The ordering as a plugin of its own (tests/conftest.py registers it), so that it runs last: after `-m` and
    the kit's run have deselected what they leave out, whose count decides where worksteal cuts."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items):
        longest_at_each_workers_head(config, items)


def longest_at_each_workers_head(config, items: list) -> None:
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))  # set in each worker, which collects
    if os.environ.get(ENABLE) != "1" or workers < 2 or os.environ.get(DIST) != "worksteal" or not LONGEST.is_file():
        return
    rank = {nodeid: i for i, nodeid in enumerate(LONGEST.read_text().split())}
    longest = sorted((item for item in items if item.nodeid in rank), key=lambda item: rank[item.nodeid])
    rest = [item for item in items if item.nodeid not in rank]
    items[:] = deal(longest, rest, workers)


def deal(longest: list, rest: list, workers: int) -> list:
    """The order whose equal runs, as worksteal first cuts them, each start with every workers-th of `longest`."""
    heads = [longest[i::workers] for i in range(workers)]
    order, left = [], len(longest) + len(rest)
    for i, head in enumerate(heads):
        size = left // (workers - i)  # worksteal's first cut: what is left, shared by the workers left
        fill = max(0, size - len(head))
        order += head + rest[:fill]
        rest, left = rest[fill:], left - len(head) - fill
    return order + rest
