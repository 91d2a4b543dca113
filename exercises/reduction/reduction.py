"""Day 40 — multi-stage reduction in Triton: the float32 sum of a very large array, no atomics.

Stage 1: each program sums its share of x into one partial (a float32 per program). Stage 2: one
program sums the partials into out[0]. Two launches, no atomics: the same n gives the same bits on
every run. Read README.md ("The Triton version") for the ladder. Grade with:
kcourse grade reduction --lang triton
"""

import torch
import triton
import triton.language as tl


@triton.jit
def partial_sums_kernel(x_ptr, partials_ptr, n, n_programs, BLOCK: tl.constexpr):
    # TODO: pid = tl.program_id(0); acc = tl.zeros([BLOCK], dtype=tl.float32)   (a float32 per lane)
    #       Walk the array in blocks with a grid stride: blocks pid, pid + n_programs, pid + 2 * n_programs, ...
    #         offsets = block * BLOCK + tl.arange(0, BLOCK); acc += tl.load(x_ptr + offsets, mask=offsets < n, other=0.0)
    #       (faster: full blocks without a mask, then the ragged tail once, masked, by one program)
    #       tl.store(partials_ptr + pid, tl.sum(acc, axis=0))
    pass


@triton.jit
def final_sum_kernel(partials_ptr, out_ptr, n_partials, BLOCK: tl.constexpr):
    # TODO: one program: load the n_partials partials (masked, other=0.0), tl.store(out_ptr, their tl.sum)
    pass


def reduction(x: torch.Tensor, out: torch.Tensor, n: int, BLOCK: int = 1024, num_warps: int = 4) -> None:
    """out[0] = x[0] + ... + x[n-1] (float32; out holds NaN when you are called). BLOCK and num_warps are
    yours to tune (`kcourse tune reduction --lang triton`)."""
    # TODO: n_programs = min(triton.cdiv(n, BLOCK), 1024); partials = torch.empty(n_programs, ...) on x's device;
    #       launch partial_sums_kernel over n_programs programs, then final_sum_kernel over one program
    #       (BLOCK = triton.next_power_of_2(n_programs)); then delete the line below.
    raise NotImplementedError("write the two kernels and launch them in reduction()")
