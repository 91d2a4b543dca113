"""The fork server (grader/child/zygote.py, grader/run/forkserver.py): a grading child forked from a process that
imported torch once is driven, killed and reported as a freshly started one, and is the process a fresh one
would be (its session, sys.path, argv, environment, folder)."""

from __future__ import annotations

import json
import re
import time

import pytest

from grader.core.records import PASSED
from grader.run import forkserver, sandbox

pytestmark = pytest.mark.skipif(not hasattr(__import__("socket"), "send_fds"), reason="needs socket.send_fds")


@pytest.fixture
def forked(monkeypatch):
    monkeypatch.setenv(forkserver.ENV, "1")
    children = []

    def start(**extra):
        child = sandbox.Child("cpu", extra)
        children.append(child)
        assert isinstance(child.proc, forkserver.ForkedChild)
        return child

    yield start
    for child in children:
        child.close()


def test_a_child_killed_at_once_is_reported_killed_and_closes_at_once(forked):
    for _ in range(3):  # killed before it could set up its session, the group kill must still reach it
        child = forked()
        started = time.monotonic()
        child.close()
        assert child.proc.returncode == -9 and time.monotonic() - started < 5


def test_a_child_that_exits_reports_its_status_and_its_events(forked):
    child = forked()
    ready = child.wait_ready()
    assert ready["pid"] == child.proc.pid and child.proc.poll() is None
    assert child.finish(grace_s=30) == 0  # stdin closed before a job: the worker says done and exits 0
    assert child.proc.poll() == 0


PROBE = """import json, os, sys, tempfile
facts = {"sid": os.getsid(0) == os.getpid(), "path0": os.getcwd() in sys.path[:2], "argv": sys.argv[-1].isdigit(),
         "worker": sys.argv[0].endswith("worker.py"), "mark": os.environ.get("KCOURSE_PROBE_MARK"),
         "tmp": tempfile.gettempdir() == os.getcwd()}
raise RuntimeError("PROBE" + json.dumps(facts) + "PROBE")
"""


def probe_facts(result) -> dict:
    """What a probe file (PROBE, PRELOAD_PROBE) found, from the error its load check reports."""
    load = next(c for c in result.checks if c.name == "load")
    return json.loads(re.search(r"PROBE(\{.*?\})PROBE", load.message).group(1))


@pytest.mark.slow
def test_a_forked_child_is_the_process_a_fresh_one_would_be(monkeypatch, tmp_path):
    """Its own session, its folder on sys.path where `python -m` puts it (behind the learner's, which the loader adds), argv ending in the event fd, the
    environment of its own grade (not the server's), TMPDIR its scratch folder."""
    from grader.core.discovery import resolve
    from grader.run.grade import grade

    monkeypatch.setenv(forkserver.ENV, "1")
    learner = tmp_path / "vector_add.py"
    learner.write_text(PROBE)
    for mark in ("first", "second"):  # the second child comes from the server the first one started
        monkeypatch.setenv("KCOURSE_PROBE_MARK", mark)
        facts = probe_facts(grade(resolve(["vector_add"], lang="triton"), submission=learner, seed=1))
        assert facts == {"sid": True, "path0": True, "argv": True, "worker": True, "mark": mark, "tmp": True}


def test_a_server_per_sys_path_and_no_more_than_the_limit_kept_idle(forked, tmp_path, monkeypatch):
    """A different PYTHONPATH (another kit) gets its own server; idle servers beyond MAX_SERVERS are closed."""
    paths = [str(tmp_path / f"kit{i}") for i in range(forkserver.MAX_SERVERS + 1)]
    servers = []
    for path in paths:
        monkeypatch.setenv("PYTHONPATH", path)
        child = forked()
        servers.append(child.proc.server)
        child.close()
    assert len({id(s) for s in servers}) == len(paths)  # one each
    assert len(forkserver._servers) <= forkserver.MAX_SERVERS and servers[-1] in forkserver._servers.values()
    assert servers[0].proc.poll() is not None  # the least recently used one was closed, and has ended


def test_the_server_imports_only_the_listed_modules_a_request_names_and_survives_one_that_fails(monkeypatch):
    import sys

    from grader.checks import op_checks

    monkeypatch.setattr(op_checks, "FIRST_USE_IMPORTS", ("json.tool", "kcourse_no_such_module"))
    for name in ("json.tool", "xml.dom.minidom"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    op_checks.import_first_use(["json.tool", "xml.dom.minidom", "kcourse_no_such_module"])
    assert "json.tool" in sys.modules and "xml.dom.minidom" not in sys.modules


def test_the_imports_a_grade_asks_for_follow_its_checks():
    from grader.checks.op_checks import GRADIENT_IMPORTS, SCHEMA_IMPORTS, first_use_imports
    from grader.core.discovery import resolve

    spec = lambda name: resolve([name], lang="triton").spec  # noqa: E731
    assert first_use_imports(spec("vector_add").checks) == []
    assert first_use_imports(spec("autograd_function").checks) == list(GRADIENT_IMPORTS)
    assert first_use_imports(spec("custom_op").checks) == [*SCHEMA_IMPORTS, *GRADIENT_IMPORTS]


PRELOAD_PROBE = """import json, sys
raise RuntimeError("PROBE" + json.dumps({m: m in sys.modules for m in %r}) + "PROBE")
"""


@pytest.mark.slow
@pytest.mark.parametrize("server", ["1", "0"], ids=["forked", "fresh"])
def test_a_custom_op_grades_child_starts_with_what_its_checks_import_first(monkeypatch, tmp_path, server):
    """Dynamo, opcheck's tests, Inductor and sympy's shapes are imported before the learner's file runs (each child
    paid 3-4 s of CPU for them on first use: docs/measurements.md): by the server before it forks the child, or by
    a fresh child while it waits for its job (a one-shot grade's child starts before the build)."""
    from grader.checks.op_checks import FIRST_USE_IMPORTS
    from grader.core.discovery import resolve
    from grader.run.grade import grade

    monkeypatch.setenv(forkserver.ENV, server)
    learner = tmp_path / "custom_op.py"
    learner.write_text(PRELOAD_PROBE % (list(FIRST_USE_IMPORTS),))
    facts = probe_facts(grade(resolve(["custom_op"]), submission=learner, seed=1))
    assert facts == {m: True for m in FIRST_USE_IMPORTS}


def test_gpu_children_are_forked_unless_the_cuda_switch_is_off(monkeypatch):
    monkeypatch.setenv(forkserver.ENV, "1")
    monkeypatch.delenv(forkserver.CUDA_ENV, raising=False)
    assert forkserver.wanted("cpu", None, "grader.child.worker")
    assert forkserver.wanted("cuda", None, "grader.child.worker")
    assert not forkserver.wanted("cuda", ["ncu"], "grader.child.worker")  # a tool's wrapper: a process of its own
    monkeypatch.setenv(forkserver.CUDA_ENV, "0")
    assert not forkserver.wanted("cuda", None, "grader.child.worker")
    assert forkserver.wanted("cpu", None, "grader.child.worker")
    monkeypatch.setenv(forkserver.ENV, "0")
    assert not forkserver.wanted("cpu", None, "grader.child.worker")


def test_a_gpu_server_whose_forked_probe_cannot_use_cuda_is_refused_and_children_start_the_ordinary_way(
    monkeypatch,
):
    """Here no GPU exists, so the probe child fails as it would where the server had created a CUDA context: the
    server ends before forking, and this and every later GPU child is a process of its own, with no second try."""
    import subprocess

    monkeypatch.setenv(forkserver.ENV, "1")
    monkeypatch.delenv(forkserver.CUDA_ENV, raising=False)
    monkeypatch.setattr(forkserver, "_refused", set())
    children = [sandbox.Child("cuda") for _ in range(2)]
    try:
        assert all(isinstance(child.proc, subprocess.Popen) for child in children)
        assert any(dict(key).get("KCOURSE_CHILD_DEVICE") == "cuda" for key in forkserver._refused)
        assert not any(dict(key).get("KCOURSE_CHILD_DEVICE") == "cuda" for key in forkserver._servers)
    finally:
        for child in children:
            child.close()


@pytest.mark.gpu
def test_a_gpu_child_forked_is_ready_sooner_than_a_fresh_one_and_its_grade_passes(monkeypatch):
    """On a GPU the server creates no CUDA context and each forked child creates its own: ready in 0.3 s on an idle
    H100 against 5.2 s for a fresh one (docs/measurements.md, session 66), and graded as a fresh one is."""
    from grader.core.discovery import resolve
    from grader.run.grade import grade

    monkeypatch.setenv(forkserver.ENV, "1")
    monkeypatch.delenv(forkserver.CUDA_ENV, raising=False)

    def ready_in() -> tuple[type, float]:
        started = time.monotonic()
        child = sandbox.Child("cuda")
        try:
            child.wait_ready()
            return type(child.proc), time.monotonic() - started
        finally:
            child.close()

    ready_in()  # the server's own start and its probe
    kind, forked = ready_in()
    monkeypatch.setenv(forkserver.CUDA_ENV, "0")
    fresh_kind, fresh = ready_in()
    assert kind is forkserver.ForkedChild and fresh_kind is not forkserver.ForkedChild
    assert forked < fresh, f"forked {forked:.2f} s, fresh {fresh:.2f} s"
    monkeypatch.delenv(forkserver.CUDA_ENV)
    result = grade(resolve(["vector_add"], lang="triton"), source="solutions", seed=1, timed_sizes="verdict")
    assert result.status == PASSED, result.verdict
