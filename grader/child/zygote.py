"""The fork server: one process that has imported torch and the worker, and forks a grading child per grade.

A grading child spends about 1.5 s of CPU importing torch before it can say "ready". A process that grades
many files, with a GPU or without (`kcourse validate`, `compare`, `grade-batch`, the test suite), starts this
server once (`python -m grader.child.zygote CONTROL_FD`, from grader/run/forkserver.py) and asks it for each
child: the forked child starts where a fresh one would be after its imports, runs `worker.main` exactly as
`python -m grader.child.worker` does, and enters the box itself when its job arrives.

A process that has created a CUDA context cannot fork children that use CUDA, so the server never creates one: a
GPU child's server (KCOURSE_CHILD_DEVICE=cuda) imports torch and Triton only, leaves a grade's first-use imports
to the child (torch.compile's may ask the driver how many GPUs there are, which marks later forks unusable), and
first forks a probe that creates a context (`usable`); if the probe fails the server ends, and the parent starts
those children the ordinary way. The server never runs learner code and never touches torch beyond importing it
(no thread pool is started before a fork).

The control socket (SOCK_SEQPACKET: one JSON message per packet) carries:
- from the parent: {"id": n, "env": {...}, "cwd": "...", "imports": [...]} with three file descriptors (the child's
  stdin, its output file, its event pipe); the server imports `imports` (op_checks.import_first_use) before it forks;
- to the parent: {"forked": pid, "id": n} for each request, then {"exited": pid, "status": waitstatus} when it ends.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import tempfile

MAX_MESSAGE = 1 << 20  # a request is the child's environment: a few KiB


def serve(control: socket.socket) -> None:
    """Fork a child per request, report each one's end, and stop when the parent closes the socket."""
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wake-up fd hears of each exit
    while True:
        ready, _, _ = select.select([control, wake_read], [], [])
        if wake_read in ready:
            os.read(wake_read, 4096)
            report_exits(control)
        if control in ready and not answer(control, wake_read, wake_write):
            return


def report_exits(control: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        control.send(json.dumps({"exited": pid, "status": status}).encode())


def answer(control: socket.socket, *own_fds: int) -> bool:
    """One request: fork its child. False when the parent has gone (the socket closed)."""
    data, fds, _, _ = socket.recv_fds(control, MAX_MESSAGE, 3)
    if not data:
        return False
    request = json.loads(data)
    from grader.checks import op_checks

    if not on_gpu():
        op_checks.import_first_use(request.get("imports", []))
    in_session, set_up = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(in_session)
        become_child(request, fds, control, own_fds + (set_up,))
    os.close(set_up)
    os.read(in_session, 1)  # EOF once the child has its own session: from then on the parent can kill its group
    os.close(in_session)
    for fd in fds:
        os.close(fd)
    control.send(json.dumps({"forked": pid, "id": request["id"]}).encode())
    return True


def become_child(request: dict, fds: list[int], control: socket.socket, own_fds: tuple[int, ...]) -> None:
    """In the forked child: the process `python -m grader.child.worker` would be, then the worker itself."""
    try:
        stdin, output, events = fds
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        control.close()
        os.setsid()  # its own process group: a hang is killed with everything it started
        for fd in own_fds:  # the last is the pipe the server waits on until this session exists
            os.close(fd)
        os.dup2(stdin, 0)
        os.dup2(output, 1)
        os.dup2(output, 2)
        os.close(stdin)
        os.close(output)
        os.chdir(request["cwd"])
        sys.path[0] = request["cwd"]  # `python -m` puts the start folder first on sys.path: the child's own
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None  # TMPDIR is this child's scratch folder, read again on first use
        from grader.child import worker

        sys.argv = [worker.__file__, str(events)]  # as `python -m grader.child.worker EVENT_FD` has it
        worker.main(events)  # ends with os._exit
    finally:
        os._exit(70)


def on_gpu() -> bool:
    return os.environ.get("KCOURSE_CHILD_DEVICE") == "cuda"


def usable() -> bool:
    """Whether a child forked now can create a CUDA context (nothing imported so far has created one here)."""
    pid = os.fork()
    if pid == 0:
        try:
            import torch

            torch.zeros(1, device="cuda")
            os._exit(0)
        finally:
            os._exit(1)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def main(control_fd: int) -> None:
    import triton.language  # noqa: F401  (TRITON_INTERPRET=1 is in this server's environment, as in its children)

    try:
        import triton.experimental.gluon  # noqa: F401  (the interpreter's first launch imports it: every Triton grade)
    except ImportError:  # a Triton without it
        pass

    from grader.child import worker  # noqa: F401  (torch and everything a grade imports, paid once)

    if on_gpu() and not usable():
        print(
            "kcourse fork server: a forked child cannot use CUDA here; children start the ordinary way", file=sys.stderr
        )
        sys.exit(3)

    # No thread is started here (a fork copies only the calling thread): the server ends when its parent closes
    # the socket, or dies; its children then see their parent gone (orphan.py) and end themselves.
    serve(socket.socket(fileno=control_fd))
    sys.exit(0)


if __name__ == "__main__":
    main(int(sys.argv[1]))
