"""The cuBLAS exercises (100-day plan: day 17 cublas_blas1, day 19 cublas_gemm), and what the grader grew for
them: a variant's `link = ["cublas"]`, which adds -L/-l/rpath flags for a CUDA library found in the toolkit
or in NVIDIA's pip wheel (build.link_flags), part of the build's cache key; a machine without the library
reports the build skipped with what to install, never the learner's error.

On the CPU the calls are played in torch against the spec's cases and judged with the grader's own checks
(indices by reference.py's property checks): each classic mistake — cuBLAS's 1-based index handed back,
signed instead of absolute extremes, axpy without the copy, C = A B called the way the math reads on
column-major cuBLAS, the leading dimensions assumed contiguous — fails some case, the honest calls pass them
all. Where libcublas is present (a full CUDA Toolkit, or `pip install nvidia-cublas`) the stubs, solutions and
fixtures compile and link; elsewhere those tests skip and say why. On a GPU (`pytest -m gpu -s`) the real
files are graded and the solutions' figures printed beside torch's."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from conftest import ROOT, submission
from cuda_checks import fixture_passes_numerics, mutant
from simulated_kernels import cpu_cases, exercise, figure_line, first_failure, store, trial_data

from grader.checks.checking import judge_output
from grader.checks.inputs import make_outputs, place
from grader.core.discovery import resolve
from grader.core.spec import SpecError, load_spec
from grader.run.grade import grade
from grader.toolchain import build

BLAS1, GEMM = exercise("cublas_blas1"), exercise("cublas_gemm")
NVCC = build.find_nvcc()
CUBLAS_FLAGS, CUBLAS_MISSING = build.link_flags(["cublas"], NVCC) if NVCC else ([], ["cublas"])
needs_cublas = pytest.mark.skipif(
    bool(CUBLAS_MISSING) or NVCC is None, reason=build.missing_library_message(["cublas"]) if NVCC else "nvcc not found"
)


def verdicts(spec, model, seed: int = 17, until_failure: bool = False) -> dict[str, str]:
    """Case label -> the first failing trial's code or "ok", each output judged as a grade judges it (an
    output with a `check` by reference.py's function, given the trial's inputs)."""
    found = {}
    for index, case in enumerate(cpu_cases(spec)):
        found[case.label()] = "ok"
        for trial in range(spec.trials_for(case)):
            values, refs = trial_data(spec, case, seed + 1000 * index + trial, trial)
            inputs = {name: place(v, case.inputs.get(name, {}).get("layout"), "cpu") for name, v in values.items()}
            outputs = make_outputs(spec, case, "cpu")
            model(inputs, outputs, case.params)
            codes = [
                judge_output(
                    spec,
                    s,
                    outputs[s.name],
                    ref,
                    spec.tolerance_of(case),
                    case.label(),
                    inputs=values,
                    params=case.params,
                ).code
                for s, ref in zip(spec.outputs, refs)
            ]
            bad = next((c for c in codes if c != "ok"), None)
            if bad:
                found[case.label()] = bad
                break
        if until_failure and found[case.label()] != "ok":
            break
    return found


# --- the grader's growth: link = [...] ----------------------------------------------------------------


def test_a_variant_names_the_libraries_it_links_and_a_bad_list_is_refused(tmp_path):
    assert BLAS1.variant("cuda").link == ["cublas"] and GEMM.variant("cuda").link == ["cublas"]
    assert exercise("matmul").variant("cuda").link == []
    text = (GEMM.folder / "spec.toml").read_text()
    folder = tmp_path / "cublas_gemm"
    folder.mkdir()
    for bad, says in (
        ('link = "cublas"', "give a list of library names"),
        ('link = ["-lcublas"]', "library names"),
        ('link = ["cublas"]\nkind = "torch_op"', "only kinds"),
    ):
        (folder / "spec.toml").write_text(
            text.replace('link = ["cublas"]', bad).replace('kind = "cuda"\n', "", 1)
            if "torch_op" in bad
            else text.replace('link = ["cublas"]', bad)
        )
        with pytest.raises(SpecError, match=says):
            load_spec(folder)


def test_link_flags_find_a_wheel_library_on_sys_path_with_its_headers_and_an_rpath(tmp_path, monkeypatch):
    site = tmp_path / "site"
    (site / "nvidia" / "cu13" / "include").mkdir(parents=True)
    lib = site / "nvidia" / "cu13" / "lib"
    lib.mkdir()
    (lib / "libkcfake.so.13").write_bytes(b"")  # a wheel ships only the versioned file
    (lib / "libkcplain.so").write_bytes(b"")
    monkeypatch.syspath_prepend(str(site))
    flags, missing = build.link_flags(["kcfake", "kcplain", "kcourse_nowhere"], str(tmp_path / "cuda" / "bin" / "nvcc"))
    assert missing == ["kcourse_nowhere"]
    assert f"-I{site / 'nvidia' / 'cu13' / 'include'}" in flags and f"-L{lib}" in flags
    assert f"-rpath={lib}" in flags and "-l:libkcfake.so.13" in flags and "-lkcplain" in flags
    assert "libkcourse_nowhere" in build.missing_library_message(missing)


@pytest.mark.nvcc
def test_a_missing_library_skips_the_build_and_says_what_to_install(tmp_path):
    source = tmp_path / "tiny.cu"
    source.write_text('extern "C" void f() {}\n')
    result = build.build_shared_library(source, link=["kcourse_no_such_library"])
    assert result.skipped and not result.ok
    assert "no libkcourse_no_such_library" in result.log and "pip install" in result.log


@pytest.mark.solutions
def test_a_machine_without_cublas_reports_the_grade_skipped_not_failed(monkeypatch):
    monkeypatch.setattr(build, "link_flags", lambda names, nvcc: ([], list(names)))
    monkeypatch.setattr(build, "find_nvcc", lambda: NVCC or "/usr/local/cuda/bin/nvcc")
    result = grade(resolve(("cublas_gemm",)), source="solutions", seed=3, record=False)
    assert result.status == "skipped", result.verdict
    check = next(c for c in result.checks if c.name == "build")
    assert check.details["code"] == "library_missing" and "libcublas" in check.message


@pytest.mark.slow
@needs_cublas
def test_a_file_calling_cublas_create_compiles_and_links_against_libcublas(tmp_path):
    source = tmp_path / "handle.cu"
    source.write_text(
        '#include <cublas_v2.h>\nextern "C" int make_handle() {\n    cublasHandle_t h;\n'
        "    return cublasCreate(&h) == CUBLAS_STATUS_SUCCESS ? 0 : 1;\n}\n"
    )
    result = build.build_shared_library(source, link=["cublas"])
    assert result.ok, result.log
    if shutil.which("readelf"):
        needed = subprocess.run(["readelf", "-d", result.library], capture_output=True, text=True).stdout
        assert "libcublas.so" in needed


@pytest.mark.slow
@needs_cublas
@pytest.mark.solutions
@pytest.mark.parametrize("exercise_id", ["cublas_blas1", "cublas_gemm"])
def test_the_stub_and_the_solution_build_for_sm_90(exercise_id):
    stub = exercise(exercise_id).variant("cuda").stub
    for folder in ("exercises", "solutions"):
        result = build.build_shared_library(ROOT / folder / exercise_id / stub, "sm_90", link=["cublas"])
        assert result.ok, result.log
        assert not any(k["spill_stores"] for k in result.resources)


# The slow handle per call, each solution with an edit, (exercise, mistake): edits. A learner's kit has no
# solutions/: their tests are marked solutions, and skip there. The classic mistakes are the specs' [[mistakes]]
# (tests/test_exercise_mistakes.py); of those, axpy_in_place is a file of its own, <exercise>_<mistake>.cu.
SOLUTION_EDITS = {
    # Slow: a cuBLAS handle created and destroyed on every call (numerics right).
    ("cublas_blas1", "handle_per_call"): [
        (
            "static cublasHandle_t the_handle() {\n    static cublasHandle_t handle = [] {\n        cublasHandle_t created;\n"
            "        CUBLAS_OK(cublasCreate(&created));\n        return created;\n"
            "    }();  // a function-local static: created once, on the first call, thread-safely\n"
            "    return handle;\n}\n\n",
            "",
        ),
        (
            "    cublasHandle_t handle = the_handle();",
            "    cublasHandle_t handle;\n    CUBLAS_OK(cublasCreate(&handle));  // the mistake: a new handle on every call",
        ),
        (
            "    CUBLAS_OK(cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_HOST));\n}",
            "    CUBLAS_OK(cublasDestroy(handle));  // and a device-wide wait\n}",
        ),
    ],
    # Slow: a cuBLAS handle created and destroyed on every call (numerics right).
    ("cublas_gemm", "handle_per_call"): [
        (
            "static cublasHandle_t the_handle() {\n    static cublasHandle_t handle = [] {\n        cublasHandle_t created;\n"
            "        CUBLAS_OK(cublasCreate(&created));\n        return created;\n"
            "    }();  // created once, on the first call (thread-safe)\n    return handle;\n}\n\n",
            "",
        ),
        (
            "    CUBLAS_OK(cublasSgemm(the_handle(), CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, B, ldb, A, lda, &zero, C, ldc));",
            "    cublasHandle_t handle;\n    CUBLAS_OK(cublasCreate(&handle));  // the mistake: a new handle on every call\n"
            "    CUBLAS_OK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, B, ldb, A, lda, &zero, C, ldc));\n"
            "    CUBLAS_OK(cublasDestroy(handle));",
        ),
    ],
}
CUBLAS_FIXTURES = [("cublas_blas1", "axpy_in_place"), *SOLUTION_EDITS]


def mistake_file(exercise_id: str, mistake: str, folder: Path) -> Path:
    if (exercise_id, mistake) not in SOLUTION_EDITS:
        return submission(f"{exercise_id}_{mistake}.cu")
    solution = ROOT / "solutions" / exercise_id / f"{exercise_id}.cu"
    return mutant(solution, mistake, SOLUTION_EDITS[(exercise_id, mistake)], folder)


@pytest.mark.solutions
@pytest.mark.parametrize("exercise_id, mistake", list(SOLUTION_EDITS))
def test_each_solution_edit_still_applies(exercise_id, mistake, tmp_path):
    assert mistake_file(exercise_id, mistake, tmp_path).exists()  # the GPU tests grade this file


@pytest.mark.slow
@needs_cublas
@pytest.mark.solutions
def test_the_fixtures_compile(tmp_path):
    includes = [f for f in CUBLAS_FLAGS if f.startswith("-I")]
    sources = [mistake_file(exercise_id, mistake, tmp_path) for exercise_id, mistake in CUBLAS_FIXTURES]
    jobs = {
        source.name: subprocess.Popen(
            [NVCC, "-std=c++17", "-arch=sm_90", "-cubin", *includes, "-o", "/dev/null", str(source)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for source in sources
    }
    for name, job in jobs.items():
        assert job.wait() == 0, f"{name}: {job.stdout.read()}"


# --- day 17: dot, axpy, amax, amin, played on the CPU --------------------------------------------------


def blas1_model(one_based=False, signed=False, alpha_on_y=False, no_copy=False, in_order=False):
    def model(inputs, outputs, params):
        x, y, alpha = inputs["x"], inputs["y"], params["alpha"]
        dot = torch.cumsum(x * y, 0)[-1:] if in_order else (x * y).sum().reshape(1)
        store(outputs["dot"], dot)
        base = torch.full_like(y, float("nan")) if no_copy else y  # axpy's own poisoned contents, never copied over
        store(outputs["axpy"], x + alpha * y if alpha_on_y else alpha * x + base)
        pick = (x.argmax(), x.argmin()) if signed else (x.abs().argmax(), x.abs().argmin())
        for name, index in zip(("amax", "amin"), pick):
            store(outputs[name], index.reshape(1) + (1 if one_based else 0))

    return model


BLAS1_MISTAKES = {
    "cuBLAS's 1-based indices handed back": blas1_model(one_based=True),
    "the signed largest / smallest value, not the magnitude": blas1_model(signed=True),
    "alpha applied to y (x + alpha y)": blas1_model(alpha_on_y=True),
    "axpy run on the output without copying y into it first": blas1_model(no_copy=True),
}


def test_the_cases_have_size_one_ragged_sizes_and_a_negative_largest_magnitude():
    assert {c.params["n"] for c in cpu_cases(BLAS1)} >= {1, 7, 4097, 1_000_003}
    values, _ = trial_data(BLAS1, cpu_cases(BLAS1)[1], 5, 0)
    assert float(values["x"][values["x"].abs().argmax()]) < 0


@pytest.mark.parametrize("name", list(BLAS1_MISTAKES))
def test_every_classic_blas1_mistake_fails_some_case(name):
    found = verdicts(BLAS1, BLAS1_MISTAKES[name], until_failure=True)
    assert any(v != "ok" for v in found.values()), f"{name} passes every case: {found}"


def test_the_1_based_index_is_named_in_the_failure():
    values, refs = trial_data(BLAS1, cpu_cases(BLAS1)[0], 17, 0)
    spec_out = next(o for o in BLAS1.outputs if o.name == "amax")
    result = judge_output(
        BLAS1, spec_out, refs[2] + 1, refs[2], BLAS1.tolerance_of(cpu_cases(BLAS1)[0]), "n=1", inputs=values
    )
    assert result.code == "property" and "1-based" in result.message


@pytest.mark.parametrize("in_order", [False, True], ids=["cuBLAS-like tree sum", "one thread adding in order"])
def test_honest_blas1_calls_pass_every_case(in_order):
    found = verdicts(BLAS1, blas1_model(in_order=in_order))
    assert all(v == "ok" for v in found.values()), found


# --- day 19: C = A B through column-major cuBLAS, played on the CPU ------------------------------------


def column_major(t: torch.Tensor, rows: int, cols: int, ld: int) -> torch.Tensor:
    """The rows x cols column-major matrix (leading dimension ld) cuBLAS reads at t's first element."""
    storage = t.new_empty(0).set_(t.untyped_storage())
    return storage.as_strided((rows, cols), (1, ld), t.storage_offset())


def sgemm_nn(m, n, k, X, ldx, Y, ldy, Z, ldz) -> None:
    """cublasSgemm(OP_N, OP_N, m, n, k, 1, X, ldx, Y, ldy, 0, Z, ldz) on the memory of X, Y and Z: a call whose
    leading dimensions are too small is refused (CUBLAS_STATUS_INVALID_VALUE) and writes nothing."""
    if ldx < max(1, m) or ldy < max(1, k) or ldz < max(1, m):
        return
    try:
        product = column_major(X, m, k, ldx) @ column_major(Y, k, n, ldy)
        column_major(Z, m, n, ldz).copy_(product)
    except RuntimeError:  # it would read or write past the tensors: on a GPU, other memory or a fault
        return


def gemm_model(call):
    def model(inputs, outputs, params):
        A, B, C = inputs["A"], inputs["B"], outputs["C"]
        call(A, B, C, params["M"], params["N"], params["K"], A.stride(0), B.stride(0), C.stride(0))

    return model


GEMM_HONEST = {
    "the transpose trick: C^T = B^T A^T": gemm_model(
        lambda A, B, C, M, N, K, lda, ldb, ldc: sgemm_nn(N, M, K, B, ldb, A, lda, C, ldc)
    ),
    "torch's float32 product": lambda inputs, outputs, params: store(outputs["C"], inputs["A"] @ inputs["B"]),
}
GEMM_MISTAKES = {
    "C = A B called as the math reads (M, N, K, A, B)": gemm_model(
        lambda A, B, C, M, N, K, lda, ldb, ldc: sgemm_nn(M, N, K, A, lda, B, ldb, C, ldc)
    ),
    "the leading dimensions assumed contiguous (K, N, N)": gemm_model(
        lambda A, B, C, M, N, K, lda, ldb, ldc: sgemm_nn(N, M, K, B, N, A, K, C, N)
    ),
    "A and B swapped in the trick (C^T = A^T B^T)": gemm_model(
        lambda A, B, C, M, N, K, lda, ldb, ldc: sgemm_nn(N, M, K, A, lda, B, ldb, C, ldc)
    ),
}


def test_the_gemm_cases_have_a_square_one_unequal_sizes_and_slices_of_a_b_and_c():
    shapes = {(c.params["M"], c.params["N"], c.params["K"]) for c in cpu_cases(GEMM)}
    assert {(1, 1, 1), (128, 128, 128), (17, 33, 9)} <= shapes
    sliced = {
        name for c in cpu_cases(GEMM) for name, o in {**c.inputs, **c.outputs}.items() if o.get("layout") == "row_slice"
    }
    assert sliced == {"A", "B", "C"}


@pytest.mark.parametrize("name", list(GEMM_MISTAKES))
def test_every_classic_gemm_mistake_fails_some_case(name):
    found = verdicts(GEMM, GEMM_MISTAKES[name], until_failure=True)
    assert any(v != "ok" for v in found.values()), f"{name} passes every case: {found}"


@pytest.mark.parametrize("name", list(GEMM_HONEST))
def test_honest_gemm_calls_pass_every_case(name):
    found = verdicts(GEMM, GEMM_HONEST[name])
    assert all(v == "ok" for v in found.values()), found


# --- on a GPU: the real files -------------------------------------------------------------------------


@pytest.mark.gpu
def test_the_blas1_solution_passes_faster_than_torch_and_prints_its_figures():
    result = grade(resolve(("cublas_blas1",)), source="solutions", seed=21, record=False)
    assert result.status == "passed", result.verdict
    print("\n" + figure_line("cublas_blas1 solution", result))
    largest = result.timings[-1]
    # The solution is six cuBLAS calls: its speed is the library's. Measured at n = 2^25: H100 80% of copy
    # (torch 1,652 GB/s beside 2,401); H200 68% (torch 2,241 beside 2,870): its reductions (dot, amax, amin) keep
    # less of the H200's bandwidth. So: cuBLAS used well (no extra passes, no syncs between calls) beats torch's
    # same six ops, and stays above 60%; an extra pass over the vectors costs about a ninth and shows here.
    assert largest.learner_ms < largest.torch_ms
    assert (largest.roofline_pct or 0) >= 60


@pytest.mark.gpu
def test_the_gemm_solution_passes_at_90_percent_of_torch_matmul():
    result = grade(resolve(("cublas_gemm",)), source="solutions", seed=21, record=False)
    assert result.status == "passed", result.verdict
    print("\n" + figure_line("cublas_gemm solution", result))
    last = result.timings[-1]
    assert last.torch_ms and last.learner_ms <= last.torch_ms / 0.9, figure_line("cublas_gemm", result)


@pytest.mark.gpu
@pytest.mark.parametrize("exercise_id", ["cublas_blas1", "cublas_gemm"])
def test_the_stubs_fail_on_the_gpu(exercise_id):
    result = grade(resolve((exercise_id,)), source="stubs", seed=5, record=False)
    assert first_failure(result).details.get("code") == "not_written", result.verdict


@pytest.mark.gpu
@pytest.mark.solutions
@pytest.mark.parametrize("exercise_id", ["cublas_blas1", "cublas_gemm"])
def test_a_handle_made_per_call_is_right_and_slower_than_the_solution(exercise_id, tmp_path):
    slow = mistake_file(exercise_id, "handle_per_call", tmp_path)
    result = fixture_passes_numerics(exercise_id, slow, f"{exercise_id}: a handle per call")
    assert result.timings[-1].learner_ms > result.timings[-1].solution_ms
