"""Reference: C = A @ B.

The grader calls this on float64 copies of the bf16 inputs (the truth the verdict compares against); the speed
check calls it on the case's own bf16 tensors, which is cuBLAS's bf16 GEMM (float32 accumulation): the "torch"
figure it reports, the one to measure yourself against."""

import torch


def reference(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    return A @ B
