"""Reference: attention written plainly, O = softmax(Q K^T / sqrt(d)) V, every intermediate in memory.

On the grader's float64 copies (the CPU) this is the truth the verdict compares against; on the GPU it is
the "torch" figure: cuBLAS matmuls and torch.softmax with the N x N scores in the input's dtype."""

import math

import torch


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return torch.softmax(scores, dim=-1) @ v
