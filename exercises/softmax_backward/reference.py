"""Reference: the gradient of a row softmax, from its output y and the upstream gradient dy."""

import torch


def softmax_output(logits: torch.Tensor) -> torch.Tensor:
    """How the grader makes y (spec.toml: `transform`): the softmax of random logits, so every row is
    positive and sums to 1, as the output a forward pass saved for the backward does."""
    return torch.softmax(logits, dim=-1)


def reference(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """dx = y * (dy - sum(y * dy, row)). This is torch's own fused backward (what autograd runs after
    torch.softmax): on the grader's float64 copies it is the truth, and on the GPU the PyTorch time
    yours is shown against."""
    return torch._softmax_backward_data(dy, y, -1, y.dtype)
