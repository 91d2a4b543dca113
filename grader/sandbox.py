"""Running the worker in a child process with a time limit, and naming what went wrong if it dies.

The child gets its own process group so a hang is killed with everything it started; its output
(the learner's prints) is captured and trimmed; a missing result file plus the exit status and the
last progress line become a verdict such as "crashed with SIGSEGV while checking n=1000003"."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.paths import course_root

OUTPUT_LIMIT = 4000
# torch's profiler (used to catch torch calls) logs lines like "USDT:2026-.. Sync...cpp:52] profiler_start"
_PROFILER_NOISE = re.compile(r"^(USDT|INFO|WARNING|ERROR):\d{4}-\d\d-\d\d [^\]]*\.cpp:\d+\].*$\n?", re.M)


@dataclass
class Outcome:
    result: dict[str, Any] | None
    returncode: int | None
    timed_out: bool
    output: str
    last_step: str


def trim(text: str, limit: int = OUTPUT_LIMIT) -> str:
    text = _PROFILER_NOISE.sub("", text)
    return text if len(text) <= limit else "... (earlier output trimmed)\n" + text[-limit:]


def run_worker(job: dict[str, Any], timeout_s: float, interpret_triton: bool = False,
               extra_env: dict[str, str] | None = None, wrapper: list[str] | None = None) -> Outcome:
    """Run the worker on `job` (optionally under a tool such as ncu: `wrapper` is its command prefix)."""
    with tempfile.TemporaryDirectory(prefix="kcourse-") as tmp:
        job = dict(job, result_path=str(Path(tmp) / "result.json"), progress_path=str(Path(tmp) / "progress.txt"))
        job_path = Path(tmp) / "job.json"
        job_path.write_text(json.dumps(job))
        env = dict(os.environ, PYTHONUNBUFFERED="1", **(extra_env or {}))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(course_root()), env.get("PYTHONPATH")]))
        if interpret_triton:
            env["TRITON_INTERPRET"] = "1"
        command = [*(wrapper or []), sys.executable, "-m", "grader.worker", str(job_path)]
        proc = subprocess.Popen(command, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=tmp,
                                start_new_session=True)
        timed_out = False
        try:
            output, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            output, _ = proc.communicate()
        except BaseException:  # Ctrl-C: never leave the learner's process running
            _kill_group(proc)
            raise
        result_file, progress_file = Path(job["result_path"]), Path(job["progress_path"])
        result = json.loads(result_file.read_text()) if result_file.exists() else None
        steps = progress_file.read_text().splitlines() if progress_file.exists() else []
        return Outcome(result, proc.returncode, timed_out, trim(output.decode(errors="replace")),
                       steps[-1] if steps else "starting")


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def death_message(outcome: Outcome, timeout_s: float) -> tuple[str, str]:
    """(code, message) for a child that produced no result."""
    where = f" while {outcome.last_step}"
    if outcome.timed_out:
        return "timeout", (f"your code ran past the {timeout_s:g} s limit{where} and was stopped — a loop that never "
                           "ends? (a loop bound that never changes, a barrier not every thread reaches, a spin-wait)")
    code = outcome.returncode or 0
    if code < 0:
        name = signal.Signals(-code).name
        hint = {"SIGSEGV": " — a bad pointer: a device pointer used on the host, or an index past an array?",
                "SIGABRT": " — an assertion or a C++ exception in your code?",
                "SIGFPE": " — an integer division by zero?"}.get(name, "")
        return "crash", f"your code crashed with {name}{where}{hint}"
    return "crash", f"the grading process ended unexpectedly (exit status {code}){where}"
