"""Where a parallel GPU test run's time went, from the GPU lock's log (KCOURSE_GPU_LOCK_LOG, grader/core/gpu_lock.py).

    KCOURSE_GPU_LOCK_LOG=/tmp/lock.jsonl python -m pytest -m gpu -n 12 ...
    python scripts/gpu_lock_report.py /tmp/lock.jsonl

Prints the run's span, the seconds the GPU was held exclusively (timing: one process at a time, so their sum bounds
the run from below), the seconds held and waited for by mode (beside: a grade's references process), and the
tests that held it exclusively longest.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict


def load(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def report(holds: list[dict], top: int = 15) -> str:
    if not holds:
        return "no holds logged"
    start = min(h["asked"] for h in holds)
    end = max(h["asked"] + h["waited"] + h["held"] for h in holds)
    lines = [f"span {end - start:.0f} s, {len(holds)} holds"]
    for mode in ("exclusive", "shared", "beside"):
        mine = [h for h in holds if h["mode"] == mode]
        held = sum(h["held"] for h in mine)
        waited = sum(h["waited"] for h in mine)
        lines.append(f"{mode}: {len(mine)} holds, held {held:.0f} s in all, waited {waited:.0f} s in all")
    per_test: dict[str, float] = defaultdict(float)
    for h in holds:
        if h["mode"] == "exclusive":
            per_test[h["test"] or f"pid {h['pid']}"] += h["held"]
    lines.append("held exclusively longest:")
    for test, held in sorted(per_test.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"  {held:7.1f} s  {test}")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/gpu_lock_report.py LOG (the file KCOURSE_GPU_LOCK_LOG named)")
    print(report(load(sys.argv[1])))
