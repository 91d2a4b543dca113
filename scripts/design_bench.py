"""A solution's design options timed beside its PyTorch anchor and a copy, on a GPU: the evidence for its defaults.

    python3 scripts/design_bench.py scan | scan-trace | histogram | layer_norm_backward | flash | flash-backward |
                                    flash-cuda

scan: solutions/scan/scan.cu's default build beside a few others of its defines (as `kcourse tune scan` builds
them); scan-trace: its TRACE builds' per-tile phase times (loads, look-back, stores), to see where the time goes. histogram (Triton) and layer_norm_backward: the solutions with their keyword options (tiles, warps, programs
an SM); for the histogram also tl.histogram counting with no loads at all (scripts/design_kernels.py), its ceiling;
flash (flash-backward): the Triton FA2 forward's (backward's) tile configurations beside torch's SDPA (its backward),
in TFLOP/s and % of SDPA's speed; flash-cuda: the CUDA FA2 forward's kernel beside scripts/fa2_forward_cuda.cu's
builds and SDPA. Run from the repository root, on a GPU.
Every candidate is checked against PyTorch first, into poisoned outputs (a wrong one is named and
dropped), then all are timed alternately in one process (grader.child.timing: L2 flushed, median) with the anchor, and
printed fastest first in GB/s and % of the measured copy bandwidth.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]
import design_kernels  # noqa: E402

from grader.child import timing  # noqa: E402
from grader.toolchain.build import build_shared_library, gpu_arch  # noqa: E402

SCAN_BUILDS = [
    {"ITEMS": 28},
    {"SPREAD": 0},
    {"ITEMS": 16},
    {"READS": 2},  # beside the default (1024 x 24, SPREAD_MIN=6)
    {"SPREAD_MIN": 1},
    {"SPREAD_MIN": 4},
]  # mid sizes: one tile a block (the old default) and four


def solution_module(path: str):
    spec = importlib.util.spec_from_file_location(Path(path).stem + "_solution", ROOT / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def correct_only(
    candidates: dict[str, Callable[[], None]], poison: Callable[[], None], is_right: Callable[[], bool]
) -> dict[str, Callable]:
    """Runs each candidate once into poisoned outputs and keeps those whose output is right (their calls, without
    the poisoning, are what gets timed); a build or launch that fails is named."""
    kept = {}
    for name, run in candidates.items():
        try:
            poison()
            run()
            torch.cuda.synchronize()
            right = is_right()
        except Exception as error:  # too much shared memory for this GPU and the like: say so, go on
            print(f"  {name}: {type(error).__name__}: {str(error).splitlines()[0][:120] if str(error) else ''}")
            continue
        if said_right(name, right):
            kept[name] = run
    return kept


def said_right(name: str, right: bool) -> bool:
    print(f"  {name}: {'ok' if right else 'WRONG: dropped'}", flush=True)
    return right


def print_rates(title: str, runs: dict[str, Callable[[], object]], nbytes: int, copy_gbps: float) -> None:
    measured = timing.time_alternating(runs)
    print(f"\n{title} on {torch.cuda.get_device_name()} (copy {copy_gbps:.0f} GB/s)")
    for name, m in sorted(measured.items(), key=lambda kv: kv[1]["median_ms"]):
        rate = nbytes / (m["median_ms"] / 1000) / 1e9
        print(
            f"  {name:54s} {m['median_ms'] * 1000:9.1f} us {rate:6.0f} GB/s {100 * rate / copy_gbps:4.0f}%", flush=True
        )


# --- scan ----------------------------------------------------------------------------------------------------------


def build_scan(label: str, defines: dict[str, int]):
    """The solution built as a grade builds it (grader.toolchain.build: its flags, its cache), with `defines`."""
    built = build_shared_library(ROOT / "solutions/scan/scan.cu", gpu_arch(), defines=defines)
    if not built.ok:
        print(f"  {label}: did not build\n{built.log[-600:]}")
        return None
    lib = ctypes.CDLL(built.library)
    lib.scan.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    return lib


def scan_is_right(lib, values: torch.Tensor) -> bool:
    """Ragged sizes, x and y 4 bytes past 16-byte alignment, and each call twice (the statuses carry an epoch)."""
    for n in (1, 7, 1000, 1025, 4097, 65537, 1_000_003, 4_194_319, 2**26 + 27, 2**27):
        for offset in (0, 1):
            x = values[offset : offset + n]
            y = torch.full((n + offset,), -7, dtype=torch.int32, device="cuda")[offset:]
            for _ in range(2):
                lib.scan(x.data_ptr(), y.data_ptr(), n)
                if not torch.equal(y, torch.cumsum(x, 0, dtype=torch.int32)):
                    return False
    return True


def bench_scan() -> None:
    jobs = {"solution (default build)": {}}
    jobs.update({"build " + " ".join(f"{k}={v}" for k, v in defines.items()): defines for defines in SCAN_BUILDS})
    with ThreadPoolExecutor(8) as pool:  # the build cache locks itself: parallel builds are safe
        libraries = dict(zip(jobs, pool.map(lambda item: build_scan(*item), jobs.items())))
    values = torch.randint(-16, 32, (2**27 + 64,), dtype=torch.int32, device="cuda")
    good = {
        name: lib for name, lib in libraries.items() if lib is not None and said_right(name, scan_is_right(lib, values))
    }
    copy_gbps = timing.measure_copy_bandwidth()
    for n in (2**20, 2**22, 2**24, 2**27):  # the timed sizes, and 2^22, where SPREAD_MIN=6 picks 8-value tiles
        x, y = values[:n], torch.empty(n, dtype=torch.int32, device="cuda")
        runs = {name: (lambda lib=lib: lib.scan(x.data_ptr(), y.data_ptr(), n)) for name, lib in good.items()}
        runs["torch.cumsum"] = lambda: torch.cumsum(x, 0, dtype=torch.int32, out=y)
        runs["copy (y.copy_(x))"] = lambda: y.copy_(x)
        print_rates(f"scan n=2^{n.bit_length() - 1} int32", runs, 8 * n, copy_gbps)


# --- histogram (Triton) --------------------------------------------------------------------------------------------


def histogram_candidates(solution, x: torch.Tensor, counts: torch.Tensor) -> dict[str, Callable[[], None]]:
    """The solution as it is and with other tiles and warps a program."""
    candidates = {"solution (defaults)": lambda: solution.histogram(x, counts)}
    for block, tiles, warps in ((1024, 32, 1), (512, 64, 1), (1024, 32, 2), (4096, 16, 8), (2048, 64, 4)):
        candidates[f"solution BLOCK={block} TILES={tiles} num_warps={warps}"] = lambda b=block, t=tiles, w=warps: (
            solution.histogram(x, counts, BLOCK=b, TILES=t, num_warps=w)
        )
    return candidates


def bench_histogram() -> None:
    solution = solution_module("solutions/histogram/histogram.py")
    copy_gbps = timing.measure_copy_bandwidth()
    for n, one_bin in ((2**28, False), (2**26, True)):
        x = (
            torch.full((n,), 7, dtype=torch.int32, device="cuda")
            if one_bin
            else torch.randint(0, 256, (n,), dtype=torch.int32, device="cuda")
        )
        want = torch.bincount(x, minlength=256).to(torch.int32)
        counts = torch.empty(256, dtype=torch.int32, device="cuda")

        runs = correct_only(
            histogram_candidates(solution, x, counts), lambda: counts.fill_(-1), lambda: torch.equal(counts, want)
        )
        as_float = x.float()  # torch.histc counts floating point; the conversion is left out of its time
        scratch = torch.zeros(256, dtype=torch.int32, device="cuda")
        for block, tiles, warps in ((2048, 16, 4), (1024, 32, 2)):  # the counting alone: no answer to check
            runs[f"tl.histogram alone, no loads: BLOCK={block} TILES={tiles} num_warps={warps}"] = (
                lambda b=block, t=tiles, w=warps: design_kernels.histogram_counting_only(x, scratch, n, b, t, w)
            )
        runs["torch.bincount"] = lambda: torch.bincount(x, minlength=256)
        runs["torch.histc"] = lambda: torch.histc(as_float, bins=256, min=0, max=256)
        print_rates(
            f"histogram n={n} {'all in one bin' if one_bin else 'uniform'} int32 (4n bytes; copy moves 8n)",
            runs,
            4 * n,
            copy_gbps,
        )


def bench_scan_trace() -> None:
    """Where a tile's time goes: TRACE builds record, per tile, when its iteration began, when the next tile's copy
    had landed and its total was out, when this tile's prefix was known (the look-back) and when its stores were
    issued. Medians over the tiles of a 2^27 call, in microseconds, and the share of each SM's time spent waiting
    for copies."""
    import statistics

    values = torch.randint(-16, 32, (2**27,), dtype=torch.int32, device="cuda")
    y = torch.empty_like(values)
    for label, defines in (("default build", {"TRACE": 1}), ("ITEMS=16", {"TRACE": 1, "ITEMS": 16})):
        lib = build_scan(label, defines)
        if lib is None:
            continue
        lib.scan_trace.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
        for _ in range(3):  # warm: the last call's trace is read
            lib.scan(values.data_ptr(), y.data_ptr(), values.numel())
        torch.cuda.synchronize()
        trace = torch.zeros((1 << 16, 5), dtype=torch.int64)
        khz = ctypes.c_int(0)
        tiles = lib.scan_trace(trace.data_ptr(), 1 << 16, ctypes.byref(khz))
        rows = trace[:tiles]
        rows = rows[rows[:, 3] > 0]  # tiles this call traced
        us = 1000.0 / khz.value  # microseconds a cycle, at the rated clock (each SM's counter is its own)
        phases = {
            "next tile landed, its total out": rows[:, 1] - rows[:, 0],
            "look-back (prefix known)": rows[:, 2] - rows[:, 1],
            "prefix added, stores issued": rows[:, 3] - rows[:, 2],
        }
        print(
            f"\nscan 2^27 {label}: {len(rows)} tiles; per tile (median / 90th percentile, us at "
            f"{khz.value / 1000:.0f} MHz):"
        )
        for name, d in phases.items():
            d = d.double() * us
            print(f"  {name:34s} {d.median().item():7.2f} / {d.quantile(0.9).item():7.2f}")
        by_sm = {}  # one block an SM in these builds: an SM's tiles are its block's, in order
        for row in sorted(rows.tolist(), key=lambda r: (r[4], r[0])):
            by_sm.setdefault(row[4], []).append(row)
        gaps = [b[0] - a[3] for done in by_sm.values() for a, b in zip(done, done[1:])]
        loading = sum(r[1] - r[0] for done in by_sm.values() for r in done)
        span = sum(done[-1][3] - done[0][0] for done in by_sm.values())
        print(f"  between a block's tiles (median)   {statistics.median(gaps) * us:7.2f}")
        print(f"  share of each SM's time waiting for the next tile's copy: {100 * loading / span:.0f}%")


# --- layer_norm_backward (Triton) ----------------------------------------------------------------------------------


def layer_norm_backward_options() -> dict[str, dict]:
    """name -> the solution's keyword arguments (its defaults pick the warps and programs an SM)."""
    options = {"solution (defaults)": {}}
    for warps in (4, 8, 16):
        for programs_per_sm in (1, 2, 3):
            options[f"solution num_warps={warps} programs_per_sm={programs_per_sm}"] = {
                "num_warps": warps,
                "programs_per_sm": programs_per_sm,
            }
    return options


def bench_layer_norm_backward() -> None:
    solution = solution_module("solutions/layer_norm_backward/layer_norm_backward.py")
    copy_gbps = timing.measure_copy_bandwidth()
    for M, N, dtype in ((4096, 4096, torch.float32), (16384, 4096, torch.bfloat16)):
        x = torch.randn(M, N, device="cuda").to(dtype)
        w = (torch.rand(N, device="cuda") + 0.5).to(dtype)
        dy = torch.randn(M, N, device="cuda").to(dtype)
        _, mean, rstd = torch.ops.aten.native_layer_norm(x.float(), [N], None, None, 1e-5)
        mean, rstd = mean.view(M), rstd.view(M)
        dx, dw, db = torch.empty_like(x), torch.empty(N, device="cuda"), torch.empty(N, device="cuda")
        want = torch.ops.aten.native_layer_norm_backward(
            dy.double(), x.double(), [N], mean.double(), rstd.double(), w.double(), w.double(), [True, True, True]
        )
        rtol = 1e-5 if dtype == torch.float32 else 1e-2

        def is_right() -> bool:  # the tolerances of tests/test_layer_norm_backward.py's GPU figures test
            return (
                torch.allclose(dx.double(), want[0], atol=1e-3, rtol=rtol)
                and torch.allclose(dw.double(), want[1], atol=5e-3, rtol=1e-4)
                and torch.allclose(db.double(), want[2], atol=5e-3, rtol=1e-4)
            )

        def poison() -> None:
            for out in (dx, dw, db):
                out.fill_(float("nan"))

        candidates = {
            name: (lambda o=o: solution.layer_norm_backward(x, w, dy, mean, rstd, dx, dw, db, **o))
            for name, o in layer_norm_backward_options().items()
        }
        runs = correct_only(candidates, poison, is_right)
        runs["torch native_layer_norm_backward"] = lambda: torch.ops.aten.native_layer_norm_backward(
            dy, x, [N], mean, rstd, w, w, [True, True, True]
        )
        moved = 3 * M * N * x.element_size() + N * w.element_size() + 8 * M + 8 * N
        print_rates(f"layer_norm_backward {M}x{N} {str(dtype)[6:]}", runs, moved, copy_gbps)


# --- flash attention forward (Triton) --------------------------------------------------------------------------------

FLASH_MORE = [(128, 128, 8, 4), (128, 64, 8, 3), (128, 32, 4, 3)]  # tried besides the solution's own (tiles)


def tiles(tuned) -> list[tuple[int, int, int, int]]:
    """(BLOCK_M, BLOCK_N, warps, stages) of each configuration an autotuner of the solution tries, in its order."""
    return [(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages) for c in tuned.configs]


def one_configuration(tuned, block_m: int, block_n: int, warps: int, stages: int, pre_hook=None):
    """An autotuner of this one configuration over the kernel `tuned` tunes, keyed as it is (nothing to time: one
    compile per key)."""
    import triton

    config = triton.Config(
        {"BLOCK_M": block_m, "BLOCK_N": block_n}, num_warps=warps, num_stages=stages, pre_hook=pre_hook
    )
    return triton.autotune(configs=[config], key=tuned.keys)(tuned.fn)


def flash_candidates(solution, args: tuple, causal: bool) -> dict[str, Callable[[], None]]:
    """The solution's entry as it tunes itself, on the TMA path and on pointer loads, and with each of its own
    configurations and FLASH_MORE alone on the TMA path (an autotuner of one configuration over its kernel, swapped
    in for the call): one compile each, so a sweep of all four shapes fits one device call; then the pipelined
    experiment's tiles."""
    kernel = solution._flash_fwd

    def call():
        solution.flash_attention_v2(*args, causal)

    candidates = {
        "solution (tuned) tma": swapped(solution, call, USE_TMA=True),
        "solution (tuned) pointers": swapped(solution, call, USE_TMA=False),
    }
    for bm, bn, w, s in dict.fromkeys(tiles(kernel) + FLASH_MORE):
        tuner = one_configuration(kernel, bm, bn, w, s, pre_hook=solution._block_shapes)
        candidates[f"{bm}x{bn} w{w} s{s} tma"] = swapped(solution, call, _flash_fwd=tuner, USE_TMA=True)
    return {**candidates, **pipelined_candidates(args, causal)}


def swapped(module, call: Callable[[], object], **attributes) -> Callable[[], None]:
    """A run of `call` with `module`'s attributes set to `attributes` for its length (a kernel's autotuner swapped for
    one of a single configuration, a path's switch), and put back after."""

    def run():
        saved = {name: getattr(module, name) for name in attributes}
        for name, value in attributes.items():
            setattr(module, name, value)
        try:
            call()
        finally:
            for name, value in saved.items():
                setattr(module, name, value)

    return run


# 8 warps at d = 128: with 4, the second score tile pushes a 128 x 64 tile past 255 registers (280 bytes of stack,
# sm_90 compiled here; the solution's own: 255, none); 8 warps: 173 (128 x 64), 254 (128 x 128)
PIPELINED_TILES = [(128, 64, 8, 2), (128, 64, 8, 3), (128, 128, 8, 2), (64, 64, 4, 3)]


def pipelined_candidates(args: tuple, causal: bool) -> dict[str, Callable[[], None]]:
    """scripts/fa2_forward_pipelined.py's kernel (the solution's, its unmasked key loop software-pipelined) with each
    of PIPELINED_TILES alone, on the TMA path."""
    import fa2_forward_pipelined  # scripts/, on the path

    module = fa2_forward_pipelined.solution

    def call():
        module.flash_attention_v2(*args, causal)

    return {
        f"pipelined {bm}x{bn} w{w} s{s} tma": swapped(
            module, call, _flash_fwd=one_configuration(module._flash_fwd, bm, bn, w, s, module._block_shapes)
        )
        for bm, bn, w, s in PIPELINED_TILES
    }


def bench_flash() -> None:
    """The Triton FA2 forward's configurations beside torch's SDPA (issue 42's bar: 90% of its speed), bf16
    4 x 32 x 4096, d = 128 and 64, causal and not: each checked against SDPA, then all timed alternately."""
    solution = solution_module("solutions/flash_attention_v2/flash_attention_v2.py")
    for d, causal, args in flash_forward_shapes():
        time_forwards(f"flash forward d={d} causal={causal}", flash_candidates(solution, args, causal), args, causal)


def flash_forward_shapes():
    """(d, causal, (q, k, v, out, lse)): bf16 4 x 32 x 4096 x d on the GPU, d = 128 and 64, causal and not."""
    for d in (128, 64):
        for causal in (False, True):
            q, k, v = (torch.randn(4, 32, 4096, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            yield d, causal, (q, k, v, torch.empty_like(q), torch.empty(q.shape[:-1], device="cuda"))


def time_forwards(title: str, candidates: dict[str, Callable[[], None]], args: tuple, causal: bool) -> None:
    """Each candidate checked against SDPA (into a poisoned out), then all timed alternately beside it."""
    import torch.nn.functional as F

    q, k, v, out, _ = args
    want = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    runs = correct_only(
        candidates,
        lambda: out.fill_(float("nan")),
        lambda: bool(torch.allclose(out.float(), want.float(), atol=2e-2, rtol=2e-2)),
    )
    runs["sdpa"] = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    print_flops(title, runs, 4 * 4 * 32 * 4096 * 4096 * q.shape[-1] // (2 if causal else 1))


FLASH_BACKWARD_MORE = {  # kernel -> configurations tried for it besides its own (tiles), the other kernel tuned as is
    "_bwd_dq": [(128, 128, 8, 2)],
    "_bwd_dkdv": [(64, 128, 4, 3), (128, 128, 8, 2)],
}


def flash_backward_candidates(solution, args: tuple, causal: bool) -> dict[str, Callable[[], None]]:
    """The backward solution with one kernel's autotuner swapped for one of its own configurations or of
    FLASH_BACKWARD_MORE at a time (the other kernel tuned as the solution tunes it), and the solution as it is."""

    def call():
        solution.flash_attention_v2_backward(*args, causal)

    candidates = {"solution (both tuned)": call}
    for name, more in FLASH_BACKWARD_MORE.items():
        tuned = getattr(solution, name)
        for bm, bn, w, s in dict.fromkeys(tiles(tuned) + more):
            one = {name: one_configuration(tuned, bm, bn, w, s)}
            candidates[f"{name[5:]} {bm}x{bn} w{w} s{s}"] = swapped(solution, call, **one)
    return {**candidates, **atomic_dq_candidates(args, causal)}


def atomic_dq_candidates(args: tuple, causal: bool) -> dict[str, Callable[[], None]]:
    """scripts/fa2_backward_atomic.py's 5-matmul backward (dQ added atomically), tuned by its own autotuner: with
    pointer atomics and with TMA's tile reduce-add."""
    import fa2_backward_atomic  # scripts/, on the path

    return {
        f"5 matmuls, dQ {how}": lambda tma=tma: fa2_backward_atomic.flash_attention_v2_backward(*args, causal, tma=tma)
        for how, tma in (("atomic", False), ("by TMA reduce", True))
    }


def bench_flash_backward() -> None:
    """The Triton FA2 backward's configurations beside torch's SDPA backward (issue 42's bar: 75% of its speed), bf16
    4 x 32 x 4096 x 128, causal and not: each checked against SDPA's gradients, then all timed alternately."""
    import torch.nn.functional as F

    forward = solution_module("solutions/flash_attention_v2/flash_attention_v2.py")
    solution = solution_module("solutions/flash_attention_v2_backward/flash_attention_v2_backward.py")
    for causal in (False, True):
        q, k, v, dout = (torch.randn(4, 32, 4096, 128, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        out, lse = torch.empty_like(q), torch.empty(q.shape[:-1], device="cuda", dtype=torch.float32)
        forward.flash_attention_v2(q, k, v, out, lse, causal)
        grads = [torch.empty_like(q) for _ in range(3)]
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        sdpa_out = F.scaled_dot_product_attention(*leaves, is_causal=causal)
        want = torch.autograd.grad(sdpa_out, leaves, dout, retain_graph=True)
        runs = correct_only(
            flash_backward_candidates(solution, (q, k, v, out, lse, dout, *grads), causal),
            lambda: [g.fill_(float("nan")) for g in grads],
            lambda: all(torch.allclose(g.float(), w.float(), atol=3e-2, rtol=3e-2) for g, w in zip(grads, want)),
        )
        runs["sdpa"] = lambda: torch.autograd.grad(sdpa_out, leaves, dout, retain_graph=True)
        flops = 2.5 * 4 * 4 * 32 * 4096 * 4096 * 128 // (2 if causal else 1)
        print_flops(f"flash backward d=128 causal={causal}", runs, int(flops))


FLASH_CUDA_BUILDS = {  # scripts/fa2_forward_cuda.cu's defines tried beside its defaults
    "rescale at every growth": {"KC_RESCALE_ABOVE": 0},
    "128x32 tiles at d=128": {"KC_BLOCK_N_D128": 32},
    "2 softmax steps a block": {"KC_SPLIT": 2},
    "16 rows a warp (64 queries a CTA)": {"KC_WARP_ROWS": 16},
    "16 rows a warp, 3 CTAs an SM, 64x32 at d=128": {"KC_WARP_ROWS": 16, "KC_MIN_BLOCKS": 3, "KC_BLOCK_N_D128": 32},
    "16 rows a warp, Q in registers": {"KC_WARP_ROWS": 16, "KC_Q_IN_REGISTERS": 1},
    "16 rows, Q in registers, 3 CTAs an SM, 64x32": {
        "KC_WARP_ROWS": 16,
        "KC_Q_IN_REGISTERS": 1,
        "KC_MIN_BLOCKS": 3,
        "KC_BLOCK_N_D128": 32,
    },
    "8 warps of 16 rows": {"KC_WARPS": 8, "KC_WARP_ROWS": 16},
    "8 warps of 32 rows, 1 CTA an SM": {"KC_WARPS": 8, "KC_MIN_BLOCKS": 1},
}


def flash_cuda_candidates() -> dict[str, Callable]:
    """The CUDA FA2 forward solution's kernel and scripts/fa2_forward_cuda.cu's (with FLASH_CUDA_BUILDS), each built
    as a plain library around one launcher (scripts/fa2_forward_cuda.py), side by side: name -> forward(q, k, v,
    out, lse, causal)."""
    import fa2_forward_cuda  # scripts/, on the path

    builds = {"solution's kernel": (fa2_forward_cuda.SOLUTION, {}), "experiment": (fa2_forward_cuda.EXPERIMENT, {})}
    builds.update({f"experiment, {name}": (fa2_forward_cuda.EXPERIMENT, d) for name, d in FLASH_CUDA_BUILDS.items()})

    def built(name: str):
        try:
            return fa2_forward_cuda.build(*builds[name])
        except (RuntimeError, OSError) as error:  # said and dropped: the others still run
            print(f"  {name}: {error}")
            return None

    with ThreadPoolExecutor(4) as pool:
        libraries = dict(zip(builds, pool.map(built, builds)))
    return {name: functools.partial(fa2_forward_cuda.forward, lib) for name, lib in libraries.items() if lib}


def bench_flash_cuda() -> None:
    """The CUDA FA2 forward (mma.sync) beside torch's SDPA (issue 42's bar: 350 TFLOP/s), bf16 4 x 32 x 4096, d = 128
    and 64, causal and not: each checked against SDPA, then all timed alternately."""
    forwards = flash_cuda_candidates()
    for d, causal, args in flash_forward_shapes():
        candidates = {name: functools.partial(f, *args, causal) for name, f in forwards.items()}
        time_forwards(f"CUDA flash forward d={d} causal={causal}", candidates, args, causal)


def print_flops(title: str, runs: dict[str, Callable[[], object]], flops: int) -> None:
    measured = timing.time_alternating(runs)
    sdpa_ms = measured["sdpa"]["median_ms"]
    print(f"\n{title} on {torch.cuda.get_device_name()} (SDPA {flops / sdpa_ms / 1e9:.0f} TFLOP/s)")
    for name, m in sorted(measured.items(), key=lambda kv: kv[1]["median_ms"]):
        rate = flops / m["median_ms"] / 1e9
        print(
            f"  {name:34s} {m['median_ms']:8.3f} ms {rate:6.0f} TFLOP/s {100 * sdpa_ms / m['median_ms']:4.0f}% of SDPA"
        )


BENCHES = {
    "scan": bench_scan,
    "scan-trace": bench_scan_trace,
    "histogram": bench_histogram,
    "layer_norm_backward": bench_layer_norm_backward,
    "flash": bench_flash,
    "flash-backward": bench_flash_backward,
    "flash-cuda": bench_flash_cuda,
}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in BENCHES:
        sys.exit(f"usage: python3 scripts/design_bench.py {' | '.join(BENCHES)}")
    BENCHES[sys.argv[1]]()
