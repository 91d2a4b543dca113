"""A grading child ends itself when the process that started it is gone.

The child runs in its own session (so a hang is killed with everything it started), which also means
nothing kills it when its parent dies: a Dask worker killed mid-task, or a `kcourse grade` stopped with
SIGKILL, would leave a learner's hanging kernel holding the GPU for the rest of its time limit or forever.
Linux's PR_SET_PDEATHSIG is not used: it fires when the parent *thread* exits, and Dask runs tasks on
pool threads that come and go. Polling getppid() from a daemon thread works on every POSIX system and
does not depend on which thread started us."""

from __future__ import annotations

import os
import signal
import threading
import time

POLL_S = 1.0


def exit_with_parent(poll_s: float = POLL_S) -> threading.Thread:
    """Start a daemon thread that kills this process group once our parent has exited (we get reparented)."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os.killpg(os.getpgrp(), signal.SIGKILL)  # the learner's own subprocesses go too

    thread = threading.Thread(target=watch, name="kcourse-exit-with-parent", daemon=True)
    thread.start()
    return thread
