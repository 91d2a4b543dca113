"""build.check_entry_point where no library was built (a compile-only check without a GPU: nvcc compiled the
kernels alone): the `extern "C"` function and its parameter count are read from the source text."""

from __future__ import annotations

import pytest

from grader.core.vocabulary import Code
from grader.toolchain import build

KERNEL = "__global__ void k(float* x) { x[0] = 1.f; }\n"


@pytest.mark.parametrize(
    "host",
    [
        'extern "C" void reduction(const float* x, float* out, int n) {}',
        'extern "C" {\nvoid reduction(const float* x, float* out, int n) {}\n}',  # a block: never a false failure
    ],
)
def test_an_extern_c_entry_with_the_stubs_parameters_passes(tmp_path, host):
    source = tmp_path / "mine.cu"
    source.write_text(KERNEL + host)
    assert build.check_entry_point(None, source, "reduction", 3) is None


@pytest.mark.parametrize(
    "host",
    [
        'extern "C" void reduce_sum(const float* x, float* out, int n) {}',
        "void reduction(float* x, float* o, int n) {}",
    ],
)
def test_a_renamed_entry_or_one_without_extern_c_is_a_missing_entry(tmp_path, host):
    source = tmp_path / "mine.cu"
    source.write_text(KERNEL + host)
    code, message = build.check_entry_point(None, source, "reduction", 3)
    assert code == Code.MISSING_ENTRY and 'keep `extern "C"`' in message and "`reduction`" in message


def test_a_changed_parameter_count_is_a_bad_signature(tmp_path):
    source = tmp_path / "mine.cu"
    source.write_text(KERNEL + 'extern "C" void reduction(const float* x, float* out) {}')
    code, message = build.check_entry_point(None, source, "reduction", 3)
    assert code == Code.BAD_SIGNATURE and "takes 2 parameters; the grader passes 3" in message
