"""The timing probe: the grader's own clock against the child's claimed timing (grader/run/judge.py calls it
after the verdict size is timed). The child runs bursts of each contestant's calls, each only after this
process's go; the wall time of each burst, taken here, must agree with the medians the child reported
(speed.probe_disagrees). A patched timer in learner code cannot move this clock."""

from __future__ import annotations

import os
import time

from grader.checks import speed
from grader.core import gpushare, hostload
from grader.core.records import ERROR, Check, GradeResult, Timing
from grader.core.spec import ExerciseSpec, Variant
from grader.core.vocabulary import CheckName, Code, Event, Order
from grader.run import waiting
from grader.run.child_link import ChildLink


def cross_check(
    link: ChildLink, spec: ExerciseSpec, variant: Variant, result: GradeResult, record: Timing
) -> Check | None:
    """Fails the grade where the grader's own clock disagrees with the child's timing; where another
    program shares the GPU (gpushare.py), or the host kept the learner's process waiting for a CPU during
    the burst the verdict reads (speed.starved), returns a speed check that says so and judges nothing.

    A disagreement is probed once more before it counts: a moment when the whole GPU runs slow (baseline,
    solution and learner alike) passes the second look; a patched timer disagrees again."""
    child = link.child
    pid = child.pid  # sent before learner code ran
    child.send({Order.GO: True})
    link.quiet = True  # no terminal writes while this process's clock times the bursts
    waiting.hold(True)
    disagreement, starved = _round(link, spec, variant, record, pid)
    if disagreement:
        child.send({Order.PROBE_AGAIN: True})
        disagreement, starved = _round(link, spec, variant, record, pid)
    link.quiet = False
    waiting.hold(False)
    if not disagreement:
        child.send({Order.PROBE_AGAIN: False})  # the child ends as after any grade
        return None
    sharers = gpushare.other_gpu_processes(
        *gpushare.nvidia_smi_ids(child.visible_devices, (result.device or {}).get("uuid"))
    )
    if sharers:
        return Check(
            CheckName.SPEED,
            ERROR,
            f"not judged: another program used this GPU while your kernel was timed "
            f"({', '.join(sharers[:3])}), and the grader's clock and your timing disagree ({disagreement}); "
            "grade again when `nvidia-smi` shows the GPU free",
            {"code": Code.GPU_SHARED},
        )
    if starved:
        return _host_busy(disagreement, starved)
    link.fail(
        CheckName.INTEGRITY,
        disagreement + ": was the timer patched? If not, your Python code spends that long "
        "on the host each call while the GPU waits (a device-properties query, an allocation, a compile or "
        "a .item() in every call): do such work once and keep it",
        code=Code.TIMING_FORGED,
    )
    return None


def _host_busy(disagreement: str, starved: dict[str, float]) -> Check:
    """No speed verdict: the probe disagreed while the host kept the learner's process waiting for a CPU."""
    load = f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs" if hasattr(os, "getloadavg") else ""
    return Check(
        CheckName.SPEED,
        ERROR,
        f"not judged: this machine's CPUs were too busy to check your timing: during the grader's check of "
        f"{starved['runs']} calls ({1000 * starved['wall_s']:.0f} ms) your process waited "
        f"{1000 * starved['waited_s']:.0f} ms for a CPU ({load}), and the grader's clock and your timing disagree "
        f"({disagreement}); grade again when the machine is quieter (`uptime` shows its load)",
        {"code": Code.HOST_BUSY, **starved},
    )


def _round(
    link: ChildLink, spec: ExerciseSpec, variant: Variant, record: Timing, pid: int
) -> tuple[str | None, dict[str, float] | None]:
    """One probe: each contestant's bursts timed by this process's clock (the child has its go); what
    speed.probe_disagrees says of them, and speed.starved of the waits for a CPU during them."""
    bursts, waits, traced, trace = [], [], [], _trace_file()
    contestants = 3 if record.solution_source == "live solution" else 2
    for _ in range(contestants * speed.PROBE_BURSTS):
        start = link.expect(Event.PROBE_START)
        # the /proc reads come before the clock starts and after it stops: they never lengthen a burst
        before = (hostload.main_thread_times(pid), hostload.own_thread_times())
        begun = time.monotonic()
        # the child waits for this go: a burst cannot run before the clock that times it has started (were
        # it sent before, a grader slow to wake, say under a learner's CPU burners, would see it shorter)
        link.child.send({Order.GO: True})
        end = link.expect(Event.PROBE_END)
        wall = time.monotonic() - begun
        after = (hostload.main_thread_times(pid), hostload.own_thread_times())
        who, runs = str(start.get("who")), int(start.get("runs", 1))
        bursts.append((who, wall, runs))
        waits.append(hostload.cpu_wait(before, after))
        if trace:
            traced.append(hostload.burst_trace(who, runs, wall, before[0], after[0], before[1], after[1], end))
    fastest = speed.fastest_bursts(bursts)
    disagreement = speed.probe_disagrees(record, fastest)
    if trace:
        hostload.write_trace(
            trace,
            {
                "exercise": spec.id,
                "lang": variant.lang,
                "claimed_ms": record.learner_ms,
                "verdict": disagreement or "agrees",
                "bursts": traced,
            },
        )
    return disagreement, speed.starved(record, fastest, bursts, waits)


def _trace_file() -> str | None:
    """KCOURSE_PROBE_TRACE=FILE: every probe's bursts, with the host's accounting, appended to FILE as JSON lines
    (a diagnostic for instructors grading on a busy host; verdicts are unchanged)."""
    return os.environ.get("KCOURSE_PROBE_TRACE") or None
