"""Solution — three ops in one kernel: out = gelu(x * scale[col] + shift[col]), exact (erf) GELU.

Eager PyTorch runs `x * scale`, `+ shift` and `F.gelu` as three kernels, each reading an M x N tensor and
writing one: 6 MN elements cross HBM. Here each element of x is read once and out written once (2 MN), and
the two intermediates live only in registers, in float32, so the result is rounded once, at the store.

Each program takes a BLOCK_M x BLOCK_N tile: scale and shift are loaded once per tile (BLOCK_N of each, an
L2 hit after the first tiles) and broadcast down its rows. A tile is 16 KB of x whatever the dtype, so each
of the 8 warps' threads holds four 16-byte vectors in flight; columns are the tile's fast axis, so the loads
vectorise whenever the row stride is a multiple of 16 bytes (Triton specialises the stride argument on
that). Row offsets are int64: row * stride passes 2^31 elements on the largest tensors a GPU holds.
"""

import torch
import triton
import triton.language as tl

SQRT1_2 = tl.constexpr(0.7071067811865476)
TILE_BYTES = 16384  # of x per program: 4 x 16-byte vectors for each of 256 threads
MAX_BLOCK_N = 1024


# erf in 11 instructions (a degree-7 polynomial and one exp2), where libdevice's erff (tl.math.erf) takes about
# 28: in 16-bit dtypes an H200's memory delivers elements faster than its ALUs get through those (README, ladder
# step 4). erfc(a) ~ 2^p(a) for a = |x| in [0, 4], p fitted to log2(erfc) with p(0) = 0 (minimax of erf's
# absolute error): erf is within 8e-8, 1.6e-7 in float32 arithmetic, and the GELU's error is |t| / 2 times that,
# about 2% of float32's tolerance at most. At a = 4, 2^p < 2^-25 and 1 - 2^p rounds to exactly 1: the GELU is
# exactly t far right and exactly 0 far left, never NaN.
@triton.jit
def erf(x):
    a = tl.minimum(tl.abs(x), 4.0)  # p holds on [0, 4] only; erf is +-1 in float32 from |x| = 3.93 anyway
    p = tl.fma(a, 1.0022153e-04, -4.6157712e-04)  # tl.fma: one instruction whatever the fp-fusion setting
    p = tl.fma(p, a, -2.3022252e-03)
    p = tl.fma(p, a, 2.9452497e-02)
    p = tl.fma(p, a, -1.4896366e-01)
    p = tl.fma(p, a, -9.1832864e-01)
    p = tl.fma(p, a, -1.6279137e00)
    r = 1.0 - tl.exp2(p * a)  # erf(a) = 1 - erfc(a)
    sign = x.to(tl.uint32, bitcast=True) & 0x80000000  # copysign(r, x): one LOP3 (a compare and a select: two)
    return (r.to(tl.uint32, bitcast=True) | sign).to(tl.float32, bitcast=True)


@triton.jit
def fusion_kernel(
    x_ptr,
    scale_ptr,
    shift_ptr,
    out_ptr,
    n_rows,
    n_cols,
    x_stride,
    out_stride,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    mask = (rows < n_rows)[:, None] & col_ok[None, :]
    rows64 = rows.to(tl.int64)[:, None]
    x = tl.load(x_ptr + rows64 * x_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    # one scale and one shift per column, the same for every row of the tile
    scale = tl.load(scale_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    shift = tl.load(shift_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    t = x * scale[None, :] + shift[None, :]  # float32, never rounded to the storage dtype
    y = 0.5 * t * (1.0 + erf(t * SQRT1_2))
    tl.store(out_ptr + rows64 * out_stride + cols[None, :], y.to(out_ptr.dtype.element_ty), mask=mask)


def tile_for(n_cols: int, element_size: int) -> tuple[int, int]:
    """(BLOCK_M, BLOCK_N): up to 1024 columns, and as many rows as make 16 KB of x."""
    block_n = min(triton.next_power_of_2(n_cols), MAX_BLOCK_N)
    return max(1, TILE_BYTES // element_size // block_n), block_n


def fusion(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor, out: torch.Tensor, num_warps: int = 8) -> None:
    n_rows, n_cols = x.shape
    block_m, block_n = tile_for(n_cols, x.element_size())
    grid = (triton.cdiv(n_rows, block_m), triton.cdiv(n_cols, block_n))
    fusion_kernel[grid](
        x,
        scale,
        shift,
        out,
        n_rows,
        n_cols,
        x.stride(0),
        out.stride(0),
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        num_warps=num_warps,
    )
