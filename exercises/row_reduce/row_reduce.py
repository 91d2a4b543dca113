"""Day 33 — row reductions in Triton: the sum, the max and the index of the max of every row.

Rows are long (up to ~1M elements), far more than one block of registers holds: a program loops over its
row BLOCK elements at a time and carries running values from block to block — a float32 sum and a
(max, index) pair. Read README.md for the rules (first index wins, -inf, strides). Grade with:
kcourse grade row_reduce
"""

import torch
import triton
import triton.language as tl


@triton.jit
def row_reduce_kernel(x_ptr, sums_ptr, maxes_ptr, argmaxes_ptr, n_cols, x_row_stride, BLOCK: tl.constexpr):
    # TODO: row = tl.program_id(0); the row starts at x_ptr + row * x_row_stride (not row * n_cols).
    #       Keep per-lane running values across the loop:
    #         run_sum = tl.zeros([BLOCK], dtype=tl.float32)
    #         run_max = tl.full([BLOCK], float("-inf"), dtype=tl.float32); run_idx = tl.arange(0, BLOCK)
    #       for start in range(0, n_cols, BLOCK):
    #         cols = start + tl.arange(0, BLOCK); mask = cols < n_cols
    #         x = tl.load(..., mask=mask, other=float("-inf")).to(tl.float32)   # -inf: never the max
    #         run_sum += tl.where(mask, x, 0.0)                                   # 0: adds nothing
    #         update run_max / run_idx where x is STRICTLY greater (so the first of equal values stays)
    #       Then reduce the lanes: tl.sum(run_sum), best = tl.max(run_max), and the argmax is the smallest
    #       run_idx among lanes whose run_max == best. Store the three (tl.store converts the dtypes).
    pass


def row_reduce(
    x: torch.Tensor,
    sums: torch.Tensor,
    maxes: torch.Tensor,
    argmaxes: torch.Tensor,
    BLOCK: int = 1024,
    num_warps: int = 4,
) -> None:
    """sums[i] = x[i].sum() (float32), maxes[i] = x[i].max() (x's dtype), argmaxes[i] = the first index of
    that max (int64), for a 2-D x whose rows may be a slice of a wider tensor. BLOCK and num_warps are yours
    to tune (`kcourse tune row_reduce`)."""
    # TODO: launch row_reduce_kernel with one program per row (x.shape[0]) and x.stride(0), then delete
    #       the line below. For a few very long rows, see the README's last ladder step.
    raise NotImplementedError("write row_reduce_kernel and launch it in row_reduce()")
