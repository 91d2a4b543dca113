"""The README ladder of matmul_triton, measured: each step's kernel, the solution's two paths and cuBLAS
(torch.matmul) at 8192^3 bfloat16 (and 4096^3 float16), in TFLOP/s and % of cuBLAS. Not a test and
not graded: an instructor's tool for the README's "about P% of roofline" figures. GPU only.

    python solutions/matmul_triton/ladder_bench.py [--quick]     (--quick: skip step 1, which takes ~1 min)
"""

import sys
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parent))
import matmul_triton as solution  # noqa: E402
from matmul_triton import grouped_tile  # noqa: E402


@triton.jit
def naive_kernel(a_ptr, b_ptr, c_ptr, M, N, K, s_am, s_ak, s_bk, s_bn, s_cm, s_cn, BM: tl.constexpr, BN: tl.constexpr):
    """Step 1: one tile per program, one rank-1 update per k on the CUDA cores."""
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(K):
        a = tl.load(a_ptr + rows * s_am + k * s_ak, mask=rows < M, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + k * s_bk + cols * s_bn, mask=cols < N, other=0.0).to(tl.float32)
        acc += a[:, None] * b[None, :]
    tl.store(
        c_ptr + rows[:, None] * s_cm + cols[None, :] * s_cn,
        acc.to(c_ptr.dtype.element_ty),
        mask=(rows[:, None] < M) & (cols[None, :] < N),
    )


@triton.jit
def tiled_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    s_am,
    s_ak,
    s_bk,
    s_bn,
    s_cm,
    s_cn,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    """Steps 2 and 3: tl.dot over a masked K loop; GROUP_M = 0 is a 2-D grid in row-major order."""
    if GROUP_M == 0:
        pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    else:
        pid_m, pid_n = grouped_tile(tl.program_id(0), tl.cdiv(M, BM), tl.cdiv(N, BN), GROUP_M)
    rows = pid_m * BM + tl.arange(0, BM)
    cols = pid_n * BN + tl.arange(0, BN)
    ks = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(
            a_ptr + rows[:, None] * s_am + (k0 + ks)[None, :] * s_ak,
            mask=(rows[:, None] < M) & ((k0 + ks)[None, :] < K),
            other=0.0,
        )
        b = tl.load(
            b_ptr + (k0 + ks)[:, None] * s_bk + cols[None, :] * s_bn,
            mask=((k0 + ks)[:, None] < K) & (cols[None, :] < N),
            other=0.0,
        )
        acc = tl.dot(a, b, acc)
    tl.store(
        c_ptr + rows[:, None] * s_cm + cols[None, :] * s_cn,
        acc.to(c_ptr.dtype.element_ty),
        mask=(rows[:, None] < M) & (cols[None, :] < N),
    )


def strides(A, B, C):
    return (A.stride(0), A.stride(1), B.stride(0), B.stride(1), C.stride(0), C.stride(1))


def naive(A, B, C):
    M, K = A.shape
    N = B.shape[1]
    naive_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 32))](A, B, C, M, N, K, *strides(A, B, C), BM=32, BN=32)


def tiled(bm, bn, bk, group, warps=4, stages=3):
    def run(A, B, C):
        M, K = A.shape
        N = B.shape[1]
        tiles = (triton.cdiv(M, bm), triton.cdiv(N, bn))
        grid = tiles if group == 0 else (tiles[0] * tiles[1],)
        tiled_kernel[grid](
            A, B, C, M, N, K, *strides(A, B, C), BM=bm, BN=bn, BK=bk, GROUP_M=group, num_warps=warps, num_stages=stages
        )

    return run


STEPS = [
    ("1 naive rank-1 updates, 32x32", naive),
    ("2 tl.dot + K masks, 64x64x32, row-major grid", tiled(64, 64, 32, 0)),
    ("2b tl.dot + K masks, 128x128x64, row-major grid", tiled(128, 128, 64, 0, warps=4, stages=3)),
    ("3a grouped (GROUP_M=8), 64x64x32", tiled(64, 64, 32, 8)),
    ("3 grouped (GROUP_M=8), 128x128x64", tiled(128, 128, 64, 8, warps=4, stages=3)),
    ("4 autotuned tutorial kernel (solution.with_pointers)", solution.with_pointers),
    ("5 TMA + persistent, autotuned (solution.with_tma)", solution.with_tma),
    ("solution.matmul (the faster of 4 and 5 per shape)", solution.matmul),
]


def bench(size, dtype, quick):
    torch.manual_seed(0)
    A = torch.randn(size, size, device="cuda", dtype=dtype)
    B = torch.randn(size, size, device="cuda", dtype=dtype)
    C = torch.empty(size, size, device="cuda", dtype=dtype)
    flops = 2 * size**3
    want = (A.float() @ B.float()).to(dtype)
    cublas_ms = do_bench(lambda: torch.matmul(A, B))
    print(
        f"\n{size}^3 {str(dtype).removeprefix('torch.')}: torch.matmul (cuBLAS) {cublas_ms:.3f} ms, "
        f"{flops / cublas_ms / 1e9:.0f} TFLOP/s"
    )
    for name, fn in STEPS:
        if quick and name.startswith("1 "):
            continue
        C.fill_(float("nan"))
        try:
            fn(A, B, C)
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 (report and go on to the next step)
            print(f"  {name:58s} FAILED: {type(exc).__name__}: {str(exc)[:500]}")
            continue
        ok = torch.allclose(C.float(), want.float(), rtol=1e-2, atol=1e-1)
        ms = do_bench(lambda: fn(A, B, C), rep=300 if name.startswith("1 ") else 100)
        print(
            f"  {name:58s} {ms:8.3f} ms {flops / ms / 1e9:6.0f} TFLOP/s {100 * cublas_ms / ms:5.1f}% of cuBLAS"
            f"{'' if ok else '  WRONG RESULT'}"
        )
    print(
        f"  autotuned: pointer {solution.matmul_kernel.best_config}; TMA {solution.matmul_tma_kernel.best_config}; "
        f"matmul() uses TMA: {solution.TMA_WINS}"
    )


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__)
    bench(8192, torch.bfloat16, quick)
    bench(4096, torch.float16, quick=True)
