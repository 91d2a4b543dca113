"""Feedback at the learner's own line (issue 41): a Triton error shown at the kernel's line with Python's own
message and suggestion, NaN/inf counted and placed instead of a max error that ignores them, nvcc's missing
";" traced to the line before, and a hang at import stopped at the spec's limit with "still running" lines."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
import time

import torch
from conftest import ROOT, submission

from grader.checks.checking import compare
from grader.core.discovery import resolve
from grader.core.spec import Tolerance
from grader.run import waiting
from grader.run.grade import grade
from grader.toolchain.build import format_compiler_errors


def failing(result):
    return next(c for c in result.checks if c.status in ("failed", "error"))


def grade_softmax(name: str, **kwargs):
    return grade(resolve(("softmax",), lang="triton"), submission=submission(name), seed=5, **kwargs)


def test_a_typo_in_a_kernel_names_the_kernels_line_and_pythons_suggestion():
    check = failing(grade_softmax("feedback_softmax_typo.py"))
    assert check.details["code"] == "exception"
    first = check.message.splitlines()[0]
    assert "AttributeError: module 'triton.language' has no attribute 'expp'. Did you mean: 'exp'?" in first, first
    assert "InterpreterError" not in check.message
    assert "feedback_softmax_typo.py:21 in softmax:" in check.message  # the launch, then the kernel's line
    assert (
        check.message.splitlines()[-2]
        .strip()
        .startswith("feedback_softmax_typo.py:13 in softmax_kernel: numerator = tl.expp(")
    ), check.message
    assert check.message.splitlines()[-1].strip() == "^^^^^^^"  # under `tl.expp`


def test_a_rank_error_in_a_kernel_names_the_kernels_line_and_tritons_message():
    check = failing(grade_softmax("feedback_softmax_rank.py"))
    assert "ValueError: too many indices for tensor of rank 0" in check.message.splitlines()[0]
    assert "feedback_softmax_rank.py:13 in softmax_kernel: row_max = tl.max(x, axis=0)[None, :]" in check.message


COMPILE = textwrap.dedent("""
    import importlib.util, sys, warnings
    from pathlib import Path
    warnings.simplefilter("ignore")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from grader.child.worker import learner_error
    path = Path(sys.argv[1])
    spec = importlib.util.spec_from_file_location("kernel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    signature = {"x_ptr": "*fp32", "out_ptr": "*fp32", "x_row_stride": "i32", "out_row_stride": "i32", "n_cols": "i32",
                 "BLOCK": "constexpr"}
    try:  # the front end runs before any GPU is needed
        triton.compile(ASTSource(fn=module.softmax_kernel, signature=signature, constexprs={(5,): 8}),
                       target=GPUTarget("cuda", 90, 32))
    except Exception as exc:
        print(type(exc).__name__)
        print(learner_error(exc, path))
""")


def test_a_compilation_error_on_a_gpu_is_shown_at_the_kernels_line_too():
    """On a GPU the typo is Triton's CompilationError, which holds the kernel's source and the failing node."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    command = [sys.executable, "-c", COMPILE, str(submission("feedback_softmax_typo.py"))]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    lines = done.stdout.splitlines()
    assert lines[0] == "CompilationError", done.stdout + done.stderr
    assert lines[1] == "AttributeError: module 'triton.language' has no attribute 'expp'. Did you mean: 'exp'?"
    assert (
        lines[2].strip() == "feedback_softmax_typo.py:13 in softmax_kernel: numerator = tl.expp(x - tl.max(x, axis=0))"
    )


def test_nan_is_counted_and_placed_without_a_max_error_of_zero():
    check = failing(grade_softmax("feedback_softmax_nan.py"))
    assert check.details["code"] == "mismatch" and check.details["nan"] == 3
    assert "3 of 15 elements of out wrong: 3 NaN (first at index [0, 3]" in check.message, check.message
    assert "every other element is within tolerance" in check.message
    assert "max abs error" not in check.message and check.details["max_abs_error"] is None


def test_nan_inf_and_other_wrong_values_are_told_apart():
    ref = torch.ones(3, 8, dtype=torch.float64)
    out = torch.ones(3, 8)
    out[0, 5] = out[2, 1] = float("nan")
    out[1, 1] = float("inf")
    out[2, 7] = 1.5
    result = compare("y", out, ref, Tolerance(1e-5, 1e-5), "M=3 N=8")
    assert result.message == (
        "M=3 N=8: 4 of 24 elements of y wrong: 2 NaN (first at index [0, 5], expected 1), "
        "1 inf (first at index [1, 1], expected 1); elsewhere 1 more wrong: max abs error 0.5, "
        "max rel error 0.5 (tolerance atol 1e-05, rtol 1e-05); first at index [2, 7]: got 1.5, "
        "expected 1"
    )
    assert (result.details["nan"], result.details["inf"], result.details["other_wrong"]) == (2, 1, 1)


def test_a_missing_semicolon_is_traced_to_the_line_before():
    source = submission("feedback_vector_add_missing_semicolon.cu")
    log = (
        f'{source}(6): error: expected a ";"\n      if (i < n) c[i] = a[i] + b[i];\n      ^\n\n'
        f'1 error detected in the compilation of "{source}".\n'
    )
    first = format_compiler_errors(log, source).splitlines()[0]
    assert first == (
        'feedback_vector_add_missing_semicolon.cu:6: error: expected a ";" (reported at the start of '
        "line 6: likely missing at the end of line 5: `int i = blockIdx.x * blockDim.x + threadIdx.x`)"
    )
    mid_line = log.replace("      ^", "             ^")  # a caret inside the line: the line itself is wrong
    assert "likely missing" not in format_compiler_errors(mid_line, source)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_hang_at_import_stops_at_the_specs_limit_with_still_running_lines(monkeypatch):
    """The spec's timeout_s bounds loading (the interpreter's multiple is for kernels), said while it waits."""
    target = resolve(("softmax",), lang="triton")
    monkeypatch.setattr(target.variant, "timeout_s", 2)  # the run's limit on the CPU: 2 s x the interpreter factor
    monkeypatch.setattr(waiting, "STILL_RUNNING_S", 0.5)
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    begun = time.monotonic()
    result = grade(target, submission=submission("feedback_softmax_import_hang.py"), seed=5)
    waited = time.monotonic() - begun - result.phases.get("start", 0.0)
    check = failing(result)
    assert (check.name, check.details["code"]) == ("run", "load_timeout")
    assert check.message.startswith("importing feedback_softmax_import_hang.py ran past the 2 s limit"), check.message
    assert waited < 2 + 5, result.phases
    lines = terminal.getvalue().splitlines()
    assert lines and all(line.startswith("still running: ") for line in lines), lines
    assert "(stopped at 2 s) — loading your code" in lines[0]


def test_still_running_lines_only_at_a_terminal():
    assert not waiting.waiting_lines_wanted(io.StringIO())
    assert waiting.waiting_lines_wanted(Terminal())
