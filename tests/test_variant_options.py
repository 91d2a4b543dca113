"""What the grader grew so one exercise folder can hold a Triton and a CUDA version of a row kernel:
C entry points get a tensor's stride as an argument ("x.stride(0)"), a version can take only some case
dtypes (`dtypes`: a float* kernel skips the float16 cases, said in the verdict), and a spec can name the
version `kcourse grade <id>` picks without --lang (`default_lang`)."""

from __future__ import annotations

import ctypes

import pytest
import torch

from grader.checks.inputs import place
from grader.child import loading
from grader.core.discovery import discover_exercises, resolve
from grader.core.spec import SpecError, load_spec
from grader.run import sanitize
from grader.run.judge import _other_dtypes_note

SPEC = """id = "{id}"
{top}
[variants.triton]
stub = "k.py"
entry = "k"
args = ["x", "out"]
[variants.cuda]
kind = "cuda"
stub = "k.cu"
entry = "k"
args = {cuda_args}
{cuda_extra}
[inputs.x]
shape = ["M", "N"]
[outputs.out]
shape = ["M", "N"]
[[cases]]
M = 3
N = 5
[[cases]]
M = 4
N = 7
dtype = "float16"
[tolerance.float32]
atol = 0
rtol = 0
[tolerance.float16]
atol = 0
rtol = 0
[performance]
bytes = "M * N"
[[performance.cases]]
M = 64
N = 64
"""


def write(
    tmp_path,
    name="k",
    top="",
    cuda_args='["x", "out", "M", "N", "x.stride(0)", "out.stride(0):int64"]',
    cuda_extra='dtypes = ["float32"]',
):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "spec.toml").write_text(SPEC.format(id=name, top=top, cuda_args=cuda_args, cuda_extra=cuda_extra))
    return folder


def test_a_stride_argument_names_a_tensor_and_a_dimension(tmp_path):
    cuda = load_spec(write(tmp_path)).variants["cuda"]
    stride, out_stride = cuda.args[4], cuda.args[5]
    assert (stride.name, stride.stride_of, stride.stride_dim, stride.ctype) == ("x.stride(0)", "x", 0, None)
    assert (out_stride.stride_of, out_stride.ctype) == ("out", "int64")


@pytest.mark.parametrize(
    "args, message",
    [
        ('["x", "y.stride(0)"]', "'y' is not a tensor of the spec"),
        ('["x", "x.stride(2)"]', "x has 2 dimension"),
    ],
)
def test_a_stride_argument_of_no_tensor_or_dimension_is_rejected_at_load(tmp_path, args, message):
    with pytest.raises(SpecError, match=message):
        load_spec(write(tmp_path, cuda_args=args))


def test_the_entry_point_gets_the_stride_of_the_tensor_as_laid_out_for_the_case(tmp_path):
    cuda = load_spec(write(tmp_path)).variants["cuda"]
    x = place(torch.randn(3, 5), "row_slice", "cpu")
    out = torch.empty(3, 5)
    values = [loading.argument_value(a, {"x": x, "out": out}, {"M": 3, "N": 5}) for a in cuda.args]
    assert values[2:] == [3, 5, x.stride(0), 5] and x.stride(0) != 5
    passed = loading.Caller(cuda, lambda *a: a).arguments({"x": x, "out": out}, {"M": 3, "N": 5})
    assert passed[4].value == x.stride(0) and isinstance(passed[5], ctypes.c_int64)  # "out.stride(0):int64"


def test_the_sanitizer_passes_the_contiguous_stride_and_takes_a_case_the_version_accepts(tmp_path):
    spec = load_spec(write(tmp_path))
    cuda = spec.variants["cuda"]
    case = sanitize.small_case(spec, cuda)
    assert case.dtype == "float32"
    assert sanitize.small_case(spec, spec.variants["triton"]).dtype == "float16"  # the largest, as before
    values = {"x": {"path": str(tmp_path / "x.in")}}
    args = sanitize._raw_arguments(spec, cuda, case, values, tmp_path)
    assert [a.get("value") for a in args[2:]] == [3, 5, 5, 5] and args[5]["ctype"] == "int64"


def test_a_version_runs_only_the_cases_of_its_dtypes_and_the_verdict_says_so(tmp_path):
    spec = load_spec(write(tmp_path))
    cuda, triton = spec.variants["cuda"], spec.variants["triton"]
    assert [cuda.accepts(c) for c in spec.cases] == [True, False]
    assert all(triton.accepts(c) for c in spec.cases)
    assert _other_dtypes_note(spec, cuda) == "; 1 float16 case(s) are for the other version(s), this one takes float32"
    assert _other_dtypes_note(spec, triton) == ""


@pytest.mark.parametrize(
    "extra, message",
    [
        ('dtypes = ["float8"]', "dtypes has float8"),
        ('dtypes = ["bfloat16"]', "leaves it no \\[\\[cases\\]\\] entry"),
    ],
)
def test_dtypes_that_cannot_work_are_rejected_at_load(tmp_path, extra, message):
    with pytest.raises(SpecError, match=message):
        load_spec(write(tmp_path, cuda_extra=extra))


def test_dtypes_must_take_every_timed_size(tmp_path):
    folder = write(tmp_path)
    text = (
        (folder / "spec.toml")
        .read_text()
        .replace("[[performance.cases]]\nM = 64", '[[performance.cases]]\ndtype = "float16"\nM = 64')
    )
    (folder / "spec.toml").write_text(text)
    with pytest.raises(SpecError, match="excludes the timed size"):
        load_spec(folder)


def test_default_lang_picks_the_version_without_lang_and_must_name_one(tmp_path):
    spec = load_spec(write(tmp_path, top='default_lang = "triton"'))
    assert spec.variant(None).lang == "triton" and spec.variant("cuda").lang == "cuda"
    with pytest.raises(SpecError, match="add --lang"):
        load_spec(write(tmp_path, name="k2")).variant(None)  # without it, an id in two languages asks
    with pytest.raises(SpecError, match="default_lang = 'rust' is not one of its variants"):
        load_spec(write(tmp_path, name="k3", top='default_lang = "rust"'))


def test_the_row_kernels_keep_their_triton_default_and_vector_add_still_asks():
    exercises = discover_exercises()
    for exercise in ("softmax", "layer_norm"):
        assert set(exercises[exercise].variants) == {"triton", "cuda"}
        assert resolve((exercise,)).variant.lang == "triton"
    assert exercises["vector_add"].default_lang is None
