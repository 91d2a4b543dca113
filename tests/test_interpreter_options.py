"""The grading child's Triton interpreter without the work it throws away (grader/child/interpreter.py): its dead
overflow checks, and the patching of triton.language again at every helper call inside a launch. The same results,
without their cost (docs/measurements.md, sessions 61-62)."""

import subprocess
import sys

import pytest
from conftest import ROOT


def run(probe: str, mode: str) -> str:
    """What the probe printed, run in a fresh Python (the interpreter's patches are process-wide)."""
    done = subprocess.run([sys.executable, "-c", probe, mode], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


PROBE = """import os, sys
os.environ["TRITON_INTERPRET"] = "1"
import torch, triton, triton.language as tl
from triton.runtime import interpreter

@triton.jit
def overflow(p, o):
    x = tl.load(p + tl.arange(0, 4))
    tl.store(o + tl.arange(0, 4), x * 100000 + x)  # int32 overflow: wraps, as on a GPU without debug

if sys.argv[1] == "dropped":
    from grader.child.interpreter import drop_dead_overflow_checks
    drop_dead_overflow_checks()
p = torch.full((4,), 100000, dtype=torch.int32)
o = torch.empty_like(p)
overflow[(1,)](p, o)
print(interpreter.interpreter_builder.options.sanitize_overflow, o.tolist())
"""


@pytest.mark.slow
def test_without_the_overflow_checks_an_overflowing_kernel_gives_what_it_gave_with_them():
    (checked, with_checks), (dropped, without) = (run(PROBE, mode).split(" ", 1) for mode in ("as_is", "dropped"))
    assert (checked, dropped) == ("True", "False")  # the checks were built, then not
    assert with_checks == without == "[1410165408, 1410165408, 1410165408, 1410165408]\n"


HELPERS = """import os, sys
os.environ["TRITON_INTERPRET"] = "1"
import torch, triton, triton.language as tl
from triton.language import core
from triton.runtime import interpreter

@triton.jit
def add_one(x):
    return x + 1

@triton.jit
def twice(x):  # a helper that calls a helper
    return add_one(add_one(x)) * 2

@triton.jit
def through_core(x):  # through triton.language.core, which Triton patches too
    return core.maximum(x, 0.0)

@triton.jit
def kernel(p, o, ROUNDS: tl.constexpr):
    offs = tl.program_id(0) * 8 + tl.arange(0, 8)
    x = tl.load(p + offs)
    for _ in range(ROUNDS):
        x = twice(x) - 5.0
    tl.store(o + offs, through_core(x))

patches = []  # the calls that patch (Triton's own _patch_lang)
patch_lang = interpreter._patch_lang
interpreter._patch_lang = lambda fn: patches.append(fn.__name__) or patch_lang(fn)
if sys.argv[1] == "once":
    from grader.child.interpreter import patch_language_once_per_launch
    patch_language_once_per_launch()
p = torch.arange(-16, 16, dtype=torch.float32)
o = torch.empty_like(p)
kernel[(4,)](p, o, ROUNDS=3)
kernel[(4,)](p, o, ROUNDS=3)
print(tl.load.__name__, len(patches), o.tolist())
"""


@pytest.mark.slow
def test_a_launch_patches_the_language_once_and_its_helpers_give_what_they_gave_patched_at_each_call():
    (load_after, every_call, expected), (load_once, once, got) = (
        run(HELPERS, mode).split(" ", 2) for mode in ("as_is", "once")
    )
    assert got == expected and load_after == load_once == "load"  # triton.language restored after each launch
    # per launch: the kernel, then in each of 4 programs 3 rounds of twice and 2 add_one, and 1 through_core
    assert int(every_call) == 2 * (1 + 4 * (3 * 3 + 1))
    assert int(once) == 2  # per launch: the kernel's (this file's globals hold tl and core: both patched at once)
