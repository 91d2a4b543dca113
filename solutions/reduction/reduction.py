"""Solution — a float32 sum of a very large array in two stages (day 40: multi-stage reduction).

Stage 1: programs walk x with a grid stride of whole BLOCKs (unmasked, so 16-byte vector loads), each
lane adding into its own float32 register; program 0 also takes the ragged tail with a mask. Each
program writes one partial sum. Stage 2: one program loads every partial (one block) and writes their
sum to out[0]. Each program takes about BLOCKS_PER_PROGRAM blocks (at most MAX_PARTIALS programs): many
programs, so the last wave of a big grid is a small share of the time, and few partials.

No atomics: the same n gives the same programs, the same order of additions and the same bits on every
run and every GPU. Summing in a tree of lanes, programs and partials keeps float32 error near
sqrt(n) * 2^-24, where one long chain of 2^28 additions would stop growing at 2^24."""

import torch
import triton
import triton.language as tl

BLOCKS_PER_PROGRAM = 8  # enough work per program to hide its start and its final tl.sum
MAX_PARTIALS = 8192  # 2^28 elements: 8192 programs of 8 blocks (~10 waves on an H100); stage 2 is one 32 KB load


@triton.jit
def partial_sums_kernel(x_ptr, partials_ptr, n, n_programs, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    lanes = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for block in range(pid, n // BLOCK, n_programs):  # full blocks only: no mask
        acc += tl.load(x_ptr + block * BLOCK + lanes)
    tail = (n // BLOCK) * BLOCK + lanes  # the last n % BLOCK elements: program 0's, the others load nothing
    tail_end = tl.where(pid == 0, n, 0)
    acc += tl.load(x_ptr + tail, mask=tail < tail_end, other=0.0)
    tl.store(partials_ptr + pid, tl.sum(acc, axis=0))


@triton.jit
def final_sum_kernel(partials_ptr, out_ptr, n_partials, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    partials = tl.load(partials_ptr + offsets, mask=offsets < n_partials, other=0.0)
    tl.store(out_ptr, tl.sum(partials, axis=0))


def reduction(
    x: torch.Tensor, out: torch.Tensor, n: int, BLOCK: int = 4096, num_warps: int = 8, max_partials: int = MAX_PARTIALS
) -> None:
    """out[0] = x[0] + ... + x[n-1] (float32)."""
    n_programs = max(1, min(triton.cdiv(n, BLOCK * BLOCKS_PER_PROGRAM), max_partials))
    partials = torch.empty(n_programs, dtype=torch.float32, device=x.device)
    partial_sums_kernel[(n_programs,)](x, partials, n, n_programs, BLOCK=BLOCK, num_warps=num_warps)
    final_sum_kernel[(1,)](partials, out, n_programs, BLOCK=triton.next_power_of_2(n_programs), num_warps=8)
