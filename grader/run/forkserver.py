"""The parent's side of the fork server (grader/child/zygote.py): grading children forked from a process that
imported torch once, for a grader that grades many files, with a GPU or without.

`KCOURSE_FORK_SERVER=1` turns it on: validate, grade-batch and compare call `enable()`, and the test suite sets it.
Children on a GPU are forked too (`KCOURSE_FORK_SERVER_CUDA=0` turns that off): the server imports torch without
creating a CUDA context, and each child creates its own after the fork, as a fresh one does; a server whose probe
child cannot use CUDA after a fork is refused, and its grades start children the ordinary way (what a forked GPU
child saves: docs/measurements.md, session 66).
`watch` starts each child while the learner edits, so it has no start to hide, and a one-shot `kcourse grade`
starts its child before importing torch, so it would gain nothing.
One server runs per environment that must be set before Python starts (the CUDA emulator's preloaded
AddressSanitizer runtime), started on first use and ended with this process. A child it forks is
driven as a `subprocess.Popen` is: `ForkedChild` has `pid`, `stdin`, `poll()` and `wait()`."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

ENV = "KCOURSE_FORK_SERVER"
CUDA_ENV = "KCOURSE_FORK_SERVER_CUDA"
# Read when a process starts (the preloaded runtime; sys.path and the kit the grader is imported from): a server
# per value, so a forked child is the process a fresh one would be.
# KCOURSE_CHILD_DEVICE: a GPU child's server checks at its start that a forked child can use CUDA.
BEFORE_START = ("LD_PRELOAD", "ASAN_OPTIONS", "PYTHONPATH", "KCOURSE_ROOT", "TRITON_INTERPRET", "KCOURSE_CHILD_DEVICE")
MAX_SERVERS = 2  # each holds torch in memory (~300 MB): idle ones beyond this are closed


def enable() -> None:
    """For a command that grades many files: its children come from a fork server (unless KCOURSE_FORK_SERVER=0)."""
    os.environ.setdefault(ENV, "1")


def wanted(device: str, wrapper: list[str] | None, module: str) -> bool:
    return (
        os.environ.get(ENV) == "1"
        and (device == "cpu" or (device == "cuda" and os.environ.get(CUDA_ENV) != "0"))
        and not wrapper
        and module == "grader.child.worker"
        and hasattr(socket, "send_fds")
        and sys.platform.startswith("linux")
    )


class ForkedChild:
    """A forked grading child, as much of subprocess.Popen as sandbox.Child uses."""

    def __init__(self, server: Server, pid: int, stdin_fd: int):
        self.server, self.pid = server, pid
        self.stdin = os.fdopen(stdin_fd, "wb")
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self._settle(self.server.wait(self.pid, time.monotonic()))
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            status = self.server.wait(self.pid, None if timeout is None else time.monotonic() + timeout)
            if status is None and self.server.alive:
                raise subprocess.TimeoutExpired(f"grading child {self.pid}", timeout)
            self._settle(status)
        return self.returncode

    def _settle(self, status: int | None) -> None:
        if status is not None:
            self.returncode = os.waitstatus_to_exitcode(status)
        elif not self.server.alive:
            self.returncode = -signal.SIGKILL  # the server died first: the child ends itself (orphan.py)


class Server:
    """One running fork server and the exits it has reported."""

    def __init__(self, env: dict[str, str]):
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "grader.child.zygote", str(theirs.fileno())],
            stdin=subprocess.DEVNULL,
            env=env,
            pass_fds=(theirs.fileno(),),
            cwd="/",
            start_new_session=True,
        )
        theirs.close()
        self.control, self.lock, self.changed = mine, threading.Lock(), threading.Condition()
        self.forked: dict[int, int] = {}  # request id -> pid, until the request that asked takes it
        self.requests = 0
        self.exits: dict[int, int] = {}
        self.running = 0  # children forked and not yet reported ended
        self.alive = True
        self.ever_forked = False  # a server that ends before its first child refused (zygote.usable)
        threading.Thread(target=self._listen, name="kcourse-fork-server", daemon=True).start()

    def _listen(self) -> None:
        while True:
            try:
                data = self.control.recv(4096)
            except OSError:
                data = b""
            with self.changed:
                if not data:
                    self.alive = False
                    self.changed.notify_all()
                    return
                message = json.loads(data)
                if "forked" in message:
                    self.forked[message["id"]] = message["forked"]
                    self.running += 1
                    self.ever_forked = True
                else:
                    self.exits[message["exited"]] = message["status"]
                    self.running -= 1
                self.changed.notify_all()

    def fork(
        self, env: dict[str, str], cwd: str, fds: tuple[int, int, int], imports: list[str], limit_s: float = 30.0
    ) -> int | None:
        """A child's pid (None if the server is gone): its stdin, output and event fds are handed over; the server
        imports `imports` first (once: its later children have them too)."""
        with self.lock, self.changed:
            if not self.alive:
                return None
            self.requests += 1
            request = {"id": self.requests, "env": env, "cwd": cwd, "imports": imports}
            try:
                socket.send_fds(self.control, [json.dumps(request).encode()], list(fds))
            except OSError:
                return None
            deadline = time.monotonic() + limit_s
            while request["id"] not in self.forked and self.alive and time.monotonic() < deadline:
                self.changed.wait(deadline - time.monotonic())
            return self.forked.pop(request["id"], None)

    def wait(self, pid: int, deadline: float | None) -> int | None:
        """The child's wait status once the server reports its exit; None past the deadline or if the server is gone."""
        with self.changed:
            while pid not in self.exits:
                left = None if deadline is None else deadline - time.monotonic()
                if (left is not None and left <= 0) or not self.alive:
                    return None
                self.changed.wait(left)
            return self.exits.pop(pid)

    def close(self) -> None:
        """End the server (its children, if any, then end themselves: call it when none runs)."""
        try:
            self.control.shutdown(socket.SHUT_RDWR)  # the server reads the end; our listening thread wakes
        except OSError:
            pass
        self.control.close()
        self.proc.wait()


_servers: dict[tuple, Server] = {}  # in order of last use
_refused: set[tuple] = set()  # environments whose server ended before forking a child: started the ordinary way
_servers_lock = threading.Lock()


def spawn(
    env: dict[str, str], cwd: str, output_fd: int, event_fd: int, imports: list[str] | None = None
) -> ForkedChild | None:
    """A grading child forked by the server for this environment (started now if none runs), or None: the
    caller then starts one the ordinary way. `imports`: modules the server imports before forking it."""
    key = tuple((name, env.get(name)) for name in BEFORE_START)
    with _servers_lock:
        if key in _refused:
            return None
        server = _servers.pop(key, None)
        if server is not None and not server.alive and not server.ever_forked:
            _refused.add(key)
            server.close()
            return None
        if server is None or not server.alive:
            server = Server({k: v for k, v in env.items() if k != "TMPDIR"})
        _servers[key] = server
        _close_idle()
    stdin_read, stdin_write = os.pipe()
    try:
        pid = server.fork(env, cwd, (stdin_read, output_fd, event_fd), imports or [])
    finally:
        os.close(stdin_read)
    if pid is None:
        os.close(stdin_write)
        return None
    return ForkedChild(server, pid, stdin_write)


def _close_idle() -> None:
    """Close the least recently used servers beyond MAX_SERVERS that have no child running."""
    for key in list(_servers)[:-MAX_SERVERS]:
        if _servers[key].running == 0:
            _servers.pop(key).close()
