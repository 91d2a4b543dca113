"""Where a parallel GPU test run's time went, from the GPU lock's log (KCOURSE_GPU_LOCK_LOG, grader/core/gpu_lock.py).

    KCOURSE_GPU_LOCK_LOG=/tmp/lock.jsonl KCOURSE_TEST_PHASES_LOG=/tmp/phases.jsonl python -m pytest -m gpu -n 12 ...
    python scripts/gpu_lock_report.py /tmp/lock.jsonl [/tmp/phases.jsonl]

Prints the run's span, the seconds the GPU was held exclusively (timing: one process at a time, so their sum bounds
the run from below), the seconds held and waited for by mode (beside: a grade's references process; paused and
stepped_out: a grade's shared hold let go for a batch of timers, or while its child compiled, `waited` being how
long), how the span divides between the GPU held alone, shared and held by none (`occupancy`), and the tests that held
it exclusively longest. With the tests' phases log (tests/conftest.py: a line per grade), each phase's seconds summed
over the run's grades and the grades longest in it.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict


def load(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def favoured(holds: list[dict]) -> str:
    """How many exclusive holds raised their timer's priority (gpu_lock.FAVOURED_NICE): none where the host forbids it."""
    logged = [h["favoured"] for h in holds if h["mode"] == "exclusive" and "favoured" in h]
    if not logged:
        return "timers favoured: not logged (a log from before the field)"
    return f"timers favoured: {sum(1 for n in logged if n)} of {len(logged)} exclusive holds raised a priority"


def compiles_ended_early(holds: list[dict], top: int = 5) -> list[str]:
    """The compile passes (compile_steps.compile_first) that an exception ended early: their grades compiled the rest at
    their first runs, as before the pass. A pass should end early only where the learner's code fails anyway."""
    failed = [h for h in holds if h["mode"] == "stepped_out" and h.get("failed")]
    lines = [f"compile passes ended early: {len(failed)}"]
    return lines + [f"  {h['test'] or 'pid ' + str(h['pid'])}: {h['failed'][:160]}" for h in failed[:top]]


def report(holds: list[dict], top: int = 15) -> str:
    if not holds:
        return "no holds logged"
    start = min(h["asked"] for h in holds)
    end = max(h["asked"] + h["waited"] + h["held"] for h in holds)
    lines = [f"span {end - start:.0f} s, {len(holds)} holds"]
    for mode in ("exclusive", "shared", "beside", "paused", "stepped_out"):
        mine = [h for h in holds if h["mode"] == mode]
        held = sum(h["held"] for h in mine)
        waited = sum(h["waited"] for h in mine)
        lines.append(f"{mode}: {len(mine)} holds, held {held:.0f} s in all, waited {waited:.0f} s in all")
    lines.append(favoured(holds))
    lines += compiles_ended_early(holds)
    alone, shared, waited, idle = occupancy(holds)
    lines.append(
        f"the GPU: held alone (timing) {alone:.0f} s, shared by numerics {shared:.0f} s (a timer waiting in "
        f"{waited:.0f} s of them), held by none {idle:.0f} s"
    )
    per_test: dict[str, float] = defaultdict(float)
    for h in holds:
        if h["mode"] == "exclusive":
            per_test[h["test"] or f"pid {h['pid']}"] += h["held"]
    lines.append("held exclusively longest:")
    for test, held in sorted(per_test.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"  {held:7.1f} s  {test}")
    own = sorted(((own_shared(h, holds), h["test"] or f"pid {h['pid']}") for h in holds if h["mode"] == "shared"))
    if own:
        middle = own[len(own) // 2][0]
        lines.append(
            f"shared holds less the timing nested in them: {sum(s for s, _ in own):.0f} s, median {middle:.1f} s"
        )
        lines += [f"  {seconds:7.1f} s  {test}" for seconds, test in own[::-1][:5]]
    return "\n".join(lines)


def occupancy(holds: list[dict]) -> tuple[float, float, float, float]:
    """Over the run's span, the seconds the GPU was held alone (any exclusive hold), shared (shared or beside holds,
    none exclusive), shared while a timer waited for it, and held by none: where a tier's wall time goes, the
    serial part (alone) and what the timers' waits cost (shared with a timer waiting: numerics draining)."""
    events = []
    for h in holds:
        got = h["asked"] + h["waited"]
        kind = "alone" if h["mode"] == "exclusive" else "shared" if h["mode"] in ("shared", "beside") else None
        if kind:
            events += [(got, kind, 1), (got + h["held"], kind, -1)]
        if h["mode"] in ("paused", "stepped_out"):  # a shared hold let go for a while, inside its span
            events += [(h["asked"], "shared", -1), (got, "shared", 1)]
        if h["mode"] == "exclusive" and h["waited"] > 0:
            events += [(h["asked"], "waiting", 1), (got, "waiting", -1)]
    events.sort(key=lambda e: (e[0], e[2]))  # at one instant, ends before starts
    count = {"alone": 0, "shared": 0, "waiting": 0}
    spent = {"alone": 0.0, "shared": 0.0, "waited": 0.0, "idle": 0.0}
    for (at, kind, step), (after, _, _) in zip(events, events[1:] + events[-1:]):
        count[kind] += step
        seconds = after - at
        state = "alone" if count["alone"] else "shared" if count["shared"] else "idle"
        spent[state] += seconds
        if state == "shared" and count["waiting"]:
            spent["waited"] += seconds
    return spent["alone"], spent["shared"], spent["waited"], spent["idle"]


def own_shared(hold: dict, holds: list[dict]) -> float:
    """A shared hold's own seconds: less the exclusive holds of its process inside it (a grade moving to timing lets
    its shared hold go while it waits and times, but the hold's context spans both)."""
    got = hold["asked"] + hold["waited"]
    nested = [
        h["waited"] + h["held"]
        for h in holds
        if h["mode"] == "exclusive" and h["pid"] == hold["pid"] and got <= h["asked"] <= got + hold["held"]
    ]
    return hold["held"] - sum(nested)


def phases_report(grades: list[dict], top: int = 3) -> str:
    """Each phase's sum over the grades, longest first, with the grades that spent most in it."""
    if not grades:
        return "no grades logged"
    totals: dict[str, float] = defaultdict(float)
    for grade in grades:
        for phase, seconds in grade["phases"].items():
            totals[phase] += seconds
    wall = sum(g.get("wall", 0.0) for g in grades)
    lines = [f"{len(grades)} grades, {wall:.0f} s of wall time in all, their phases summed:"]
    for phase, total in sorted(totals.items(), key=lambda kv: -kv[1]):
        longest = sorted(grades, key=lambda g: -g["phases"].get(phase, 0.0))[:top]
        names = ", ".join(f"{g['exercise']} {g['phases'][phase]:.0f} s" for g in longest if phase in g["phases"])
        lines.append(f"  {phase:>14} {total:7.0f} s  (longest: {names})")
    counted = [g["children"] for g in grades if "children" in g]  # logs from before the field have none
    if counted:
        forked, fresh = (sum(c[kind] for c in counted) for kind in ("forked", "fresh"))
        lines.append(f"grading children: {forked} forked by the fork server, {fresh} started fresh")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(
            "usage: python scripts/gpu_lock_report.py LOG [PHASES] (the files KCOURSE_GPU_LOCK_LOG and "
            "KCOURSE_TEST_PHASES_LOG named)"
        )
    print(report(load(sys.argv[1])))
    if len(sys.argv) == 3:
        print(phases_report(load(sys.argv[2])))
