"""The sandboxed child of `kcourse capstone` and `kcourse block`: `python -m grader.capstone.child EVENT_FD`.

It speaks the grader's worker protocol (sandbox.Child): warms up, says "ready", reads one job line on stdin,
answers with JSON-line events on its pipe (step, progress, run, block), then "done". A crash, a hang or a
CUDA fault of the learner's code ends this process, never the grader's: the parent turns that into a verdict."""

from __future__ import annotations

import json
import os
import sys
import traceback

from grader.core.vocabulary import Event


def main(event_fd: int) -> None:
    from grader.child.orphan import exit_with_parent
    from grader.child.worker import Events, warm_up

    exit_with_parent()
    events = Events(event_fd)
    device = os.environ.get("KCOURSE_CHILD_DEVICE", "cpu")
    if device == "cpu":  # the tiny model's ops are too small to share: threads only contend (0.8 s a step vs 25 ms)
        import torch

        torch.set_num_threads(1)
    try:
        events.send(Event.READY, device=warm_up(device), pid=os.getpid())
        line = sys.stdin.readline()
        if line:
            from grader.capstone import train

            job = dict(json.loads(line), device=device)
            if job.get("box"):  # before any learner kernel loads (box.py)
                from grader.child import box

                box.enter(box.Policy(**job.pop("box")))
            {"capstone": train.capstone, "block": train.block_check}[job["mode"]](job, events.send)
    except BaseException as exc:  # a grader bug, or learner code escaping every guard: still say what happened
        events.send(Event.ERROR, message=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc()[-4000:])
    events.send(Event.DONE)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip interpreter teardown: a broken CUDA context can hang it


if __name__ == "__main__":
    main(int(sys.argv[1]))
