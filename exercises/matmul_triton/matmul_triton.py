"""Triton matmul — C = A @ B with block tiling, grouped program ordering and autotuning.

A is M x K, B is K x N, C is M x N, all float16 or all bfloat16; accumulate in float32, store in C's
dtype. M, N and K are not multiples of any block size, and any of the three may be a strided view
(B transposed, C a slice of a wider tensor): index with the strides. Read README.md (its ladder goes
from a first correct kernel to cuBLAS speed). Grade with: kcourse grade matmul_triton
"""

import os

import torch
import triton
import triton.language as tl

# The grader runs Triton under the interpreter on a machine without a GPU (TRITON_INTERPRET=1). There
# @triton.autotune would time every config on every new shape, on the CPU: give it one config there.
ON_CPU = os.environ.get("TRITON_INTERPRET") == "1"
GPU_CONFIGS = [
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8}, num_stages=3, num_warps=4),
    # TODO (ladder step 4): add the configs that suit your GPU (bigger tiles, more stages, 8 warps)
]
CPU_CONFIGS = [triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 2})]


@triton.autotune(configs=CPU_CONFIGS if ON_CPU else GPU_CONFIGS, key=["M", "N", "K"])
@triton.jit
def matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,  # A[m, k] is at a_ptr + m * stride_am + k * stride_ak
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    # TODO: from tl.program_id(0), find this program's tile (pid_m, pid_n) of C, in groups of GROUP_M
    #       tile-rows (README step 3); offsets of its rows, columns and of BLOCK_K values of k.
    #       acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    #       loop over K in BLOCK_K steps: load a BLOCK_M x BLOCK_K tile of A and a BLOCK_K x BLOCK_N tile
    #       of B (masked, other=0.0, where they hang over an edge), acc = tl.dot(a, b, acc).
    #       Store acc.to(c_ptr.dtype.element_ty) with a mask for the rows >= M and columns >= N.
    pass


def matmul(A: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> None:
    """C[:] = A @ B. The block sizes come from the autotuner: the grid is a function of them."""
    # TODO: launch matmul_kernel over cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N) programs, e.g.
    #       grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
    #       passing A.stride(0), A.stride(1), ..., then delete the line below.
    raise NotImplementedError("write matmul_kernel and launch it in matmul()")
