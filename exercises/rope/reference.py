"""Reference: rotary position embedding (RoPE), the rotate_half convention of GPT-NeoX and Hugging Face's
Llama: coordinate i of a head is paired with i + d/2 (not with i + 1, the interleaved convention of GPT-J
and Meta's original Llama code). The grader calls `reference` on float64 copies for the numerics, and in
the case's dtype on the GPU as the PyTorch formula your operator is timed against."""

import torch

THETA = 10000.0


def rope_tables(x: torch.Tensor, *, N: int, d: int) -> dict[str, torch.Tensor]:
    """The inputs cos and sin, (N, d/2): cos and sin of n * THETA^(-2i/d) for positions n < N and pairs
    i < d/2, in float64 (the grader casts them to the spec's float32). A model builds them once for all
    layers; they are fixed by N and d, so the drawn values `x` are not used."""
    inv_freq = THETA ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = torch.outer(torch.arange(N, dtype=torch.float64), inv_freq)
    return {"cos": angles.cos(), "sin": angles.sin()}


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (B, N, H, d), any strides; cos, sin: (N, d/2). Hugging Face's apply_rotary_pos_emb, with the
    tables cast to x's dtype as it does."""
    cos = torch.cat((cos, cos), dim=-1)[:, None, :].to(x.dtype)  # (N, 1, d): broadcast over B and H
    sin = torch.cat((sin, sin), dim=-1)[:, None, :].to(x.dtype)
    return x * cos + rotate_half(x) * sin
