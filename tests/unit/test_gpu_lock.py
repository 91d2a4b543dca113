"""The GPU lock that lets parallel test workers share one GPU (grader/core/gpu_lock.py): shared holders together,
an exclusive holder alone, readers first for a timer's patience and timers in a batch after it, nesting within a
process, and the processes an exclusive holder starts never waiting for it."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from grader.core import gpu_lock, gpushare

ROOT = Path(__file__).resolve().parents[2]

# A holder in another process: takes the lock as `argv[1]` says ("shared", "exclusive", "beside" (a grade's helper),
# or "shared+exclusive": the grade's case, shared and then exclusive inside it), writes `argv[2]` once it holds it,
# and lets go when `argv[3]` exists.
HOLDER = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from grader.core import gpu_lock

    mode, got, release = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])

    def hold():
        got.write_text(str(time.monotonic()))
        while not release.exists():
            time.sleep(0.01)

    if mode == "shared":
        with gpu_lock.shared():
            hold()
    elif mode == "exclusive":
        with gpu_lock.exclusive():
            hold()
    elif mode == "beside":
        with gpu_lock.beside():
            hold()
    else:
        with gpu_lock.shared():
            with gpu_lock.exclusive():
                hold()
    """
)


def _soon(condition, within: float = 10.0) -> bool:
    """Whether `condition()` holds within `within` seconds (polled)."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


class Holder:
    running: list[subprocess.Popen] = []  # killed after each test (`no_holder_left`), passed or failed

    def __init__(self, tmp_path: Path, name: str, mode: str, env: dict):
        self.got, self.release = tmp_path / f"{name}.got", tmp_path / f"{name}.release"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, mode, str(self.got), str(self.release)], cwd=ROOT, env=env
        )
        Holder.running.append(self.proc)

    def holds(self, within: float = 10.0) -> bool:
        return _soon(self.got.exists, within)

    def let_go(self) -> None:
        self.release.write_text("")
        assert self.proc.wait(timeout=10) == 0


@pytest.fixture(autouse=True)
def no_holder_left():
    """A failed assertion leaves the holders it had started waiting for a release that never comes: end them."""
    yield
    while Holder.running:
        proc = Holder.running.pop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv(gpu_lock.ENV, str(tmp_path / "gpu.lock"))
    monkeypatch.delenv(gpu_lock.HELD_ENV, raising=False)
    return dict(os.environ, PYTHONPATH=str(ROOT))


def test_without_the_variable_nothing_is_locked(tmp_path, monkeypatch):
    monkeypatch.delenv(gpu_lock.ENV, raising=False)
    with gpu_lock.shared(), gpu_lock.exclusive():
        assert gpu_lock.HELD_ENV not in os.environ  # nothing held, nothing said to the processes it starts


def test_this_process_shares_the_gpu_with_the_variable_unless_a_process_above_holds_it(tmp_path, monkeypatch):
    """gpu_lock.sharing: the lock is on here (its GPU processes are then reaped before a hold is let go, heavy.py);
    not in a process that one holding it exclusively started (a test timing in its own process runs the CLI)."""
    monkeypatch.delenv(gpu_lock.ENV, raising=False)
    assert not gpu_lock.sharing()
    monkeypatch.setenv(gpu_lock.ENV, str(tmp_path / "gpu.lock"))
    monkeypatch.delenv(gpu_lock.HELD_ENV, raising=False)
    assert gpu_lock.sharing()
    monkeypatch.setenv(gpu_lock.HELD_ENV, str(os.getpid() + 1))
    assert not gpu_lock.sharing()


def test_grades_share_the_gpu_for_numerics(tmp_path, env):
    first, second = Holder(tmp_path, "a", "shared", env), Holder(tmp_path, "b", "shared", env)
    assert first.holds() and second.holds()
    first.let_go()
    second.let_go()


def test_timing_waits_for_numerics_and_numerics_for_timing(tmp_path, env):
    reader = Holder(tmp_path, "reader", "shared", env)
    assert reader.holds()
    writer = Holder(tmp_path, "writer", "exclusive", env)
    assert not writer.holds(within=0.5)
    reader.let_go()
    assert writer.holds()
    late = Holder(tmp_path, "late", "shared", env)
    assert not late.holds(within=0.5)
    writer.let_go()
    assert late.holds()
    late.let_go()


def test_new_numerics_run_beside_a_waiting_timer_while_it_is_patient(tmp_path, env):
    reader = Holder(tmp_path, "reader", "shared", env)
    assert reader.holds()
    writer = Holder(tmp_path, "writer", "exclusive", env)  # patient for 60 s
    time.sleep(0.5)
    newcomer = Holder(tmp_path, "newcomer", "shared", env)
    assert newcomer.holds()  # one long numerics phase no longer stalls every other grade
    reader.let_go()
    assert not writer.holds(within=0.5)
    newcomer.let_go()
    assert writer.holds()
    writer.let_go()


def test_a_timer_past_its_patience_goes_before_new_numerics(tmp_path, env):
    env = dict(env, **{gpu_lock.PATIENCE_ENV: "0.3"})
    reader = Holder(tmp_path, "reader", "shared", env)
    assert reader.holds()
    writer = Holder(tmp_path, "writer", "exclusive", env)
    time.sleep(1.5)  # the writer, past its patience, now waits at the lock holding the turnstile
    newcomer = Holder(tmp_path, "newcomer", "shared", env)
    assert not newcomer.holds(within=0.5)  # it would get in beside the reader, were readers first
    reader.let_go()
    assert writer.holds()
    assert not newcomer.holds(within=0.5)
    writer.let_go()
    assert newcomer.holds()
    newcomer.let_go()


def test_timers_go_in_a_batch_one_joining_without_its_patience_before_new_numerics(tmp_path, env):
    reader = Holder(tmp_path, "reader", "shared", env)
    assert reader.holds()
    first = Holder(tmp_path, "first", "exclusive", dict(env, **{gpu_lock.PATIENCE_ENV: "0.3"}))
    time.sleep(1.5)  # past its patience: the batch has formed, waiting for the reader to finish
    newcomer = Holder(tmp_path, "newcomer", "shared", env)
    second = Holder(tmp_path, "second", "exclusive", env)  # patient for the default 30 s, were there no batch
    time.sleep(1.0)
    reader.let_go()
    assert _soon(lambda: first.got.exists() or second.got.exists())
    one, other = (first, second) if first.got.exists() else (second, first)
    assert not newcomer.holds(within=0.5)
    one.let_go()
    assert other.holds()  # the batch's second timer, before the numerics that waited since before it came
    assert not newcomer.holds(within=0.5)
    other.let_go()
    assert newcomer.holds()
    newcomer.let_go()


def test_numerics_at_a_pause_let_a_waiting_batch_of_timers_go_first_and_read_again_after_it(tmp_path, env):
    with gpu_lock.shared():
        assert not gpu_lock.timers_waiting()
        gpu_lock.let_timers_go()  # no batch waits: the hold is kept, at once
        timer = Holder(tmp_path, "timer", "exclusive", dict(env, **{gpu_lock.PATIENCE_ENV: "0.3"}))
        assert not timer.holds(within=1.5)  # past its patience, waiting in a batch for this reader
        assert gpu_lock.timers_waiting()
        pause = threading.Thread(target=gpu_lock.let_timers_go)
        pause.start()
        assert timer.holds()  # the batch went while this grade's numerics paused
        assert pause.is_alive()  # and they wait until it is done
        timer.let_go()
        pause.join(timeout=10)
        assert not pause.is_alive()
        late = Holder(tmp_path, "late", "exclusive", env)
        assert not late.holds(within=0.5)  # reading again
    assert late.holds()
    late.let_go()


def test_a_shared_hold_that_ends_during_a_pause_stays_ended(tmp_path, env):
    shared = gpu_lock.shared()
    shared.__enter__()
    timer = Holder(tmp_path, "timer", "exclusive", dict(env, **{gpu_lock.PATIENCE_ENV: "0.3"}))
    time.sleep(1.5)
    pause = threading.Thread(target=gpu_lock.let_timers_go)
    pause.start()
    assert timer.holds()
    shared.__exit__(None, None, None)  # the grade failed meanwhile: its hold ends while the pause waits
    timer.let_go()
    pause.join(timeout=10)
    after = Holder(tmp_path, "after", "exclusive", env)
    assert after.holds()  # nothing of the paused grade is left holding the lock
    after.let_go()


def test_a_grade_whose_child_compiles_steps_out_so_a_timer_goes_at_once_and_it_rejoins_after(tmp_path, env):
    """step_out (compile_first): the shared hold let go while the child compiles, launching nothing; a timer past its
    patience takes the lock meanwhile, and the hold comes back once the timer is done."""
    log = tmp_path / "lock.jsonl"
    env = dict(env, **{gpu_lock.PATIENCE_ENV: "0.3"})
    os.environ[gpu_lock.LOG_ENV] = str(log)
    try:
        with gpu_lock.shared():
            rejoin = gpu_lock.step_out()
            timer = Holder(tmp_path, "timer", "exclusive", env)
            assert timer.holds(within=2.0)  # nothing of this grade holds the lock while its child compiles
            back = threading.Thread(target=rejoin)
            back.start()
            assert not _soon(lambda: not back.is_alive(), within=0.5)  # the timer first
            timer.let_go()
            back.join(timeout=10)
            gpu_lock.step_out()("RuntimeError: out of resources")  # a pass the learner's code ended early
            late = Holder(tmp_path, "late", "exclusive", env)
            assert not late.holds(within=0.5)  # reading again
    finally:
        del os.environ[gpu_lock.LOG_ENV]
    assert late.holds()
    late.let_go()
    holds = [json.loads(line) for line in log.read_text().splitlines()]
    assert [h["mode"] for h in holds] == ["stepped_out", "stepped_out", "shared"], holds
    assert "failed" not in holds[0] and holds[1]["failed"] == "RuntimeError: out of resources"
    script = ROOT / "scripts" / "gpu_lock_report.py"
    if script.exists():  # the instructors' (not in the learner's kit)
        report = subprocess.run([sys.executable, str(script), str(log)], capture_output=True, text=True).stdout
        assert "stepped_out: 2 holds" in report and "compile passes ended early: 1" in report, report


def test_stepping_out_without_a_shared_hold_or_while_timing_lets_nothing_go(tmp_path, env):
    gpu_lock.step_out()()  # no hold: nothing to let go or take again
    with gpu_lock.shared(), gpu_lock.exclusive():
        rejoin = gpu_lock.step_out()
        other = Holder(tmp_path, "other", "shared", env)
        assert not other.holds(within=0.5)  # the exclusive hold is kept
        rejoin()
    assert other.holds()
    other.let_go()


def test_two_grades_that_both_move_from_numerics_to_timing_do_not_deadlock(tmp_path, env):
    first = Holder(tmp_path, "a", "shared+exclusive", env)
    second = Holder(tmp_path, "b", "shared+exclusive", env)
    # either may win: waiting on one alone waited out its 10 s whenever the other won
    assert _soon(lambda: first.got.exists() or second.got.exists())
    one, other = (first, second) if first.got.exists() else (second, first)
    assert not other.holds(within=0.5)
    one.let_go()
    assert other.holds()
    other.let_go()


def test_within_one_process_the_lock_nests_and_shared_is_kept_after_timing(tmp_path, env):
    with gpu_lock.shared():
        with gpu_lock.exclusive():
            with gpu_lock.shared():  # a grade inside a test that times alone
                pass
        assert gpu_lock.HELD_ENV not in os.environ
        writer = Holder(tmp_path, "writer", "exclusive", env)
        assert not writer.holds(within=0.5)  # still reading
    assert writer.holds()
    writer.let_go()


def may_raise_priority() -> bool:
    """Whether this process may raise a thread's priority: root, unless a container took CAP_SYS_NICE away."""
    tid = threading.get_native_id()
    was = os.getpriority(os.PRIO_PROCESS, tid)
    try:
        os.setpriority(os.PRIO_PROCESS, tid, was - 1)
    except PermissionError:
        return False
    os.setpriority(os.PRIO_PROCESS, tid, was)
    return True


def test_while_timing_alone_the_timer_and_its_child_get_the_cpu_first_and_their_priorities_come_back(env):
    child = subprocess.Popen(SLEEPER)
    try:
        priority = lambda tid: os.getpriority(os.PRIO_PROCESS, tid)  # noqa: E731
        me, before = threading.get_native_id(), (priority(threading.get_native_id()), priority(child.pid))
        with gpu_lock.exclusive(child.pid):
            during = (priority(me), priority(child.pid))
        assert (priority(me), priority(child.pid)) == before
    finally:
        child.kill()
        child.wait()
    if may_raise_priority():  # root with CAP_SYS_NICE; for anyone else the hold is the same without it
        assert during == (gpu_lock.FAVOURED_NICE, gpu_lock.FAVOURED_NICE)
    else:
        assert during == before
    with gpu_lock.shared():  # numerics: no one favoured
        assert priority(me) == before[0]


def test_what_an_exclusive_holder_starts_does_not_wait_for_it(tmp_path, env):
    with gpu_lock.exclusive():
        assert os.environ[gpu_lock.HELD_ENV] == str(os.getpid())
        child = Holder(tmp_path, "cli", "shared+exclusive", dict(os.environ, PYTHONPATH=str(ROOT)))
        assert child.holds()
        child.let_go()


def test_a_timer_that_builds_lets_numerics_run_meanwhile_and_times_alone_after(tmp_path, env):
    with gpu_lock.exclusive():
        with gpu_lock.set_aside():  # a build: no GPU used
            assert gpu_lock.HELD_ENV not in os.environ
            reader = Holder(tmp_path, "reader", "shared", env)
            assert reader.holds()
            reader.let_go()
        assert os.environ[gpu_lock.HELD_ENV] == str(os.getpid())
        late = Holder(tmp_path, "late", "shared", env)
        assert not late.holds(within=0.5)  # timing again: alone
    assert late.holds()
    late.let_go()


def test_building_without_an_exclusive_hold_changes_nothing(tmp_path, env):
    with gpu_lock.shared():
        with gpu_lock.set_aside():
            writer = Holder(tmp_path, "writer", "exclusive", env)
            assert not writer.holds(within=0.5)  # a reader's hold is not set aside
    assert writer.holds()
    writer.let_go()


SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def _outside(env: dict) -> dict:
    """`env` without the lock's variable: a process that takes no part in it."""
    return {k: v for k, v in env.items() if k != gpu_lock.ENV}


def test_a_participant_is_a_process_started_under_the_lock_or_below_one(env):
    outsider = subprocess.Popen(SLEEPER, env=_outside(env))
    worker = subprocess.Popen(  # a pytest worker under the lock starting a grading child with a cleared environment
        [sys.executable, "-c", f"import subprocess; subprocess.run({SLEEPER!r}, env={{}})"], env=env
    )
    try:
        assert _soon(lambda: gpushare.descendants(worker.pid))
        (child,) = gpushare.descendants(worker.pid)
        assert gpu_lock.participant(worker.pid) and gpu_lock.participant(child)
        assert not gpu_lock.participant(outsider.pid)
        assert not gpu_lock.participant(os.getppid())  # above this test: started without the lock's variable
    finally:
        for proc in (outsider, worker):
            proc.kill()
            proc.wait()


def _detached(env: dict) -> int:
    """A sleeper this process did not start (its shell exits, so it is nobody's descendant here): its pid."""
    command = shlex.join(SLEEPER) + " >/dev/null 2>&1 & echo $!"
    return int(subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True, check=True).stdout)


def test_while_timing_alone_the_locks_participants_on_the_gpu_are_not_counted_as_sharers(tmp_path, env, monkeypatch):
    outsider, worker = _detached(_outside(env)), _detached(env)
    smi = tmp_path / "nvidia-smi"  # lists both on the GPU, as the real one lists every compute context
    smi.write_text(f"#!/bin/sh\necho '{outsider}, /usr/bin/python3'\necho '{worker}, /usr/bin/python3'\n")
    smi.chmod(0o755)
    monkeypatch.setattr(gpushare.shutil, "which", lambda name: str(smi))
    try:
        with gpu_lock.shared():  # numerics: another grade's child may well be working
            assert len(gpushare.other_gpu_processes()) == 2 and not gpu_lock.held_alone()
        with gpu_lock.exclusive():
            assert gpu_lock.held_alone()
            assert gpushare.other_gpu_processes() == [f"{outsider} python3"]
    finally:
        for pid in (outsider, worker):
            os.kill(pid, signal.SIGKILL)


def test_each_hold_is_logged_and_the_report_sums_them(tmp_path, env, monkeypatch):
    log = tmp_path / "lock.jsonl"
    monkeypatch.setenv(gpu_lock.LOG_ENV, str(log))
    with gpu_lock.shared():
        time.sleep(0.3)  # numerics
        with gpu_lock.exclusive():
            time.sleep(0.05)
    holds = [json.loads(line) for line in log.read_text().splitlines()]
    assert [h["mode"] for h in holds] == ["exclusive", "shared"]  # the inner hold ends first
    assert holds[0]["held"] >= 0.05 and holds[1]["held"] >= holds[0]["held"]
    assert holds[0]["test"].endswith("test_each_hold_is_logged_and_the_report_sums_them")
    favoured = 1 if may_raise_priority() else 0
    assert holds[0]["favoured"] == favoured and "favoured" not in holds[1]
    script = ROOT / "scripts" / "gpu_lock_report.py"
    if not script.exists():
        pytest.skip("scripts/gpu_lock_report.py is the instructors' (not in the learner's kit)")
    report = subprocess.run([sys.executable, str(script), str(log)], capture_output=True, text=True, check=True).stdout
    assert "exclusive: 1 holds" in report and "shared: 1 holds" in report
    assert f"timers favoured: {favoured} of 1 exclusive holds raised a priority" in report
    lines = report.splitlines()
    longest = lines.index("held exclusively longest:") + 1
    assert "test_each_hold_is_logged_and_the_report_sums_them" in lines[longest]
    own = next(line for line in lines if line.startswith("shared holds less the timing nested in them"))
    assert own.endswith("median 0.3 s"), own  # the numerics' 0.3 s, not the timing's wait and hold inside


def test_a_grades_helper_gets_in_past_a_waiting_timer_but_never_beside_a_timing_one(tmp_path, env):
    env = dict(env, **{gpu_lock.PATIENCE_ENV: "0.3"})
    grade = Holder(tmp_path, "grade", "shared", env)  # it waits for its helper's references, holding the lock
    assert grade.holds()
    timer = Holder(tmp_path, "timer", "exclusive", env)
    time.sleep(1.5)  # past its patience: it holds the turnstile and waits for the grade
    helper = Holder(tmp_path, "helper", "beside", env)
    assert helper.holds()  # queued behind the timer, it would never finish and the grade never let go
    helper.let_go()
    grade.let_go()
    assert timer.holds()
    late_helper = Holder(tmp_path, "late", "beside", env)
    assert not late_helper.holds(within=0.5)  # the timer times alone
    timer.let_go()
    assert late_helper.holds()
    late_helper.let_go()


def test_a_helper_that_waits_past_its_limit_goes_on_unlocked(tmp_path, env, monkeypatch):
    monkeypatch.setattr(gpu_lock, "BESIDE_LIMIT_S", 0.3)
    timer = Holder(tmp_path, "timer", "exclusive", env)
    assert timer.holds()
    started = time.monotonic()
    with gpu_lock.beside():  # never a deadlock: a grade stuck behind its own helper would otherwise wait forever
        waited = time.monotonic() - started
    assert 0.3 <= waited < 5
    timer.let_go()
