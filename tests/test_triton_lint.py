"""A Triton kernel that reads a plain global number runs under the interpreter and does not compile on a GPU
(seen on the H200 with fusion's solution): the CPU tier fails it with the fix, and no kit file has one."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ROOT

from grader.core.discovery import resolve
from grader.run.grade import grade
from grader.toolchain.triton_lint import plain_globals_in_kernels

KIT_TRITON_FILES = sorted(
    p
    for folder in ("exercises", "solutions", "tests/fixtures")
    if (ROOT / folder).is_dir()
    for p in (ROOT / folder).rglob("*.py")
    if "triton.jit" in p.read_text(errors="replace")
)

KERNEL = """
import triton
import triton.language as tl

SQRT1_2 = {value}
BLOCK = 1024
helper = tl.constexpr(3)

@triton.jit
def k(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets) * SQRT1_2 * helper
    tl.store(x_ptr + offsets, x)
"""


def test_a_plain_global_number_read_in_a_kernel_is_found_with_its_line():
    found = plain_globals_in_kernels(KERNEL.format(value="0.7071067811865476"))
    assert [(f.kernel, f.name, f.line) for f in found] == [("k", "SQRT1_2", 5)]  # BLOCK is a parameter there


def test_a_constexpr_global_is_fine():
    assert plain_globals_in_kernels(KERNEL.format(value="tl.constexpr(0.7071067811865476)")) == []


@pytest.mark.parametrize("path", KIT_TRITON_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_kit_triton_file_reads_a_plain_global_in_a_kernel(path: Path):
    assert plain_globals_in_kernels(path.read_text()) == []


@pytest.mark.slow
@pytest.mark.solutions  # the instructor's files: absent from a learner's kit
def test_a_cpu_grade_fails_a_kernel_the_gpu_would_not_compile(tmp_path):
    source = (
        (ROOT / "solutions/fusion/fusion.py")
        .read_text()
        .replace("SQRT1_2 = tl.constexpr(0.7071067811865476)", "SQRT1_2 = 0.7071067811865476")
    )
    assert "SQRT1_2 = 0.7071067811865476" in source
    path = tmp_path / "fusion.py"
    path.write_text(source)
    result = grade(resolve(("fusion",)), submission=path, record=False)
    check = next(c for c in result.checks if c.name == "gpu_compile")
    assert check.status == "failed" and "fusion.py:18: `SQRT1_2`" in check.message and "tl.constexpr" in check.message
    assert next(c for c in result.checks if c.name == "numerics").status == "passed"  # the interpreter ran it
