"""Micro-benchmark: the exact GELU with libdevice's erf (`tl.math.erf`) against fusion.py's `erf` (seven FMAs and
one exp2), each in the same plain elementwise kernel, beside a copy of the same bytes.

    python solutions/fusion/erf_bench.py                      # GPU: GB/s, % of copy, errors (16384 x 8192 bf16)
    python solutions/fusion/erf_bench.py --dtype float32      # the same at 4 bytes an element
    TRITON_INTERPRET=1 python solutions/fusion/erf_bench.py   # no GPU: the errors only, under the interpreter

In 16-bit dtypes an element is 4 bytes of traffic, and a GPU whose memory outruns its ALUs (an H200) has fewer
instructions per element than libdevice's erff and the rest of the kernel need: the GELU runs below copy
bandwidth. Errors are against torch's float64 GELU of the same input: on the benchmark's N(0, 1) data stored in
its dtype, and on a dense float32 grid of t in [-40, 40] stored in float32 (the erf's own error), as the share of
the spec's tolerance used (|err| / (atol + rtol |ref|): 1 is the limit) and with the tails checked.
"""

import argparse
import os
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fusion import erf  # noqa: E402  (the solution's erf, imported from the file beside this one)

SQRT1_2 = tl.constexpr(0.7071067811865476)
TOLERANCE = {torch.float32: (1e-5, 1e-5), torch.float16: (1e-5, 7.3e-4), torch.bfloat16: (1e-5, 5.9e-3)}  # the spec's
BLOCK = 4096


@triton.jit
def gelu_kernel(x_ptr, out_ptr, n, FAST: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    t = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    if FAST:
        e = erf(t * SQRT1_2)
    else:
        e = tl.math.erf(t * SQRT1_2)
    tl.store(out_ptr + offs, (0.5 * t * (1.0 + e)).to(out_ptr.dtype.element_ty), mask=mask)


def gelu(x: torch.Tensor, fast: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    out = torch.empty_like(x) if out is None else out
    gelu_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, out, x.numel(), FAST=fast, BLOCK=BLOCK, num_warps=8)
    return out


def tolerance_used(x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """(max |y - gelu(x)|, its largest share of the spec's tolerance for y's dtype), against float64."""
    atol, rtol = TOLERANCE[y.dtype]
    ref = torch.nn.functional.gelu(x.double())
    err = (y.double() - ref).abs()
    return err.max().item(), (err / (atol + rtol * ref.abs())).max().item()


def grid_errors(fast: bool, device: str, points: int) -> str:
    t = torch.linspace(-40, 40, points, device=device)
    y = gelu(t, fast)
    max_abs, used = tolerance_used(t, y)
    ref = torch.nn.functional.gelu(t.double())
    big = ref.abs() >= 1e-3  # relative error where it means something: elsewhere the atol governs
    max_rel = ((y.double() - ref).abs()[big] / ref.abs()[big]).max().item()
    tails_ok = bool((y[t <= -30] == 0).all() and (y[t >= 30] == t[t >= 30]).all() and not y.isnan().any())
    return (
        f"float32 grid: max abs {max_abs:.2e}, max rel {max_rel:.2e} (|gelu| >= 1e-3), tolerance used "
        f"{used:.3f}, tails exact (0 at t <= -30, t at t >= 30, no NaN): {tails_ok}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--rows", type=int, default=16_384)
    parser.add_argument("--cols", type=int, default=8192)
    args = parser.parse_args()
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    if not interpreted and not torch.cuda.is_available():
        sys.exit("no GPU: run it on one, or set TRITON_INTERPRET=1 for the errors alone")
    device = "cpu" if interpreted else "cuda"
    names = {False: "GELU, tl.math.erf (libdevice)", True: "GELU, fusion.py's erf"}
    grid_points = 1_000_001 if interpreted else 16_000_001
    if interpreted:
        print("under the interpreter tl.math.erf is Python's math.erf (double precision), not libdevice's erff")
        for fast, name in names.items():
            print(f"{name:32s} {grid_errors(fast, device, grid_points)}")
        return

    dtype = getattr(torch, args.dtype)
    x = torch.randn(args.rows, args.cols, device=device, dtype=dtype)
    out = torch.empty_like(x)
    nbytes = 2 * x.numel() * x.element_size()
    copy_ms = triton.testing.do_bench(lambda: out.copy_(x), rep=500)
    copy_gbps = nbytes / copy_ms / 1e6
    print(f"{torch.cuda.get_device_name()}, {args.rows} x {args.cols} {args.dtype} ({nbytes / 1e6:.0f} MB moved):")
    print(f"  {'copy (out.copy_(x))':32s} {copy_ms * 1000:8.1f} us {copy_gbps:6.0f} GB/s")
    for fast, name in names.items():
        ms = triton.testing.do_bench(lambda: gelu(x, fast, out), rep=500)
        gbps = nbytes / ms / 1e6
        max_abs, used = tolerance_used(x, gelu(x, fast, out))
        print(
            f"  {name:32s} {ms * 1000:8.1f} us {gbps:6.0f} GB/s {100 * gbps / copy_gbps:4.0f}% of copy; "
            f"{args.dtype} data: max abs {max_abs:.2e}, tolerance used {used:.3f}"
        )
        print(f"  {'':32s} {grid_errors(fast, device, grid_points)}")


if __name__ == "__main__":
    main()
