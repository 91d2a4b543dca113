"""Week 4 — vector addition in Triton.

One program handles BLOCK consecutive elements: it computes its offsets from tl.program_id, masks the
ones past n, loads a and b, adds, and stores into c. Grade with: kcourse grade week4 vector_add
"""

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(a_ptr, b_ptr, c_ptr, n, BLOCK: tl.constexpr):
    # TODO: offsets = program id * BLOCK + tl.arange(0, BLOCK); mask = offsets < n;
    #       load a and b with the mask, add, store into c with the mask.
    pass


def vector_add(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, BLOCK: int = 1024, num_warps: int = 4) -> None:
    """c[:] = a + b, computed by add_kernel. BLOCK and num_warps are yours to tune (`kcourse tune`)."""
    # TODO: launch add_kernel over triton.cdiv(n, BLOCK) programs, then delete the line below.
    raise NotImplementedError("write add_kernel and launch it in vector_add()")
