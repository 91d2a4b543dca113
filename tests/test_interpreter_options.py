"""The grading child's Triton interpreter without its dead overflow checks (grader/child/worker.py's
drop_dead_overflow_checks): the same results, without the checks' cost (docs/measurements.md, session 61)."""

import subprocess
import sys

import pytest
from conftest import ROOT

PROBE = """import os, sys
os.environ["TRITON_INTERPRET"] = "1"
import torch, triton, triton.language as tl
from triton.runtime import interpreter

@triton.jit
def overflow(p, o):
    x = tl.load(p + tl.arange(0, 4))
    tl.store(o + tl.arange(0, 4), x * 100000 + x)  # int32 overflow: wraps, as on a GPU without debug

if sys.argv[1] == "dropped":
    from grader.child.worker import drop_dead_overflow_checks
    drop_dead_overflow_checks()
p = torch.full((4,), 100000, dtype=torch.int32)
o = torch.empty_like(p)
overflow[(1,)](p, o)
print(interpreter.interpreter_builder.options.sanitize_overflow, o.tolist())
"""


@pytest.mark.slow
def test_without_the_overflow_checks_an_overflowing_kernel_gives_what_it_gave_with_them():
    def run(mode):
        done = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, cwd=ROOT)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.split(" ", 1)

    (checked, with_checks), (dropped, without) = run("as_is"), run("dropped")
    assert (checked, dropped) == ("True", "False")  # the checks were built, then not
    assert with_checks == without == "[1410165408, 1410165408, 1410165408, 1410165408]\n"
