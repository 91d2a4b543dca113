"""The grader's inputs on the CPU emulator are memory AddressSanitizer tracks (grader/child/staging.py: tracked): a
kernel that reads one element past an input stops the run with a memory verdict, as compute-sanitizer's memcheck
reports it on a GPU. The inputs come from the judge's files, mapped into the child; a mapped file is memory ASan does
not track, so before the copy a read past an input went unseen wherever the next page was mapped.

A toy exercise (c = a, and c = row sums of a row-slice input) graded end to end (nvcc's build, then the emulator),
and the copy itself on its own: strides, offset and a row slice's padding kept, the mapped file no longer used."""

from __future__ import annotations

import shutil

import pytest
import torch
from conftest import HAS_GPU

from grader import cuda_cpu
from grader.checks.inputs import load_tensor, place, save_tensor
from grader.child import staging
from grader.core.discovery import Target
from grader.core.spec import load_spec
from grader.run.grade import grade

N = 1001  # 4,004 bytes: the input's end is not a page's, so the bytes after it in its last page are readable

SPEC = f"""\
id = "copy_toy"
title = "copy"
trials = 1

[variants.cuda]
kind = "cuda"
stub = "copy_toy.cu"
entry = "copy_toy"
args = ["a", "c", "n"]

[inputs.a]
shape = ["n"]

[outputs.c]
shape = ["n"]

[[cases]]
n = {N}

[tolerance.float32]
atol = 0
rtol = 0
"""

KERNEL = """\
__global__ void copy_kernel(const float* a, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + 0.0f * a[i + OFFSET];
}

extern "C" void copy_toy(const float* a, float* c, int n) {
    copy_kernel<<<(n + 255) / 256, 256>>>(a, c, n);
    cudaDeviceSynchronize();
}
"""

MARKS = [
    pytest.mark.slow,
    pytest.mark.nvcc,
    pytest.mark.emulator,
    pytest.mark.skipif(HAS_GPU, reason="checks the no-GPU path: the CPU emulator"),
    pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc"),
    pytest.mark.skipif(cuda_cpu.asan_runtime() is None, reason="no AddressSanitizer runtime to preload"),
]


def emulated(test):
    for mark in MARKS:
        test = mark(test)
    return test


def _grade(tmp_path, offset: int):
    folder = tmp_path / "copy_toy"
    folder.mkdir(parents=True)
    (folder / "spec.toml").write_text(SPEC)
    (folder / "reference.py").write_text("def reference(a):\n    return a.clone()\n")
    learner = tmp_path / "copy_toy.cu"
    # a[i + 1] at i = n - 1 reads one element past the input: its value is multiplied by 0, so only the read shows
    learner.write_text(KERNEL.replace("OFFSET", str(offset)))
    spec = load_spec(folder)
    return grade(Target(spec, spec.variant("cuda")), submission=learner, seed=5, record=False, sanitize_code=False)


def _numerics(result):
    return next(c for c in result.checks if c.name == "numerics")


@emulated
def test_a_read_one_element_past_an_input_fails_with_a_memory_verdict_and_one_within_it_passes(tmp_path):
    past = _grade(tmp_path / "past", offset=1)
    numerics = _numerics(past)
    assert past.status == "failed" and numerics.status == "failed", past.verdict
    assert numerics.details.get("emulator") == "memory_error", numerics.message
    assert "(read of 4 bytes)" in numerics.message and "copy_toy.cu:3" in numerics.message, numerics.message
    assert f"n={N}" in numerics.message

    within = _grade(tmp_path / "within", offset=0)
    assert within.status == "passed", within.verdict


# --- the copy ----------------------------------------------------------------------------------------------
def _mapped(tmp_path, values: torch.Tensor) -> torch.Tensor:
    """`values` as the child loads a judge's file: mapped, not read."""
    meta = save_tensor(values, tmp_path / "x.bin")
    loaded = load_tensor(meta)
    assert loaded.untyped_storage().data_ptr() != values.untyped_storage().data_ptr()
    return loaded


def test_an_input_on_the_mapped_file_is_copied_with_its_shape_strides_and_offset(tmp_path):
    values = torch.randn(5, 7)
    loaded = _mapped(tmp_path, values)
    for placed in (place(loaded, None, "cpu"), loaded[1:, 2:], loaded.t()):
        copy = staging.tracked(placed, loaded)
        assert copy.untyped_storage().data_ptr() != loaded.untyped_storage().data_ptr()
        assert copy.untyped_storage().nbytes() == loaded.untyped_storage().nbytes()  # poisoned past the whole file
        assert (copy.shape, copy.stride(), copy.storage_offset()) == (
            placed.shape,
            placed.stride(),
            placed.storage_offset(),
        )
        assert torch.equal(copy, placed)


@pytest.mark.parametrize("layout", ["row_slice", "transposed", "interleaved"])
def test_a_layout_that_copied_the_input_already_keeps_its_storage_and_padding(tmp_path, layout):
    loaded = _mapped(tmp_path, torch.randn(2, 3, 4, 5))
    placed = place(loaded, layout, "cpu")
    assert staging.tracked(placed, loaded) is placed  # its padding (a row slice's) stays readable, as laid out


def test_an_empty_input_is_left_as_it_is(tmp_path):
    empty = torch.empty(0, 3)
    assert staging.tracked(empty, empty) is empty
