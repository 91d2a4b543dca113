"""Day 41 — the fused residual add + RMS norm of a pre-norm transformer block, in Triton.

Each program handles one row: load x and residual, add them in float32, round the sum to the storage dtype
and store it as residual_out (the next layer's residual stream), then take the RMS norm of that stored value
in float32, times weight, and store out. One read of each input, one write of each output. eps is 1e-6.
Read README.md for the details. Grade with: kcourse grade add_rms_norm
"""

import torch
import triton
import triton.language as tl

EPS = 1e-6


@triton.jit
def add_rms_norm_kernel(
    x_ptr,
    res_ptr,
    w_ptr,
    out_ptr,
    res_out_ptr,
    x_stride,
    res_stride,
    out_stride,
    res_out_stride,
    n_cols,
    eps,
    BLOCK: tl.constexpr,
):
    # TODO: row = tl.program_id(0).to(tl.int64); cols = tl.arange(0, BLOCK); mask = cols < n_cols
    #       x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)   (residual the same)
    #       r = (x + h).to(res_out_ptr.dtype.element_ty)    # rounded once to the storage dtype: store this
    #       tl.store(res_out_ptr + row * res_out_stride + cols, r, mask=mask)
    #       rf = r.to(tl.float32)                           # the norm reads the STORED sum, in float32
    #       rstd = 1.0 / tl.sqrt(tl.sum(rf * rf, axis=0) / n_cols + eps)     # the mean of the squares
    #       tl.store(out_ptr + ..., (rf * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)
    pass


def add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    out: torch.Tensor,
    residual_out: torch.Tensor,
    num_warps: int = 4,
) -> None:
    """residual_out[:] = x + residual; out[:] = rms_norm(residual_out) * weight over the last dimension of
    2-D tensors, eps = 1e-6. Each tensor has its own row stride (x.stride(0), ...). num_warps is yours to
    tune (`kcourse tune add_rms_norm`)."""
    # TODO: launch add_rms_norm_kernel with one program per row and BLOCK = triton.next_power_of_2(n_cols)
    #       (rows longer than a block of registers need a loop over column blocks: see README.md),
    #       then delete the line below.
    raise NotImplementedError("write add_rms_norm_kernel and launch it in add_rms_norm()")
