"""tk_attention measured beside torch's scaled_dot_product_attention: the solution (and the WGMMA rung of the
ladder, solutions/tk_attention/ladder/step2_wgmma.cu) at N = 4096 and 8192, d = 64 and 128, causal and not, bf16:
ms, TFLOP/s, % of SDPA, and whether the result matches SDPA's. Not a test and not graded: an instructor's tool
for the README's figures and the spec's threshold. Hopper GPU and ThunderKittens (KCOURSE_TK_ROOT) needed.

    KCOURSE_TK_ROOT=.tk python solutions/tk_attention/bench.py [--quick]   (--quick: N = 4096 only, no rung)
"""

import ctypes
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from triton.testing import do_bench

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))
from grader.toolchain import build, thunderkittens  # noqa: E402

KERNELS = [("solution", HERE / "tk_attention.cu"), ("step 2: WGMMA, synchronous", HERE / "ladder" / "step2_wgmma.cu")]
HEADS = 32  # B = 4 at N = 4096 (the grader's verdict size), 2 at N = 8192: the same number of tokens


def load(source: Path):
    built = build.build_shared_library(source, build.gpu_arch(), requires=["thunderkittens"])
    if not built.ok:
        raise RuntimeError(f"{source.name} did not build: {built.log}")
    fn = ctypes.CDLL(built.library).tk_attention
    fn.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int] * 5
    fn.restype = None
    return fn


def bench(n: int, d: int, causal: bool, kernels: dict) -> None:
    torch.manual_seed(0)
    batch = 4 * 4096 // n
    q, k, v = (torch.randn(batch, HEADS, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out = torch.empty_like(q)
    flops = 4 * batch * HEADS * n * n * d * (0.5 if causal else 1.0)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    sdpa_ms = do_bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    print(
        f"\nB={batch} H={HEADS} N={n} d={d} {'causal' if causal else 'non-causal'}: SDPA {sdpa_ms:.3f} ms, "
        f"{flops / sdpa_ms / 1e9:.0f} TFLOP/s"
    )
    for name, fn in kernels.items():
        pointers = (q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr())
        call = lambda: fn(*pointers, batch, HEADS, n, d, int(causal))  # noqa: E731
        out.fill_(float("nan"))
        call()
        torch.cuda.synchronize()
        error = (out.float() - want.float()).abs().max().item()
        ok = torch.allclose(out.float(), want.float(), rtol=2e-2, atol=2e-2)
        ms = do_bench(call)
        print(
            f"  {name:30s} {ms:8.3f} ms {flops / ms / 1e9:6.0f} TFLOP/s {100 * sdpa_ms / ms:5.1f}% of SDPA"
            f"  max error {error:.2e}{'' if ok else '  WRONG RESULT'}"
        )


if __name__ == "__main__":
    found = thunderkittens.find()
    if not found.found:
        sys.exit(found.problem)
    quick = "--quick" in sys.argv
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "ThunderKittens", found.version, found.commit)
    kernels = {name: load(source) for name, source in (KERNELS[:1] if quick else KERNELS)}
    for n in (4096,) if quick else (4096, 8192):
        for d in (64, 128):
            for causal in (False, True):
                bench(n, d, causal, kernels)
