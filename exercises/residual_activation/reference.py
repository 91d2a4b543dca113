"""Reference: out = residual + act(x), act "gelu" (the tanh approximation, GPT-2's and llm.c's) or "silu".
The grader calls it on float64 copies for the numerics, and in the case's dtype on the GPU as the unfused
PyTorch formula your operator is timed against: F.gelu writes act(x) out, then the add reads it back."""

import torch
import torch.nn.functional as F


def reference(x: torch.Tensor, residual: torch.Tensor, *, act: str) -> torch.Tensor:
    if act == "gelu":
        return residual + F.gelu(x, approximate="tanh")
    if act == "silu":
        return residual + F.silu(x)
    raise ValueError(f'act = {act!r}: the cases name "gelu" or "silu"')
