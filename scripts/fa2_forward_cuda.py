"""The CUDA FA2 forward experiment (scripts/fa2_forward_cuda.cu) and the solution's kernel, each built as a plain
shared library (no torch headers: seconds, not minutes) around one launcher, so scripts/design_bench.py flash-cuda
times them side by side beside SDPA.

A build is the experiment's includes, the solution's PTX wrappers, one kernel section (the experiment's or the
solution's, from `// ---- the kernel` to `// ---- the operator`) and the experiment's launcher (`fa2_forward`,
bfloat16 and float16). tests/test_flash_attention_v2_cuda.py runs the experiment's kernel section under the warp
emulator, and both kernels, built whole, under the CPU emulator (grader/cuda_cpu)."""

from __future__ import annotations

import ctypes
import hashlib
import os
import tempfile
import threading
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = ROOT / "scripts/fa2_forward_cuda.cu"
SOLUTION = ROOT / "solutions/flash_attention_v2/flash_attention_v2.cu"
PTX, KERNEL, OPERATOR = "// ---- PTX wrappers", "// ---- the kernel", "// ---- the operator"


def section(text: str, start: str, end: str) -> str:
    return text[text.index(start) : text.index(end)]


def compose(kernel_source: Path = EXPERIMENT) -> str:
    """One buildable file: includes, the solution's PTX wrappers, `kernel_source`'s kernels, the launcher."""
    experiment, solution = EXPERIMENT.read_text(), SOLUTION.read_text()
    return (
        experiment[: experiment.index(PTX)]
        + section(solution, PTX, KERNEL)
        + section(kernel_source.read_text(), KERNEL, OPERATOR)
        + experiment[experiment.index(OPERATOR) :]
    )


def write_source(kernel_source: Path = EXPERIMENT, folder: Path | None = None) -> Path:
    """The composed file, named by its content, in `folder` (default: a folder of the system's temporary one)."""
    text = compose(kernel_source)
    folder = folder or Path(tempfile.gettempdir()) / "kcourse_fa2_forward_cuda"
    folder.mkdir(exist_ok=True)
    source = folder / f"fa2_{hashlib.sha256(text.encode()).hexdigest()[:16]}.cu"
    if not source.exists():  # builds of one text side by side (other defines) share it: written whole, then named
        partial = source.with_suffix(f".{os.getpid()}.{threading.get_ident()}.partial")
        partial.write_text(text)
        os.replace(partial, source)
    return source


def build(kernel_source: Path = EXPERIMENT, defines: dict[str, int] | None = None) -> ctypes.CDLL:
    """The composed file built by the grader's nvcc build (its flags and cache), with `defines`."""
    from grader.toolchain.build import build_shared_library, gpu_arch

    built = build_shared_library(write_source(kernel_source), gpu_arch(), defines=defines or {})
    if not built.ok:
        raise RuntimeError(f"{kernel_source.name} {defines or ''} did not build:\n{built.log[-1500:]}")
    library = ctypes.CDLL(built.library)
    library.fa2_forward.restype = ctypes.c_int
    return library


def forward(library: ctypes.CDLL, q, k, v, out: torch.Tensor, lse: torch.Tensor, causal: bool) -> None:
    """out and lse of bfloat16 or float16 q, k, v (batch, heads, n, d), on the current stream (the CPU emulator's
    library: none)."""
    strides = (ctypes.c_int64 * 12)(*q.stride(), *k.stride(), *v.stride())
    vectorized = all(
        t.stride(3) == 1 and all(s % 8 == 0 for s in t.stride()[:3]) and t.data_ptr() % 16 == 0 for t in (q, k, v)
    )
    err = library.fa2_forward(
        ctypes.c_void_p(q.data_ptr()),
        ctypes.c_void_p(k.data_ptr()),
        ctypes.c_void_p(v.data_ptr()),
        strides,
        ctypes.c_void_p(out.data_ptr()),
        ctypes.c_void_p(lse.data_ptr()),
        *q.shape,
        int(causal),
        int(vectorized),
        int(q.dtype == torch.float16),
        ctypes.c_void_p(torch.cuda.current_stream().cuda_stream if q.is_cuda else None),
    )
    if err:
        raise RuntimeError(f"fa2_forward: CUDA error {err}")
