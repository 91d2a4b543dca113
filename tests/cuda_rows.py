"""Shared by the tests of the CUDA row kernels (softmax, layer_norm, rms_norm: one block or warp per row).

On the CPU a CUDA kernel cannot run, so each classic mistake is *played* in torch: a function that
writes the outputs the mistaken kernel would write (or names the CUDA error it would raise) on the
spec's own cases, laid out as the grader lays them out, judged with the grader's own checks. On a GPU,
.cu files (solutions, fixtures, one-line edits of the solution) are built and called the way the
grader calls them, for the ladder's figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch

from grader.checks.checking import compare, load_reference, reference_outputs
from grader.checks.inputs import generate, make_outputs, place, written_outside
from grader.core.spec import Case, ExerciseSpec

# A play gets the case's tensors (inputs in the case's layout, poisoned outputs) and parameters; it writes
# the outputs in place, or returns the verdict code the kernel would get before any comparison ("cuda_error").
Play = Callable[[dict[str, torch.Tensor], dict[str, Any]], str | None]


def cuda_cases(spec: ExerciseSpec) -> list[Case]:
    """The cases the CUDA version runs on a machine without a GPU."""
    cuda = spec.variants["cuda"]
    return [c for c in spec.cases if not c.gpu_only and cuda.accepts(c)]


def verdict(spec: ExerciseSpec, case: Case, play: Play, seed: int = 5) -> str:
    """ "ok", or the first failing verdict code of `play` over the case's trials, as the grader judges it."""
    reference = load_reference(spec.folder / "reference.py")
    for trial in range(spec.trials_for(case)):
        values = generate(spec, case, seed + trial, trial)
        inputs = {name: place(v, case.inputs.get(name, {}).get("layout"), "cpu") for name, v in values.items()}
        outputs = make_outputs(spec, case, "cpu")
        code = play({**inputs, **outputs}, case.params)
        if code:
            return code
        if any(written_outside(t) for t in outputs.values()):
            return "out_of_bounds"
        tol = spec.tolerance_of(case)
        for spec_out, ref in zip(spec.outputs, reference_outputs(reference, spec, values, case.params)):
            result = compare(spec_out.name, outputs[spec_out.name], ref, tol, case.label())
            if not result.ok:
                return result.code
    return "ok"


def verdicts(spec: ExerciseSpec, play: Play) -> dict[str, str]:
    return {case.label(): verdict(spec, case, play) for case in cuda_cases(spec)}


def misaligned_rows(t: torch.Tensor) -> bool:
    """Whether some row of `t` starts off a 16-byte boundary (a float4 load there is a CUDA error)."""
    rows = torch.arange(t.shape[0])
    starts = t.data_ptr() + rows * t.stride(0) * t.element_size()
    return bool((starts % 16 != 0).any())


def float4_gated_on_n_only(tensors: dict[str, torch.Tensor], matrices: tuple[str, ...]) -> str | None:
    """A kernel that takes its float4 path whenever N % 4 == 0, without looking at strides or pointers."""
    n = tensors[matrices[0]].shape[-1]
    if n % 4 == 0 and any(misaligned_rows(tensors[name]) for name in matrices):
        return "cuda_error"
    return None


def rows_at_stride_n(t: torch.Tensor) -> torch.Tensor:
    """`t` as a kernel that steps from row to row by N (not by the row stride) sees it."""
    return t.as_strided(t.shape, (t.shape[-1], 1), t.storage_offset())


# --- on a GPU -------------------------------------------------------------------------------------------


def cuda_caller(spec: ExerciseSpec, source: Path, role: str = "learner"):
    """`source` built for this GPU and loaded as the grader loads it: call it with (tensors, params)."""
    from grader.child import loading
    from grader.toolchain import build

    built = build.build_shared_library(source, build.gpu_arch())
    assert built.ok, built.log
    return loading.load(spec.variants["cuda"], source, built.library, role)


def edited(source: Path, old: str, new: str, folder: Path, name: str) -> Path:
    """`source` with every occurrence of `old` replaced, written as folder/name (a one-line mistake)."""
    text = source.read_text()
    assert old in text, f"{name}: {old!r} is not in {source.name}: update the test's edit"
    path = folder / name
    path.write_text(text.replace(old, new))
    return path


def gbps(bytes_moved: float, median_ms: float) -> float:
    return bytes_moved / (median_ms / 1000) / 1e9
