"""Reference: C = A @ B.

The grader calls this on float64 copies of the inputs (the truth the verdict compares against, far more
precise than the float32 accumulation asked of you); the speed check calls it on the case's own
float16 / bfloat16 tensors, which is cuBLAS in that dtype: the "torch" time it reports."""

import torch


def reference(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    return A @ B
