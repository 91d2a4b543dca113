"""Reference: the fused residual add + RMS norm of a pre-norm transformer block, eps = 1e-6.

    residual_out = x + residual                       rounded once to the inputs' dtype (it is stored)
    out          = rms_norm(residual_out) * weight    from the STORED residual_out, in higher precision

This is what vLLM's fused_add_rms_norm grades itself against: the sum is the next layer's residual stream,
kept in the storage dtype, and the norm reads that stored value. The grader calls this on float64 copies of
the inputs with the case's `dtype`, so the float64 sum is rounded to the storage dtype first (exact for
bfloat16 and float16 inputs, whose sums float64 holds exactly); on the GPU it is called in the case's dtype
as the eager PyTorch pair your kernel is timed against (the rounding is then a no-op)."""

import torch

EPS = 1e-6


def reference(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, *, dtype: str = "float32"):
    residual_out = (x + residual).to(getattr(torch, dtype)).to(x.dtype)
    out = torch.nn.functional.rms_norm(residual_out, (x.shape[-1],), weight, eps=EPS)
    return out, residual_out
