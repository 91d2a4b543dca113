"""A grading child whose parent dies (a Dask worker killed mid-task, a grade stopped with SIGKILL) ends itself
and everything it started, instead of running a learner's hanging kernel on to its time limit or forever."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import ROOT

# The parent starts a child in its own session, as sandbox.Child does; the child starts a grandchild (the
# learner's own subprocess) and hangs. The parent prints both pids and is then killed.
PARENT = textwrap.dedent("""
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", '''
    import subprocess, sys, time
    from grader.child.orphan import exit_with_parent
    exit_with_parent(poll_s=0.1)
    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    print(grandchild.pid, flush=True)
    time.sleep(120)  # the learner's hang
    '''], start_new_session=True, stdout=subprocess.PIPE, text=True)
    print(child.pid, child.stdout.readline().strip(), flush=True)
    time.sleep(120)
""")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie waiting for its reaper is gone for our purpose
        return stat.read().split(")")[-1].split()[0] != "Z"


def test_a_child_whose_parent_is_killed_ends_itself_and_its_own_subprocesses():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, env=env)
    child, grandchild = map(int, parent.stdout.readline().split())
    assert alive(child) and alive(grandchild)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while (alive(child) or alive(grandchild)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(child) and not alive(grandchild), "the orphaned child kept running"


@pytest.mark.slow
def test_a_child_whose_parent_lives_keeps_running():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, env=env)
    try:
        child, grandchild = map(int, parent.stdout.readline().split())
        time.sleep(1.0)
        assert alive(child) and alive(grandchild)
    finally:
        parent.kill()
        parent.wait()
