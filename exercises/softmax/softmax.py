"""Week 5 — fused row softmax in Triton.

Each program handles one row: load it (masked), subtract its max, exponentiate, divide by the sum,
store. Read README.md for the details. Grade with: kcourse grade week5 softmax
"""

import torch
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, out_ptr, x_row_stride, out_row_stride, n_cols, BLOCK: tl.constexpr):
    # TODO: row = tl.program_id(0); cols = tl.arange(0, BLOCK); mask = cols < n_cols
    #       x = tl.load(..., mask=mask, other=-float("inf")).to(tl.float32)
    #       subtract the max, exp, divide by the sum, tl.store(..., mask=mask)
    pass


def softmax(x: torch.Tensor, out: torch.Tensor, num_warps: int = 4) -> None:
    """out[:] = softmax(x, dim=-1) for a 2-D x. num_warps is yours to tune (`kcourse tune softmax`)."""
    # TODO: launch softmax_kernel with one program per row and BLOCK = triton.next_power_of_2(n_cols),
    #       then delete the line below.
    raise NotImplementedError("write softmax_kernel and launch it in softmax()")
