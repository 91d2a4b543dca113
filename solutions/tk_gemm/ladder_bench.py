"""The README ladder of tk_gemm, measured: each rung's kernel (solutions/tk_gemm/ladder/step*.cu), the solution
(step 6) and cuBLAS (torch.matmul, bf16) in one process, at 4096^3 and 8192^3 bf16: ms, TFLOP/s, % of cuBLAS,
and whether the result matches. Not a test and not graded: an instructor's tool for the README's figures and
the spec's threshold. Hopper GPU and ThunderKittens (KCOURSE_TK_ROOT) needed.

    KCOURSE_TK_ROOT=.tk python solutions/tk_gemm/ladder_bench.py [--quick]   (--quick: skip step 1 at 8192^3)
"""

import ctypes
import sys
from pathlib import Path

import torch
from triton.testing import do_bench

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))
from grader.toolchain import build, thunderkittens  # noqa: E402

RUNGS = [
    ("1 WMMA (warp mma.sync), 64x64, no overlap", HERE / "ladder" / "step1_wmma.cu"),
    ("2 WGMMA from shared memory", HERE / "ladder" / "step2_wgmma.cu"),
    ("3 TMA + double buffering", HERE / "ladder" / "step3_tma_double_buffer.cu"),
    ("4 producer / consumer warpgroups, 4 stages", HERE / "ladder" / "step4_producer_consumer.cu"),
    ("5 two consumers, 128x256 tiles, TMA store", HERE / "ladder" / "step5_two_consumers.cu"),
    ("6 solution: persistent, L2-grouped (lcf)", HERE / "tk_gemm.cu"),
]


def load(source: Path):
    built = build.build_shared_library(source, build.gpu_arch(), requires=["thunderkittens"])
    if not built.ok:
        raise RuntimeError(f"{source.name} did not build: {built.log}")
    fn = ctypes.CDLL(built.library).tk_gemm
    fn.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 3
    fn.restype = None
    return fn


def bench(size: int, kernels: dict, quick: bool) -> None:
    torch.manual_seed(0)
    A = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    B = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    C = torch.empty(size, size, device="cuda", dtype=torch.bfloat16)
    flops = 2 * size**3
    want = torch.matmul(A, B)
    cublas_ms = do_bench(lambda: torch.matmul(A, B))
    print(f"\n{size}^3 bf16: torch.matmul (cuBLAS) {cublas_ms:.3f} ms, {flops / cublas_ms / 1e9:.0f} TFLOP/s")
    for name, fn in kernels.items():
        if quick and size > 4096 and name.startswith("1 "):
            continue
        call = lambda: fn(A.data_ptr(), B.data_ptr(), C.data_ptr(), size, size, size)  # noqa: E731
        C.fill_(float("nan"))
        call()
        torch.cuda.synchronize()
        ok = torch.allclose(C.float(), want.float(), rtol=1e-2, atol=1e-1)
        ms = do_bench(call, rep=300 if name.startswith("1 ") else 100)
        print(
            f"  {name:48s} {ms:8.3f} ms {flops / ms / 1e9:6.0f} TFLOP/s {100 * cublas_ms / ms:5.1f}% of cuBLAS"
            f"{'' if ok else '  WRONG RESULT'}"
        )


if __name__ == "__main__":
    found = thunderkittens.find()
    if not found.found:
        sys.exit(found.problem)
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "ThunderKittens", found.version, found.commit)
    kernels = {name: load(source) for name, source in RUNGS}
    for size in (4096, 8192):
        bench(size, kernels, "--quick" in sys.argv)
