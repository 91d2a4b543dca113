"""The sandbox (grader/run/sandbox.py): how a dead child becomes a verdict (death_message), the trimming of its
output, its environment, and the event pipe, exercised on a tiny fake child (no torch) that speaks the JSON-lines
protocol: steps, ready, garbled lines, silence past a deadline, exits and signals."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from grader.core.paths import course_root
from grader.kinds import GPU_TO_RUN
from grader.run import sandbox
from grader.run.sandbox import Child, ChildGone, ChildTimeout, Death, child_env, death_message, trim

# --- death_message ---------------------------------------------------------------------------------


def test_a_timeout_names_the_limit_and_the_last_step():
    code, message = death_message(Death(True, -9, "checking n=5, trial 1"), 60.0)
    assert code == "timeout"
    assert message.startswith("your code ran past the 60 s limit while checking n=5, trial 1 and was stopped")


@pytest.mark.parametrize(
    "returncode, name, hint",
    [
        (-signal.SIGSEGV, "SIGSEGV", "a bad pointer"),
        (-signal.SIGABRT, "SIGABRT", "an assertion or a C++ exception"),
        (-signal.SIGFPE, "SIGFPE", "an integer division by zero"),
    ],
)
def test_a_signal_is_a_crash_named_with_its_likely_cause(returncode, name, hint):
    code, message = death_message(Death(False, returncode, "loading your code"), 60.0)
    assert code == "crash"
    assert message.startswith(f"your code crashed with {name} while loading your code — ") and hint in message


def test_a_signal_without_a_known_cause_is_named_alone():
    assert death_message(Death(False, -signal.SIGKILL, "timing n=64"), 1.0) == (
        "crash",
        "your code crashed with SIGKILL while timing n=64",
    )


@pytest.mark.parametrize("returncode, status", [(3, "exit status 3"), (0, "exit status 0"), (None, "exit status 0")])
def test_an_exit_is_an_unexpected_end_that_asks_about_exit_calls(returncode, status):
    code, message = death_message(Death(False, returncode, "checking n=5"), 60.0)
    assert code == "crash"
    assert f"the grading process ended unexpectedly ({status}) while checking n=5" in message and "exit()" in message


def test_a_signal_python_has_no_name_for_is_still_a_crash_verdict():
    code, message = death_message(Death(False, -35, "checking n=5"), 60.0)
    assert code == "crash" and "35" in message


def test_a_timeout_wins_over_the_signal_that_ended_it():
    assert death_message(Death(True, -signal.SIGSEGV, "x"), 2.5)[0] == "timeout"


# --- trim ------------------------------------------------------------------------------------------


def test_short_output_is_kept_whole():
    assert trim("hello\nworld\n") == "hello\nworld\n"


def test_long_output_keeps_its_end_and_says_so():
    text = "".join(f"line {i}\n" for i in range(2000))
    trimmed = trim(text, limit=100)
    assert trimmed.startswith("... (earlier output trimmed)\n") and trimmed.endswith("line 1999\n")
    assert len(trimmed) == len("... (earlier output trimmed)\n") + 100


def test_torch_profiler_noise_is_removed_before_trimming():
    noisy = (
        "mine\nUSDT:2026-01-02 10:11:12 1234 Sync.cpp:52] profiler_start\n"
        "WARNING:2026-01-02 10:11:12 x.cpp:7] profiler_stop\nalso mine\n"
    )
    assert trim(noisy) == "mine\nalso mine\n"


# --- the child's environment -----------------------------------------------------------------------


def test_the_child_imports_the_course_first_and_keeps_the_callers_path(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    env = child_env("cuda", {"EXTRA": "1"})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(course_root()), "/elsewhere"]
    assert (env["KCOURSE_CHILD_DEVICE"], env["EXTRA"], env["PYTHONUNBUFFERED"]) == ("cuda", "1", "1")
    assert "TRITON_INTERPRET" not in env  # a GPU child compiles Triton kernels


def test_a_cpu_child_runs_triton_in_the_interpreter(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert child_env("cpu")["TRITON_INTERPRET"] == "1"


def test_autotuning_is_cached_unless_the_caller_says_otherwise(monkeypatch):
    monkeypatch.delenv("TRITON_CACHE_AUTOTUNING", raising=False)
    assert child_env("cpu")["TRITON_CACHE_AUTOTUNING"] == "1"
    monkeypatch.setenv("TRITON_CACHE_AUTOTUNING", "0")
    assert child_env("cpu")["TRITON_CACHE_AUTOTUNING"] == "0"


def test_the_visible_gpu_is_the_batchs_else_the_graders(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert Child.visible_devices_for({"CUDA_VISIBLE_DEVICES": "1"}) == "1"
    assert Child.visible_devices_for(None) == "3"


def test_without_a_gpu_raw_cuda_gets_the_emulators_child_and_a_torch_operator_none(monkeypatch):
    from grader import cuda_cpu

    started = []
    monkeypatch.setattr(sandbox, "Child", lambda device, env: started.append((device, env)) or device)
    monkeypatch.setattr(cuda_cpu, "child_env", lambda: {"LD_PRELOAD": "libasan.so"})
    monkeypatch.setattr(cuda_cpu, "mode", lambda: (True, "CPU emulation"))
    assert [sandbox.child_for(kind, gpu=False) for kind in ("cuda", "cuda_host", "torch_op")] == ["cpu", "cpu", None]
    assert started == [("cpu", {"LD_PRELOAD": "libasan.so"})] * 2  # the emulated library's runtime first
    monkeypatch.setattr(cuda_cpu, "mode", lambda: (False, "compile only"))
    assert all(sandbox.child_for(kind, gpu=False) is None for kind in GPU_TO_RUN)  # no emulator here: only compiled


def test_prewarming_is_asked_for_the_kinds_that_pay_for_it():
    assert sandbox.prewarm_env("torch_op") == {"KCOURSE_CHILD_PREWARM": "profiler"}
    assert sandbox.prewarm_env("triton") == {"KCOURSE_CHILD_PREWARM": "triton"}
    assert sandbox.prewarm_env("cuda") == {}


# --- a fake child on the real pipe -----------------------------------------------------------------

# Runs the JSON list in FAKE_SCRIPT: {"event": {...}} sends it, {"raw": "text"} writes text as is, {"echo": true}
# sends the next stdin line back as an "echo" event, {"sleep": s}, {"print": text} to stdout, {"signal": "SIGSEGV"},
# {"exit": code}, {"spawn": true} starts a sleeping grandchild and sends its pid, {"drain": true} reads stdin to EOF.
FAKE_CHILD = r"""
import json, os, signal, subprocess, sys, time
fd = int(sys.argv[1])
def write(text):
    data = text.encode()
    while data:
        data = data[os.write(fd, data):]
for step in json.loads(os.environ["FAKE_SCRIPT"]):
    if "event" in step:
        write(json.dumps(step["event"]) + "\n")
    elif "raw" in step:
        write(step["raw"])
    elif "echo" in step:
        write(json.dumps({"event": "echo", "got": json.loads(sys.stdin.readline())}) + "\n")
    elif "sleep" in step:
        time.sleep(step["sleep"])
    elif "print" in step:
        print(step["print"], flush=True)
    elif "signal" in step:
        os.kill(os.getpid(), getattr(signal, step["signal"]))
    elif "exit" in step:
        os._exit(step["exit"])
    elif "spawn" in step:
        grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        write(json.dumps({"event": "spawned", "pid": grandchild.pid}) + "\n")
    elif "drain" in step:
        sys.stdin.read()
"""

READY = {"event": {"event": "ready", "device": {"type": "cpu"}}}


@pytest.fixture
def fake_child(tmp_path, monkeypatch):
    """Starts the fake child with a script; every child started is closed at the end of the test."""
    (tmp_path / "kcourse_fake_child.py").write_text(FAKE_CHILD)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    started: list[Child] = []

    def start(*script) -> Child:
        child = Child("cpu", {"FAKE_SCRIPT": json.dumps(list(script))}, module="kcourse_fake_child")
        started.append(child)
        return child

    yield start
    for child in started:
        child.close()


def soon(seconds: float = 5.0) -> float:
    return time.monotonic() + seconds


def test_ready_is_awaited_past_the_steps_which_set_the_last_step(fake_child):
    child = fake_child({"event": {"event": "step", "text": "importing torch"}}, READY)
    assert child.wait_ready(5.0)["device"] == {"type": "cpu"}
    assert child.last_step == "importing torch"
    assert child.wait_ready() is child.ready  # asked again: the same, without reading


def test_a_child_that_ends_before_ready_is_gone(fake_child):
    child = fake_child({"event": {"event": "done"}})
    with pytest.raises(ChildGone):
        child.wait_ready(5.0)


def test_a_silent_child_times_out_at_the_deadline(fake_child):
    child = fake_child({"sleep": 10})
    begun = time.monotonic()
    with pytest.raises(ChildTimeout):
        child.event(begun + 0.3)
    assert 0.25 < time.monotonic() - begun < 2.0


def test_a_deadline_already_past_still_reads_what_the_child_sent_in_time(fake_child):
    # a caller that comes late (a grade that waited for a build or the GPU lock) finds the ready the child sent
    child = fake_child(READY, {"sleep": 10})
    time.sleep(0.5)  # the child has written its ready by now
    assert child.wait_ready(limit_s=0.0)["device"] == {"type": "cpu"}
    begun = time.monotonic()
    with pytest.raises(ChildTimeout):  # nothing more was sent: past the deadline, it times out at once
        child.event(begun - 1)
    assert time.monotonic() - begun < 0.5


def test_a_failure_reported_instead_of_ready_is_kept_for_the_verdict(fake_child):
    check = {"name": "grader", "status": "error", "message": "internal grader error: CUDA out of memory"}
    child = fake_child({"event": {"event": "check", "check": check}}, {"event": {"event": "done"}})
    with pytest.raises(ChildGone) as gone:
        child.wait_ready(5.0)
    assert gone.value.check == check and child.ready is None


@pytest.mark.parametrize(
    "exc, said",
    [
        (ChildGone({"message": "internal grader error: CUDA out of memory"}), "it reported: CUDA out of memory"),
        (ChildTimeout(), "it was not ready within 180 s (importing torch, creating the GPU context)"),
        (ChildGone(), "it ended before it was ready (exit status -9)"),
    ],
)
def test_a_child_that_never_started_is_not_blamed_on_the_learners_code(exc, said):
    code, message = sandbox.start_failure(exc, -9)
    assert code == "child_start"
    assert message.startswith(f"the grading process could not start, before your code ran: {said} — grade again")
    assert "kcourse env-check" in message and "your code crashed" not in message


def test_a_child_that_exits_is_gone_and_its_status_kept(fake_child):
    child = fake_child({"exit": 7})
    with pytest.raises(ChildGone):
        child.event(soon())
    assert child.proc.wait(5) == 7


@pytest.mark.parametrize(
    "line, text", [("not json\n", "not json"), ("[1, 2]\n", "[1, 2]"), ('{"no": "event"}\n', '{"no": "event"}')]
)
def test_a_line_that_is_no_event_comes_back_garbled(fake_child, line, text):
    child = fake_child({"raw": line})
    assert child.event(soon()) == {"event": "garbled", "text": text}


def test_a_garbled_line_is_cut_to_200_characters(fake_child):
    child = fake_child({"raw": "x" * 1000 + "\n"})
    assert child.event(soon())["text"] == "x" * 200


def test_events_in_one_write_and_an_event_across_writes_are_each_read_whole(fake_child):
    child = fake_child({"raw": '{"event": "a"}\n{"event": "b"}\n{"event": '}, {"sleep": 0.1}, {"raw": '"c"}\n'})
    assert [child.event(soon())["event"] for _ in range(3)] == ["a", "b", "c"]


def test_a_message_sent_reaches_the_child_as_one_json_line(fake_child):
    child = fake_child({"echo": True})
    child.send({"case": 1, "label": "n=5"})
    assert child.event(soon())["got"] == {"case": 1, "label": "n=5"}


def test_sending_to_a_dead_child_does_not_raise(fake_child):
    child = fake_child({"exit": 0})
    child.proc.wait(5)
    for _ in range(3):  # the first write may still fit in the pipe; a later one meets the closed end
        child.send({"x": "y" * 100_000})


def test_a_crash_is_told_by_its_signal_and_the_step_it_happened_in(fake_child):
    child = fake_child({"event": {"event": "step", "text": "checking n=37, trial 2"}}, {"signal": "SIGSEGV"})
    assert child.event(soon())["event"] == "step"
    with pytest.raises(ChildGone):
        child.event(soon())
    code, message = death_message(Death(False, child.proc.wait(5), child.last_step), 60)
    assert (code, message.split(" — ")[0]) == ("crash", "your code crashed with SIGSEGV while checking n=37, trial 2")


def test_the_childs_prints_are_its_output(fake_child):
    child = fake_child({"print": "hello from the kernel"}, {"exit": 0})
    child.proc.wait(5)
    assert child.output() == "hello from the kernel\n"


def test_the_child_runs_in_its_own_session_in_its_work_folder(fake_child):
    child = fake_child({"sleep": 10})
    assert os.getpgid(child.proc.pid) == child.proc.pid
    assert child.dir.is_dir() and child.dir.name.startswith("kcourse-")


def test_kill_ends_what_the_child_started_too(fake_child):
    child = fake_child({"spawn": True}, {"sleep": 10})
    grandchild = child.event(soon())["pid"]
    child.kill()
    assert child.proc.wait(5) == -signal.SIGKILL
    deadline = soon(3)
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _alive(grandchild)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"  # a zombie has ended
    except (FileNotFoundError, IndexError):
        return False


def test_finish_lets_a_child_that_reads_to_the_end_exit_cleanly(fake_child):
    child = fake_child({"drain": True}, {"exit": 0})
    assert child.finish(grace_s=5) == 0


def test_finish_kills_a_child_that_outstays_its_grace(fake_child):
    child = fake_child({"sleep": 10})
    begun = time.monotonic()
    assert child.finish(grace_s=0.2) == -signal.SIGKILL
    assert time.monotonic() - begun < 2.0


def test_close_removes_the_work_folder_and_may_be_called_twice(fake_child):
    child = fake_child({"sleep": 10})
    folder = child.dir
    child.close()
    child.close()
    assert not folder.exists()
