"""Wrong kernels that used to pass, and learner code that tries to change its own verdict (issue 7):
each must fail, with the verdict and message the learner reads. The learner's code runs in a child;
the reference, the comparison and every verdict are the parent's."""

from __future__ import annotations

import shutil

import pytest
from conftest import ROOT, submission

from grader.core.discovery import resolve
from grader.run import kit
from grader.run.grade import grade

SOFTMAX, VECTOR_ADD, REDUCTION = ("softmax",), ("vector_add",), ("reduction",)


def grade_file(words, name, lang=None, **kwargs):
    return grade(resolve(words, lang=lang), submission=submission(name), seed=5, **kwargs)


def failing(result):
    return next(c for c in result.checks if c.status in ("failed", "error"))


@pytest.mark.slow
def test_softmax_without_the_max_subtraction_fails_on_large_logits():
    check = failing(grade_file(SOFTMAX, "softmax_no_max.py"))
    assert check.name == "numerics" and check.details["code"] == "mismatch"
    assert "offset=100.0" in check.message and " NaN (first at index " in check.message


@pytest.mark.slow
def test_softmax_that_uses_the_row_length_as_its_stride_fails_on_a_row_slice():
    check = failing(grade_file(SOFTMAX, "softmax_ncols_stride.py"))
    assert check.name == "numerics" and "layout=row_slice" in check.message


@pytest.mark.slow
def test_patching_the_comparison_in_the_child_changes_nothing():
    check = failing(grade_file(SOFTMAX, "softmax_patches_compare.py"))
    assert check.name == "numerics" and check.details["code"] == "mismatch"


@pytest.mark.slow
def test_a_verdict_written_into_the_grader_pipe_is_a_forgery():
    result = grade_file(SOFTMAX, "softmax_forges_verdict.py")
    assert result.status == "failed"
    assert failing(result).details["code"] == "forged_verdict"
    assert not any(c.status == "passed" and c.name == "numerics" for c in result.checks)


@pytest.fixture
def kit_copy(tmp_path, monkeypatch):
    """A copy of the kit to tamper with (KCOURSE_ROOT points the grader and the child at it)."""
    root = tmp_path / "kit"
    for folder in ("exercises", "plans", "templates", "calibration", "grader"):
        shutil.copytree(ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", root)
    monkeypatch.setenv("KCOURSE_ROOT", str(root))
    return root


@pytest.mark.slow
def test_learner_code_that_rewrites_a_reference_fails_and_leaves_the_kit_as_shipped(kit_copy):
    kit.write_manifest(kit_copy)  # as `kcourse release` does
    first = grade_file(VECTOR_ADD, "vector_add_edits_reference.py", lang="triton")
    assert first.status == "failed" and kit.differs_from_shipped(kit_copy) == []
    solution = ROOT / "solutions" / "vector_add" / "vector_add.py"
    assert grade(resolve(VECTOR_ADD, lang="triton"), submission=solution, seed=5).status == "passed"


@pytest.mark.slow
def test_a_released_kit_changed_by_hand_refuses_to_grade_and_names_the_file(kit_copy):
    kit.write_manifest(kit_copy)
    (kit_copy / "exercises" / "vector_add" / "reference.py").write_text("def reference(a, b):\n    return a * 0\n")
    refused = grade(resolve(VECTOR_ADD, lang="triton"), source="solutions", seed=5)
    assert refused.status == "error" and refused.checks[0].name == "kit"
    assert "exercises/vector_add/reference.py" in refused.checks[0].message and "Restore" in refused.checks[0].message


def test_an_untouched_released_kit_grades_as_usual(kit_copy):
    kit.write_manifest(kit_copy)
    assert kit.differs_from_shipped(kit_copy) == []


@pytest.mark.nvcc
def test_a_missing_cuda_entry_point_fails_without_a_gpu_too():
    check = failing(grade_file(REDUCTION, "reduction_renamed_entry.cu"))
    assert check.name == "load" and check.details["code"] == "missing_entry"
    # without a GPU and the emulator off, only the kernels are compiled: the source says what nm would have
    assert "`reduction`" in check.message and 'keep `extern "C"`' in check.message


@pytest.mark.emulator
@pytest.mark.slow
@pytest.mark.nvcc
def test_on_the_emulator_nvcc_builds_the_kernels_alone_and_host_code_errors_and_entry_points_still_fail(tmp_path):
    stub = (ROOT / "exercises/vector_add/vector_add.cu").read_text()  # compiles; a learner's kit has it too
    entry = 'extern "C" void vector_add('
    files = {  # device code compiles: the first error hides from nvcc's kernels-only pass, the second is no error
        "host_only_error.cu": stub.replace(entry, "#ifndef __CUDA_ARCH__\nint h = undefined_here;\n#endif\n" + entry),
        "no_extern.cu": stub.replace(entry, "void vector_add("),
    }
    results = {}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        results[name] = grade(resolve(VECTOR_ADD, lang="cuda"), submission=tmp_path / name, seed=5, record=False)
    built = failing(results["host_only_error.cu"])  # the emulator's build failed: nvcc's whole build says why
    assert built.name == "build" and built.details["code"] == "build_error" and "undefined_here" in built.message
    assert [c.name for c in results["host_only_error.cu"].checks].count("build") == 1
    loaded = failing(results["no_extern.cu"])  # checked on the emulator's library, nvcc having built no host code
    assert loaded.name == "load" and loaded.details["code"] == "missing_entry"
    assert "the CPU emulator compiles the host code" in results["no_extern.cu"].checks[0].message


@pytest.mark.gpu
def test_a_patched_timer_cannot_claim_a_speed_the_kernel_did_not_reach():
    result = grade_file(SOFTMAX, "softmax_patches_timer.py", source="learner")
    check = failing(result)
    assert check.name == "integrity" and check.details["code"] == "timing_forged", result.verdict


@pytest.mark.slow
def test_a_failure_prints_one_seed_and_the_command_that_reproduces_it():
    from grader.reports.console import format_grade

    result = grade_file(VECTOR_ADD, "vector_add_wrong.py", lang="triton")
    text = format_grade(result)
    command = f"kcourse grade vector_add --lang triton --file {submission('vector_add_wrong.py')} --seed 5"
    assert f"reproduce with: {command}" in text
    assert "seed 5" in text.splitlines()[0] and "trial 1" in failing(result).message


def test_a_results_file_another_grade_creates_meanwhile_is_no_rewrite(tmp_path):
    """Two grades at once in a fresh state folder (two terminals, two GPUs): the other one's first record is
    an append, not this learner's code rewriting their results (seen on the H200 as a false 'kit_modified')."""
    results = tmp_path / "results.jsonl"
    before = kit.append_only_state(results)
    results.write_text('{"kind": "grade"}\n')
    assert not kit.rewritten(results, before)
    before = kit.append_only_state(results)
    results.write_text('{"kind": "forged"}\n')
    assert kit.rewritten(results, before)


@pytest.mark.slow
@pytest.mark.solutions
def test_a_grader_error_while_drawing_inputs_is_the_graders_not_a_hang(monkeypatch, isolated_state):
    """The producer thread draws and sends the trials. An error there (a broken input transform, a full
    disk) once left the judge waiting for a trial that was never sent, until the time limit blamed the
    learner's code for hanging. It is reported as the grader's error, at once."""
    import time

    from grader.checks import inputs
    from grader.run import input_feed

    def broken(spec, case, seed, trial=0, device="cpu"):
        if case.params.get("n", 0) > 100:
            raise ValueError("the input transform broke")
        return inputs.generate(spec, case, seed, trial, device)

    monkeypatch.setattr(input_feed, "generate", broken)
    started = time.monotonic()
    result = grade(resolve(["vector_add"], lang="triton"), source="solutions", seed=5, timeout_s=60)
    assert time.monotonic() - started < 30  # not the 60-s limit
    check = failing(result)
    assert check.name == "grader" and check.status == "error" and "the input transform broke" in check.message
    assert not any(c.name == "run" for c in result.checks)  # no verdict on the learner's code


@pytest.mark.slow
def test_recording_the_operators_does_not_load_torch_compile_and_still_sees_them_once_it_is_loaded():
    """torch wraps a dispatch mode's handler so torch.compile stays out of it, and that wrapper imports
    torch._dynamo at the first operator: 1-3 s of every Triton grade. The recorder pays it only when the code
    has loaded torch.compile itself, and sees the operators either way."""
    import subprocess
    import sys

    code = (
        "import sys, torch\nfrom grader.checks import integrity\n"
        "_, before = integrity.ops_called(lambda: torch.ones(3) + 1)\n"
        "loaded = 'torch._dynamo' in sys.modules\n"
        "import torch._dynamo\n"
        "_, after = integrity.ops_called(lambda: torch.ones(3) * 2)\n"
        "print(loaded, 'aten::add.Tensor' in before, 'aten::mul.Tensor' in after)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["False", "True", "True"], done.stderr[-2000:]
