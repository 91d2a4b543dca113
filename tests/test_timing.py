"""Timing's head start: the GPU spins before each timed run long enough that the host has queued the launch,
so the events bracket the kernel's device time, not its wrapper's Python (a TMA-descriptor wrapper takes
~0.2 ms of host time a call, which the fixed 0.1 ms spin of before counted against the Flash Attention
solution on the H200)."""

from __future__ import annotations

import time

import pytest

from grader.child import timing


def test_the_head_start_covers_twice_the_hosts_time_within_its_floor_and_ceiling():
    assert timing.headstart_s(0.0) == timing.HOST_HEADSTART_S  # a cheap launcher: the fixed spin
    assert timing.headstart_s(30e-6) == timing.HOST_HEADSTART_S
    assert timing.headstart_s(250e-6) == pytest.approx(500e-6)  # a wrapper building descriptors
    assert timing.headstart_s(1.0) == timing.MAX_HEADSTART_S  # a function that waits for the GPU: bounded


@pytest.mark.gpu
def test_a_slow_host_side_is_not_counted_as_device_time():
    import torch

    x = torch.ones(1 << 20, device="cuda")
    out = torch.empty_like(x)

    def slow_wrapper():  # 1.5 ms of Python, then a ~5 us kernel
        time.sleep(1.5e-3)
        torch.mul(x, 2.0, out=out)

    measured = timing.time_alternating({"slow": slow_wrapper, "fast": lambda: torch.mul(x, 2.0, out=out)}, budget_s=0.3)
    assert measured["slow"]["median_ms"] < 0.3, measured  # was ~1.4 ms: the idle GPU waiting for the launch
    assert measured["slow"]["median_ms"] < 3 * measured["fast"]["median_ms"] + 0.02, measured


def test_timing_stops_early_only_once_every_median_is_known_to_a_fraction_of_a_percent():
    import random

    rng = random.Random(0)
    tight = [1.0 + rng.gauss(0, 0.005) for _ in range(timing.SETTLED_RUNS)]  # 0.5% noise: SE ~0.1%
    wide = [1.0 + rng.gauss(0, 0.05) for _ in range(timing.SETTLED_RUNS)]  # 5% noise: SE ~1%
    assert timing.settled({"learner": tight, "solution": tight})
    assert not timing.settled({"learner": tight, "solution": wide})  # every contestant must be settled
    assert not timing.settled({"learner": tight[:-1], "solution": tight[:-1]})  # too few runs, however tight
    # a few slow outliers (a clock dip, another process) do not keep it from settling: quartiles, not sigma
    assert timing.settled({"learner": tight[:-4] + [5.0] * 4, "solution": tight})


@pytest.mark.gpu
def test_a_steady_kernel_is_timed_in_a_fraction_of_the_budget():
    import torch

    x = torch.ones(1 << 26, device="cuda")
    out = torch.empty_like(x)
    started = time.perf_counter()
    measured = timing.time_alternating(
        {"a": lambda: torch.mul(x, 2.0, out=out), "b": lambda: torch.mul(x, 3.0, out=out)}, budget_s=3.0
    )
    print(measured)
    # The rounds stop once every median is known to SETTLED_PRECISION after SETTLED_S, or at MAX_RUNS: on an
    # H100 and an H200 this 0.13-ms kernel's 300 rounds took under SETTLED_S (spread 0.8%), so MAX_RUNS came first
    assert time.perf_counter() - started < 1.5, measured
    assert timing.SETTLED_RUNS <= measured["a"]["runs"] <= timing.MAX_RUNS, measured


def test_the_probe_keeps_each_contestants_fastest_burst_so_a_busy_host_does_not_make_a_forgery():
    """Four grades at once on one host (H200): single bursts of an honest 0.04-ms softmax measured 3.4 ms a
    run. The parent keeps each contestant's fastest burst; a claim is still disbelieved when every burst
    is slow, as a patched timer's would be."""
    from grader.checks.speed import fastest_bursts, probe_disagrees
    from grader.core.records import Timing

    record = Timing(case="n=1", learner_ms=0.0375)
    busy = [
        ("baseline", 0.030, 1000),
        ("baseline", 0.045, 1000),
        ("baseline", 0.090, 1000),
        ("learner", 1.70, 500),
        ("learner", 0.050, 500),
        ("learner", 1.20, 500),
    ]
    assert fastest_bursts(busy)["learner"] == {"wall_s": 0.050, "runs": 500}
    assert probe_disagrees(record, fastest_bursts(busy)) is None
    forged = [b if b[0] == "baseline" else (b[0], 1.70, 500) for b in busy]
    assert "the grader's own clock measured 3.37 ms" in probe_disagrees(record, fastest_bursts(forged))


def test_a_probe_trace_says_where_each_bursts_wall_clock_went(tmp_path):
    """KCOURSE_PROBE_TRACE's lines: the kernel-kept figures apart from what the child says of itself."""
    import json

    from grader.core.hostload import burst_trace, main_thread_times, own_thread_times, write_trace

    line = burst_trace(
        "learner", 100, 0.5, (2.0, 1.0), (2.3, 1.1), (5.0, 3.0), (5.0, 3.25), {"enqueue_s": 0.3, "sync_s": 0.2}
    )
    assert line["child_cpu_s"] == pytest.approx(0.3) and line["child_wait_s"] == pytest.approx(0.1)
    assert line["parent_wait_s"] == pytest.approx(0.25)
    assert line["child_enqueue_s"] == 0.3 and line["child_sync_s"] == 0.2
    assert burst_trace("learner", 1, 0.5, None, None, None, None, {})["child_cpu_s"] is None  # not Linux
    write_trace(str(tmp_path / "trace.jsonl"), {"bursts": [line]})
    assert json.loads((tmp_path / "trace.jsonl").read_text())["bursts"][0]["who"] == "learner"
    if __import__("os").path.exists("/proc/thread-self/schedstat"):
        assert main_thread_times(__import__("os").getpid())[0] > 0 and own_thread_times()[0] > 0


def test_where_the_probe_disagrees_another_programs_work_on_the_gpu_is_named_and_the_graders_own_is_not(
    tmp_path, monkeypatch
):
    """A GPU shared with another program slows the probe's bursts more than the timed runs: the grade then
    names that program and gives no speed verdict, instead of calling the timer patched. This process, and
    what it started (the grading child, a warm child), are the grader's own."""
    import os
    import subprocess
    import sys

    from grader.core import gpushare

    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        fake = tmp_path / "nvidia-smi"
        fake.write_text(
            "#!/bin/sh\n"
            f"echo '{os.getpid()}, /usr/bin/python3'\n"
            f"echo '{helper.pid}, /usr/bin/python3'\n"
            "echo '1, /opt/lab/other_students_training'\n"  # pid 1: running, not ours
            "echo '4194301, /usr/bin/python3'\n"
        )  # no such pid here: another namespace's, not counted
        fake.chmod(0o755)
        monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
        others = gpushare.other_gpu_processes("3")
    finally:
        helper.kill()
    if sys.platform.startswith("linux"):  # descendants are read from /proc
        assert others == ["1 other_students_training"]
    assert gpushare.parse_apps("No running processes found\n") == []
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert gpushare.other_gpu_processes() == []  # no nvidia-smi: nothing known, the probe's verdict stands


def test_the_gpu_searched_for_other_programs_is_the_grading_childs_own(monkeypatch):
    """On a machine of several GPUs, a grader given GPU 1 (CUDA_VISIBLE_DEVICES=1, by a queue or a class
    server) once asked nvidia-smi about GPU 0, found another lane's grades there and let a patched timer off as
    "not judged: GPU shared". The child's GPU is its UUID where it sent one (CUDA's order of GPUs need not be nvidia-smi's),
    else the CUDA_VISIBLE_DEVICES it inherited or was given."""
    from grader.core import gpushare
    from grader.run.sandbox import Child

    assert gpushare.nvidia_smi_ids("1", "808331cc-c7be-48af") == ["GPU-808331cc-c7be-48af", "1"]
    assert gpushare.nvidia_smi_ids(None, "GPU-808331cc") == ["GPU-808331cc", "0"]
    assert gpushare.nvidia_smi_ids("3,1") == ["3"] and gpushare.nvidia_smi_ids(None) == ["0"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert Child.visible_devices_for(None) == "1"  # inherited from the grader
    assert Child.visible_devices_for({"CUDA_VISIBLE_DEVICES": "2"}) == "2"  # given by grade-batch
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert Child.visible_devices_for(None) is None


def test_a_uuid_nvidia_smi_does_not_know_falls_back_to_the_index(tmp_path, monkeypatch):
    """A UUID nvidia-smi rejects (a MIG instance's, a driver that spells it otherwise) must not hide another
    program on the GPU: the next id is asked."""
    import os
    import sys

    from grader.core import gpushare

    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        '#!/bin/sh\ncase "$*" in *GPU-*) echo "No devices were found" >&2; exit 6;; esac\n'
        "echo '1, /opt/lab/other_students_training'\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    found = gpushare.other_gpu_processes(*gpushare.nvidia_smi_ids("1", "808331cc-c7be"))
    if sys.platform.startswith("linux"):
        assert found == ["1 other_students_training"]


def test_a_probe_burst_starts_only_after_the_graders_clock_has():
    """Child side: after each probe_start the child waits for the grader's go before it runs anything, so a
    grader slow to wake (a learner's CPU burners) can only lengthen the burst it measures, never shorten it."""
    from grader.child.worker import Worker

    log = []

    class Child:
        device = "cpu"
        events = type("Events", (), {"send": lambda self, kind, **kw: log.append(kind)})()
        read_message = lambda self: log.append("go")  # noqa: E731
        sync = lambda self: None  # noqa: E731
        _once = Worker._once

    Worker._probe(Child(), {"learner": lambda: log.append("run")}, host=False)
    bursts = [log[i:] for i, kind in enumerate(log) if kind == "probe_start"]
    assert len(bursts) == 2 * 3  # the baseline's and the learner's, three each
    assert all(burst[1] == "go" for burst in bursts)  # nothing runs between probe_start and the go
    assert log.count("run") >= 3 * 3


def _probe_judge(burst_s: float = 0.0, rounds: int = 1):
    """A Judge whose child is a script of `rounds` probes' events (baseline and learner, three bursts each);
    `sent` records each message the judge sends ("go", or the probe_again it sends after a probe), with the time."""
    import time as clock

    from grader.core.records import GradeResult
    from grader.run import judge as judge_module
    from grader.run.child_link import ChildLink

    sent = []

    class FakeChild:
        ready, visible_devices, pid = {"pid": 1}, None, 1
        proc = type("P", (), {"pid": 1})()

        def __init__(self):
            self.script = [
                {"event": kind, "who": who, "runs": 10}
                for _ in range(rounds)
                for who in ("baseline", "learner")
                for _ in range(3)
                for kind in ("probe_start", "probe_end")
            ]

        def send(self, message):
            kind = f"probe_again={message['probe_again']}" if "probe_again" in message else "go"
            sent.append((kind, clock.monotonic()))

        def event(self, deadline):
            message = self.script.pop(0)
            if message["event"] == "probe_end":
                assert sent and sent[-1][0] == "go"  # the child runs only once it has its go
                clock.sleep(burst_s)
            return message

        def kill(self):
            sent.append(("kill", clock.monotonic()))

    judge = judge_module.Judge.__new__(judge_module.Judge)
    judge.link = ChildLink(FakeChild(), GradeResult("x", "cuda", "learner", 1), float("inf"), float("inf"))
    judge.spec = type("S", (), {"id": "x"})()
    judge.variant = type("V", (), {"lang": "cuda", "kind": "cuda"})()
    return judge, sent


def _record():
    from grader.core.records import Timing

    return Timing(case="n=1", learner_ms=2.0, solution_ms=None, torch_ms=None, solution_source="calibration")


def test_the_grader_starts_its_clock_before_it_lets_a_burst_run(monkeypatch):
    """Grader side: each probe_start is answered with a go after the clock starts; a burst's wall is at least
    the time the child spent after the go."""
    from grader.checks import speed

    judge, sent = _probe_judge(burst_s=0.02)
    seen = {}
    monkeypatch.setattr(speed, "probe_disagrees", lambda record, probe: seen.update(probe) or None)
    assert judge._cross_check_probe(_record()) is None
    assert [kind for kind, _ in sent] == ["go"] * (1 + 6) + ["probe_again=False"]  # the probe's go, one a burst, done
    assert seen["learner"]["wall_s"] >= 0.02 and seen["baseline"]["wall_s"] >= 0.02


def test_a_traced_probe_writes_one_line_with_every_burst(tmp_path, monkeypatch):
    import json

    from grader.checks import speed

    monkeypatch.setenv("KCOURSE_PROBE_TRACE", str(tmp_path / "trace.jsonl"))
    monkeypatch.setattr(speed, "probe_disagrees", lambda record, probe: None)
    judge, _ = _probe_judge()
    assert judge._cross_check_probe(_record()) is None
    entry = json.loads((tmp_path / "trace.jsonl").read_text())
    assert entry["verdict"] == "agrees" and [b["who"] for b in entry["bursts"]] == ["baseline"] * 3 + ["learner"] * 3


def test_a_disagreeing_probe_on_a_gpu_another_program_uses_is_no_accusation(monkeypatch):
    from grader.checks import speed
    from grader.core import gpushare
    from grader.core.records import ERROR
    from grader.run.judge import Finished

    monkeypatch.setattr(speed, "probe_disagrees", lambda record, probe: "your run reported 0.1 ms per call, but ...")
    monkeypatch.setattr(gpushare, "other_gpu_processes", lambda *devices: ["4242 train.py"])
    judge, _ = _probe_judge(rounds=2)
    check = judge._cross_check_probe(_record())
    assert check.name == "speed" and check.status == ERROR and check.details["code"] == "gpu_shared"
    assert "4242 train.py" in check.message and "nvidia-smi" in check.message
    monkeypatch.setattr(gpushare, "other_gpu_processes", lambda *devices: [])
    judge, sent = _probe_judge(rounds=2)
    with pytest.raises(Finished):  # nobody else on the GPU, and the second probe disagrees too: the child's
        judge._cross_check_probe(_record())
    failed = judge.result.checks[-1]
    assert failed.name == "integrity" and failed.details["code"] == "timing_forged" and sent[-1][0] == "kill"
    # an honest wrapper slow on the host looks the same to the clock: the message names that cause too
    assert "was the timer patched? If not, your Python code spends that long on the host" in failed.message


def test_a_probe_that_disagrees_once_is_probed_again_and_a_slow_moment_of_the_gpu_passes(monkeypatch):
    """An H200 once ran everything (the flush-only baseline, the solution, the learner) 2x slow for one probe,
    failing a correct scan as a patched timer 1 grade in 20. A disagreement is probed once more: a slow moment
    passes; a patched timer disagrees again (above)."""
    from grader.checks import speed

    verdicts = ["your run reported 0.3 ms per call, but the grader's own clock measured 0.66 ms", None]
    monkeypatch.setattr(speed, "probe_disagrees", lambda record, probe: verdicts.pop(0))
    judge, sent = _probe_judge(rounds=2)
    assert judge._cross_check_probe(_record()) is None and judge.result.checks == []
    kinds = [kind for kind, _ in sent]
    assert kinds == ["go"] * 7 + ["probe_again=True"] + ["go"] * 6 + ["probe_again=False"]


def test_the_child_probes_again_each_time_the_parent_asks_and_ends_when_it_does_not():
    from grader.child.worker import Worker

    replies, probes = [{"go": True}, {"probe_again": True}, {"probe_again": False}, {"never": "read"}], []

    class Child:
        read_message = lambda self: replies.pop(0)  # noqa: E731
        _probe = lambda self, functions, host: probes.append(host)  # noqa: E731

    Worker._probe_while_asked(Child(), {}, host=False)
    assert probes == [False, False] and replies == [{"never": "read"}]


def test_the_judge_and_a_real_childs_probe_agree_on_every_message_when_it_probes_twice(monkeypatch):
    """Both sides together: the judge's _cross_check_probe against Worker._probe_while_asked (the real child-side
    code, in a thread, over queues in place of the pipes). The first probe disagrees, the second agrees: the child
    probes twice, ends when told, and the grade stands."""
    import queue
    import threading

    from grader.checks import speed
    from grader.child.worker import Worker

    to_child, to_parent = queue.Queue(), queue.Queue()

    class ChildSide:
        device = "cpu"
        events = type("Events", (), {"send": lambda self, kind, **kw: to_parent.put({"event": kind, **kw})})()
        read_message = lambda self: to_child.get(timeout=10)  # noqa: E731
        sync = lambda self: None  # noqa: E731
        _once, _probe = Worker._once, Worker._probe

    class Pipes:
        ready, visible_devices, pid = {"pid": 1}, None, 1
        proc = type("P", (), {"pid": 1})()
        send = lambda self, message: to_child.put(message)  # noqa: E731
        event = lambda self, deadline: to_parent.get(timeout=10)  # noqa: E731

    verdicts = ["your run reported 0.3 ms per call, but the grader's own clock measured 0.66 ms", None]
    monkeypatch.setattr(speed, "probe_disagrees", lambda record, probe: verdicts.pop(0))
    ended = []  # set only when the child-side code returns (a queue timeout in it would end the thread too)
    child = threading.Thread(
        target=lambda: ended.append(Worker._probe_while_asked(ChildSide(), {"learner": lambda: None}, False))
    )
    child.start()
    judge, _ = _probe_judge()
    judge.link.child = Pipes()
    assert judge._cross_check_probe(_record()) is None and judge.result.checks == []
    child.join(timeout=10)
    assert ended == [None] and verdicts == [] and to_child.empty() and to_parent.empty()


def test_a_size_that_only_draws_the_curve_settles_in_a_third_of_the_verdicts_time(monkeypatch):
    """The non-verdict sizes get a third of the budget, and so a third of SETTLED_S: their 40 rounds take
    milliseconds, and waiting out the verdict's 0.25 s at each cost ~0.3 s of every full grade."""
    from types import SimpleNamespace

    clock = [0.0]

    def one_round(functions, flush, reverse, spins):  # a steady kernel: 1 ms of host time a round
        clock[0] += 0.001
        return {name: 1.0 for name in functions}

    monkeypatch.setattr(timing, "_one_round", one_round)
    monkeypatch.setattr(timing, "_warm_up_and_headstart", lambda fn: 1e-4)
    monkeypatch.setattr(timing, "_spin_cycles", lambda: 1000)
    monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    runs = {}
    for budget in (timing.BUDGET_S, timing.BUDGET_S / 3):
        clock[0] = 0.0
        runs[budget] = timing.time_alternating({"a": None, "b": None}, flush=object(), budget_s=budget)["a"]["runs"]
    assert runs == {
        timing.BUDGET_S: 250,
        timing.BUDGET_S / 3: 90,
    }  # checked every 10 rounds once 0.25 s / 0.083 s passed


def test_the_live_line_stops_redrawing_while_the_probe_times_the_bursts():
    """A redraw holds the interpreter in the process whose clock times the bursts: the line is held meanwhile."""
    from grader.run import waiting

    held = []
    line = type("Line", (), {"show": lambda self, *a: None, "hold": lambda self, on: held.append(on)})()
    waiting.attach(line)
    try:
        judge, _ = _probe_judge()
        assert judge._cross_check_probe(_record()) is None and held == [True, False]
    finally:
        waiting.attach(None)
