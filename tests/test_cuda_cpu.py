"""The CPU emulator of CUDA (grader/cuda_cpu) against CUDA's semantics: small .cu programs built with
cuda_cpu.build, run in a child with cuda_cpu.child_env() (the ASan runtime preloaded), their results compared
exactly with what a GPU gives (computed here in Python). Faults must stop the child with a clear message that
cuda_cpu.explain reads, never hang it.

Each program groups several checks and has `extern "C"` entry points; the child loads it with ctypes, registers
the buffers it passes as device memory (kcourse_cuda_cpu_register) or lets the host code cudaMalloc, and prints
one JSON line. The build cache is keyed by content, so a program used by several tests is compiled once."""

from __future__ import annotations

import json
import math
import os
import re
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from grader import cuda_cpu

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(cuda_cpu.host_compiler() is None, reason="no host C++ compiler (g++ or clang++)"),
]

FULL = 0xFFFFFFFF
needs_asan = pytest.mark.skipif(cuda_cpu.asan_runtime() is None, reason="no AddressSanitizer runtime to preload")

# ---- helpers ------------------------------------------------------------------------------------------------
# The child's first lines: the library (argv[1]), device buffers, and the one line of results.
PRELUDE = """\
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
lib.kcourse_cuda_cpu_register.argtypes = [ctypes.c_void_p, ctypes.c_size_t]

def device(ctype, n, values=()):
    '''A ctypes array registered as device memory (as the grader registers the tensors it passes).'''
    buf = (ctype * n)(*values)
    lib.kcourse_cuda_cpu_register(ctypes.addressof(buf), ctypes.sizeof(buf))
    return buf

def emit(**results):
    print("RESULT " + json.dumps(results), flush=True)
"""


@dataclass
class Run:
    returncode: int
    output: str  # stdout and stderr together
    result: dict | None  # the child's RESULT line, parsed

    def explained(self) -> tuple[str, str] | None:
        return cuda_cpu.explain(self.output)


def build_library(tmp_path: Path, source: str, name: str = "kernel.cu") -> str:
    path = tmp_path / name
    path.write_text(source)
    built = cuda_cpu.build(path)
    assert built.ok, built.log
    return built.library


def run_library(library: str, entry_script: str, seed: int = 1, timeout: float = 60) -> Run:
    env = {**os.environ, **cuda_cpu.child_env(), cuda_cpu.SEED_ENV: str(seed)}
    done = subprocess.run(
        [sys.executable, "-c", PRELUDE + entry_script, library],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    output = done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    return Run(done.returncode, output, json.loads(lines[-1][len("RESULT ") :]) if lines else None)


def run_cuda(
    tmp_path: Path, source: str, entry_script: str, seed: int = 1, name: str = "kernel.cu", timeout: float = 60
) -> Run:
    """Build `source` as tmp_path/name, run `entry_script` (after PRELUDE) against it with the given schedule seed."""
    return run_library(build_library(tmp_path, source, name), entry_script, seed, timeout)


def ok(run: Run) -> dict:
    """The results of a child that must have succeeded."""
    assert run.returncode == 0 and run.result is not None, run.output[-4000:]
    return run.result


def line_of(source: str, marker: str) -> int:
    lines = [n for n, text in enumerate(source.splitlines(), 1) if marker in text]
    assert len(lines) == 1, marker
    return lines[0]


def u32(values):
    return [v & FULL for v in values]


# ---- 1 and 9: grids and blocks, template kernels, by-value parameters ------------------------------------------
INDEXING = r"""
__global__ void index1d(int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = i;
}

__global__ void index2d(int* out, int w, int h) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < w && y < h) out[y * w + x] = y * 1000 + x;
}

// coords: the thread's global (x, y, z); ids: its block's linear index * threads per block + its linear index
__global__ void index3d(int* coords, int* ids, int nx, int ny, int nz) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    int z = blockIdx.z * blockDim.z + threadIdx.z;
    if (x >= nx || y >= ny || z >= nz) return;
    int at = (z * ny + y) * nx + x;
    coords[at] = z * 1000000 + y * 1000 + x;
    int block = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    int thread = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    ids[at] = block * (blockDim.x * blockDim.y * blockDim.z) + thread;
}

template <typename T, int N>
__global__ void scale(const T* in, T* out, T factor, int n) {
    int first = (blockIdx.x * blockDim.x + threadIdx.x) * N;
    for (int j = 0; j < N; ++j)
        if (first + j < n) out[first + j] = in[first + j] * factor + (T)N;
}

struct Step { int add; float mul; };

// every thread changes its own copies of its by-value parameters; a barrier lets the others change theirs first
__global__ void own_params(int* out, int start, int count, Step step) {
    int t = threadIdx.x;
    start += t;
    step.add *= t;
    __syncthreads();
    while (count > t) { --count; }
    step.mul += t;
    __syncthreads();
    out[4 * t] = start;
    out[4 * t + 1] = count;
    out[4 * t + 2] = step.add;
    out[4 * t + 3] = (int)step.mul;
}

extern "C" void run_1d(int* out, int n) { index1d<<<(n + 127) / 128, 128>>>(out, n); }
extern "C" void run_2d(int* out, int w, int h) {
    dim3 block(8, 4);
    dim3 grid((w + block.x - 1) / block.x, (h + block.y - 1) / block.y);
    index2d<<<grid, block>>>(out, w, h);
}
extern "C" void run_3d(int* coords, int* ids, int nx, int ny, int nz) {
    dim3 block(4, 3, 2);
    dim3 grid((nx + 3) / 4, (ny + 2) / 3, (nz + 1) / 2);
    index3d<<<grid, block>>>(coords, ids, nx, ny, nz);
}
extern "C" void run_templates(const float* fin, float* fout, const double* din, double* dout, int n) {
    scale<float, 4><<<(n + 4 * 32 - 1) / (4 * 32), 32>>>(fin, fout, 2.0f, n);
    scale<double, 2><<<(n + 2 * 16 - 1) / (2 * 16), 16>>>(din, dout, -0.5, n);
}
extern "C" void run_params(int* out, int threads) { own_params<<<1, threads>>>(out, 100, threads, Step{3, 0.0f}); }
"""


def test_1d_2d_3d_grids_and_blocks(tmp_path):
    n, w, h, nx, ny, nz = 1000, 37, 19, 10, 6, 5
    script = f"""
out1 = device(ctypes.c_int, {n}, [-1] * {n})
lib.run_1d(out1, {n})
out2 = device(ctypes.c_int, {w * h}, [-1] * {w * h})
lib.run_2d(out2, {w}, {h})
coords = device(ctypes.c_int, {nx * ny * nz}, [-1] * {nx * ny * nz})
ids = device(ctypes.c_int, {nx * ny * nz}, [-1] * {nx * ny * nz})
lib.run_3d(coords, ids, {nx}, {ny}, {nz})
emit(out1=list(out1), out2=list(out2), coords=list(coords), ids=list(ids))
"""
    got = ok(run_cuda(tmp_path, INDEXING, script))
    assert got["out1"] == list(range(n))
    assert got["out2"] == [y * 1000 + x for y in range(h) for x in range(w)]
    assert got["coords"] == [z * 1000000 + y * 1000 + x for z in range(nz) for y in range(ny) for x in range(nx)]
    grid, block = ((nx + 3) // 4, (ny + 2) // 3, (nz + 1) // 2), (4, 3, 2)
    expected_ids = []
    for z in range(nz):
        for y in range(ny):
            for x in range(nx):
                (bx, tx), (by, ty), (bz, tz) = divmod(x, 4), divmod(y, 3), divmod(z, 2)
                linear_block = (bz * grid[1] + by) * grid[0] + bx
                expected_ids.append(linear_block * 24 + (tz * block[1] + ty) * block[0] + tx)
    assert got["ids"] == expected_ids


def test_template_kernels_and_by_value_parameters(tmp_path):
    n, threads = 203, 48
    script = f"""
fin = device(ctypes.c_float, {n}, [0.5 * i for i in range({n})])
fout = device(ctypes.c_float, {n})
din = device(ctypes.c_double, {n}, [0.25 * i for i in range({n})])
dout = device(ctypes.c_double, {n})
lib.run_templates(fin, fout, din, dout, {n})
params = device(ctypes.c_int, {4 * threads})
lib.run_params(params, {threads})
emit(fout=list(fout), dout=list(dout), params=list(params))
"""
    got = ok(run_cuda(tmp_path, INDEXING, script))
    assert got["fout"] == [0.5 * i * 2.0 + 4 for i in range(n)]
    assert got["dout"] == [0.25 * i * -0.5 + 2 for i in range(n)]
    expected = []
    for t in range(threads):
        expected += [100 + t, min(threads, t), 3 * t, t]
    assert got["params"] == expected


# ---- 2 and 4: __syncthreads as a barrier; __syncthreads_count/and/or ---------------------------------------------
REDUCE = r"""
#define BLOCK 256

__global__ void block_sum(const int* in, int* out, int n) {
    __shared__ int s[BLOCK];
    int t = threadIdx.x, i = blockIdx.x * BLOCK + t;
    s[t] = i < n ? in[i] : 0;
    __syncthreads();
    for (int stride = BLOCK / 2; stride > 0; stride >>= 1) {
        if (t < stride) s[t] += s[t + stride];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}

// the same without its barriers: a race
__global__ void block_sum_racy(const int* in, int* out, int n) {
    __shared__ int s[BLOCK];
    int t = threadIdx.x, i = blockIdx.x * BLOCK + t;
    s[t] = i < n ? in[i] : 0;
    for (int stride = BLOCK / 2; stride > 0; stride >>= 1) {
        if (t < stride) s[t] += s[t + stride];
    }
    if (t == 0) out[blockIdx.x] = s[0];
}

// every thread records what each block-wide vote gave it
__global__ void votes(const int* predicates, int* out) {
    int g = blockIdx.x * blockDim.x + threadIdx.x;
    int p = predicates[g];
    int count = __syncthreads_count(p);
    int all = __syncthreads_and(p);
    int any = __syncthreads_or(p);
    out[3 * g] = count;
    out[3 * g + 1] = all;
    out[3 * g + 2] = any;
}

extern "C" void run_sum(const int* in, int* out, int n, int racy) {
    if (racy) block_sum_racy<<<(n + BLOCK - 1) / BLOCK, BLOCK>>>(in, out, n);
    else block_sum<<<(n + BLOCK - 1) / BLOCK, BLOCK>>>(in, out, n);
}
extern "C" void run_votes(const int* predicates, int* out, int blocks, int threads) {
    votes<<<blocks, threads>>>(predicates, out);
}
"""

SUM_N = 1000
SUM_INPUT = [(i * 7919) % 1000 - 500 for i in range(SUM_N)]
SUM_SCRIPT = f"""
n = {SUM_N}
data = device(ctypes.c_int, n, {SUM_INPUT})
results = {{}}
for racy in (0, 1):
    out = device(ctypes.c_int, 4, [12345] * 4)
    lib.run_sum(data, out, n, racy)
    results["racy" if racy else "barrier"] = list(out)
emit(**results)
"""


def test_syncthreads_is_a_barrier_and_its_absence_a_race(tmp_path):
    library = build_library(tmp_path, REDUCE)
    expected = [sum(SUM_INPUT[b * 256 : (b + 1) * 256]) for b in range(4)]
    racy_wrong = []
    for seed in range(1, 6):
        got = ok(run_library(library, SUM_SCRIPT, seed=seed))
        assert got["barrier"] == expected, f"seed {seed}"
        racy_wrong.append(got["racy"] != expected)
    assert any(racy_wrong), "the reduction without __syncthreads() gave the right sums on every seed"


def test_syncthreads_count_and_or(tmp_path):
    threads = 96
    predicates = (
        [1] * threads  # all true
        + [0] * threads  # all false
        + [(t % 3 == 0) * 1 for t in range(threads)]  # a third
        + [5 if t == 70 else 0 for t in range(threads)]
    )  # one, not 1
    script = f"""
preds = device(ctypes.c_int, {len(predicates)}, {predicates})
out = device(ctypes.c_int, {3 * len(predicates)})
lib.run_votes(preds, out, 4, {threads})
emit(out=list(out))
"""
    got = ok(run_cuda(tmp_path, REDUCE, script))["out"]
    per_block = [(threads, 1, 1), (0, 0, 0), (32, 0, 1), (1, 0, 1)]
    expected = [value for block in per_block for _ in range(threads) for value in block]
    assert got == expected


# ---- 3: warp intrinsics ---------------------------------------------------------------------------------------
WARP = r"""
#define NOUT 29

__global__ void warp_ops(const int* in, int* out) {
    int g = blockIdx.x * blockDim.x + threadIdx.x, lane = threadIdx.x % 32;
    int v = in[g];
    int* o = out + g * NOUT;
    o[0] = __shfl_sync(0xffffffff, v, (lane * 7 + 3) % 32);
    o[1] = __shfl_sync(0xffffffff, v, 37);
    o[2] = __shfl_up_sync(0xffffffff, v, 3);
    o[3] = __shfl_down_sync(0xffffffff, v, 5);
    o[4] = __shfl_xor_sync(0xffffffff, v, 1);
    o[5] = __shfl_xor_sync(0xffffffff, v, 19);
    o[6] = __shfl_sync(0xffffffff, v, 3, 16);
    o[7] = __shfl_up_sync(0xffffffff, v, 2, 16);
    o[8] = __shfl_down_sync(0xffffffff, v, 4, 16);
    o[9] = __shfl_xor_sync(0xffffffff, v, 5, 16);
    o[10] = __shfl_xor_sync(0xffffffff, v, 16, 16);
    o[11] = __shfl_sync(0xffffffff, v, 6, 8);
    o[12] = __shfl_up_sync(0xffffffff, v, 1, 8);
    o[13] = __shfl_down_sync(0xffffffff, v, 3, 8);
    o[14] = __shfl_xor_sync(0xffffffff, v, 2, 8);
    o[15] = (int)__ballot_sync(0xffffffff, lane % 3 == 0);
    o[16] = (int)__ballot_sync(0xffffffff, v > 40);
    o[17] = __any_sync(0xffffffff, lane == 7);
    o[18] = __any_sync(0xffffffff, 0);
    o[19] = __all_sync(0xffffffff, v >= 0);
    o[20] = __all_sync(0xffffffff, lane != 12);
    o[21] = (int)__activemask();
    float f = v * 0.5f;  // a butterfly sum: every lane ends with the warp's sum
    for (int d = 16; d > 0; d >>= 1) f += __shfl_xor_sync(0xffffffff, f, d);
    o[22] = (int)(f * 2);
    o[23] = (int)__ballot_sync(lane < 16 ? 0x0000ffffu : 0xffff0000u, lane & 1);  // each half warp its own mask
    long long big = (long long)v << 33;  // 8-byte values
    o[24] = (int)(__shfl_sync(0xffffffff, big, 9) >> 33);
    o[25] = (int)(__shfl_up_sync(0xffffffff, v + 0.5, 1) * 2);
    o[26] = (int)__reduce_add_sync(0xffffffff, (unsigned)v);
    o[27] = __reduce_max_sync(0xffffffff, v);
    o[28] = __reduce_min_sync(0xffffffff, v);
}

// only the first half warp shuffles (with its own mask), then the whole warp does
__global__ void diverged_masks(int* out) {
    int lane = threadIdx.x % 32, v = threadIdx.x;
    if (lane < 16) v = __shfl_down_sync(0x0000ffff, v, 1, 16);
    out[threadIdx.x] = __shfl_sync(0xffffffff, v, 20);
}

// blockDim 40: the second warp has 8 lanes
__global__ void partial_warp(int* out) {
    int t = threadIdx.x;
    int* o = out + 4 * t;
    o[0] = (int)__activemask();
    o[1] = (int)__ballot_sync(__activemask(), 1);
    o[2] = __shfl_xor_sync(__activemask(), t, 4);
    o[3] = __all_sync(0xffffffff, 1);
}

// lanes at and past n return before the others ask which lanes are active
__global__ void activemask_after_return(int* out, int n) {
    int t = threadIdx.x;
    if (t >= n) return;
    out[t] = (int)__activemask();
}

extern "C" void run_warp_ops(const int* in, int* out, int blocks, int threads) {
    warp_ops<<<blocks, threads>>>(in, out);
}
extern "C" void run_diverged(int* out) { diverged_masks<<<1, 32>>>(out); }
extern "C" void run_partial(int* out) { partial_warp<<<1, 40>>>(out); }
extern "C" void run_after_return(int* out, int n) { activemask_after_return<<<1, 64>>>(out, n); }
"""


def _warp_expected(values):
    """What a GPU gives warp_ops, lane by lane (CUDA C++ Programming Guide, warp shuffle functions)."""
    expected = []
    for g, v in enumerate(values):
        lane, warp = g % 32, values[(g // 32) * 32 : (g // 32) * 32 + 32]

        def idx(src, width=32):
            return warp[(lane & ~(width - 1)) + src % width]

        def up(delta, width=32):
            return warp[lane - delta] if lane % width >= delta else v

        def down(delta, width=32):
            return warp[lane + delta] if lane % width + delta < width else v

        def xor(mask, width=32):
            src = lane ^ mask
            return v if src >= (lane & ~(width - 1)) + width else warp[src]

        row = [
            idx((lane * 7 + 3) % 32),
            idx(37),
            up(3),
            down(5),
            xor(1),
            xor(19),
            idx(3, 16),
            up(2, 16),
            down(4, 16),
            xor(5, 16),
            xor(16, 16),
            idx(6, 8),
            up(1, 8),
            down(3, 8),
            xor(2, 8),
            sum(1 << i for i in range(32) if i % 3 == 0),
            sum(1 << i for i, w in enumerate(warp) if w > 40),
            1,
            0,
            int(all(w >= 0 for w in warp)),
            0,
            FULL,
            sum(warp),
            sum(1 << i for i in range(32) if i & 1 and (i < 16) == (lane < 16)),
            warp[9],
            2 * (v if lane == 0 else warp[lane - 1]) + 1,
            sum(warp),
            max(warp),
            min(warp),
        ]
        expected.append(row)
    return expected


def test_warp_shuffles_votes_and_reductions(tmp_path):
    blocks, threads = 2, 64
    values = [(g * 37 + 11) % 101 for g in range(blocks * threads)]
    script = f"""
inp = device(ctypes.c_int, {len(values)}, {values})
out = device(ctypes.c_int, {29 * len(values)})
lib.run_warp_ops(inp, out, {blocks}, {threads})
emit(out=list(out))
"""
    got = ok(run_cuda(tmp_path, WARP, script))["out"]
    rows = [u32(got[29 * g : 29 * g + 29]) for g in range(len(values))]
    expected = [u32(row) for row in _warp_expected(values)]
    names = [
        "shfl",
        "shfl 37",
        "up 3",
        "down 5",
        "xor 1",
        "xor 19",
        "shfl w16",
        "up w16",
        "down w16",
        "xor 5 w16",
        "xor 16 w16",
        "shfl w8",
        "up w8",
        "down w8",
        "xor w8",
        "ballot",
        "ballot v",
        "any",
        "any 0",
        "all",
        "all lane",
        "activemask",
        "float sum",
        "half ballot",
        "long long",
        "double",
        "reduce add",
        "reduce max",
        "reduce min",
    ]
    for g, (row, want) in enumerate(zip(rows, expected)):
        wrong = {names[k]: (row[k], want[k]) for k in range(29) if row[k] != want[k]}
        assert not wrong, f"thread {g}: {wrong}"


def test_warp_intrinsic_of_a_half_warp_then_of_the_whole_warp(tmp_path):
    script = "out = device(ctypes.c_int, 32)\nlib.run_diverged(out)\nemit(out=list(out))"
    # lanes 0..15 take their neighbour's value (lane 15 keeps its own), lanes 16..31 keep theirs: lane 20 has 20
    assert ok(run_cuda(tmp_path, WARP, script))["out"] == [20] * 32


def test_activemask_and_votes_in_a_partial_last_warp(tmp_path):
    script = """
out = device(ctypes.c_int, 160)
lib.run_partial(out)
emit(out=list(out))
"""
    got = u32(ok(run_cuda(tmp_path, WARP, script))["out"])
    for t in range(40):
        mask = FULL if t < 32 else 0xFF
        assert got[4 * t : 4 * t + 4] == [mask, mask, t ^ 4, 1], f"thread {t}"


def test_activemask_leaves_out_lanes_that_returned(tmp_path):
    library = build_library(tmp_path, WARP)
    n = 36
    for seed in range(1, 4):
        got = u32(
            ok(
                run_library(
                    library,
                    f"out = device(ctypes.c_int, 64)\nlib.run_after_return(out, {n})\nemit(out=list(out))",
                    seed=seed,
                )
            )["out"]
        )
        for t in range(n):
            returned = sum(1 << (lane % 32) for lane in range(n, 64) if lane // 32 == t // 32)
            assert (got[t] >> (t % 32)) & 1 and (got[t] & returned) == 0, f"seed {seed}, thread {t}: {got[t]:#x}"


# ---- 5: atomics ---------------------------------------------------------------------------------------------------
ATOMICS = r"""
__device__ float atomic_max_float(float* address, float value) {
    int* bits = (int*)address;
    int old = *bits, assumed;
    do {
        assumed = old;
        if (__int_as_float(assumed) >= value) break;
        old = atomicCAS(bits, assumed, __float_as_int(value));
    } while (assumed != old);
    return __int_as_float(old);
}

struct Totals {
    int counter, minimum;
    unsigned bits, wrap;
    float fsum, fmax;
    double dsum;
    int slot;
};

__global__ void atomics(const float* values, int n, Totals* totals, int* hist, int* exchanged, unsigned* wrapped,
                        int* per_block) {
    __shared__ int in_block;
    if (threadIdx.x == 0) in_block = 0;
    __syncthreads();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        atomicAdd(&totals->counter, 1);
        atomicAdd(&hist[(i * 7) % 16], 1);
        atomicMin(&totals->minimum, (i * 37) % 1009 - 300);
        atomicOr(&totals->bits, 1u << (i % 32));
        atomicAdd(&totals->fsum, 0.25f * i);
        atomicAdd(&totals->dsum, 0.125 * i);
        atomic_max_float(&totals->fmax, values[i]);
        exchanged[i] = atomicExch(&totals->slot, i);
        wrapped[i] = atomicInc(&totals->wrap, 9);
        atomicAdd(&in_block, 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) per_block[blockIdx.x] = in_block;
}

// a lock taken with atomicCAS and given back with atomicExch; __nanosleep inside lets the others contend for it
__global__ void spin_lock(int* lock, int* counter_, int* inside_, int* most_inside) {
    volatile int *counter = counter_, *inside = inside_;
    while (atomicCAS(lock, 0, 1) != 0) {}
    int now = *inside + 1;
    *inside = now;
    if (now > *most_inside) *most_inside = now;
    int c = *counter;
    __nanosleep(100);
    *counter = c + 1;
    *inside = now - 1;
    __threadfence();
    atomicExch(lock, 0);
}

// the last thread of the block sets a flag the others wait for, polling a volatile (legal since Volta)
__global__ void flag_wait(int* out) {
    __shared__ volatile int flag;
    __shared__ int data;
    int t = threadIdx.x;
    if (t == 0) flag = 0;
    __syncthreads();
    if (t == blockDim.x - 1) { data = 42; __threadfence_block(); flag = 1; }
    else { while (flag == 0) {} out[t] = data; }
}

extern "C" void run_atomics(const float* values, int n, Totals* totals, int* hist, int* exchanged, unsigned* wrapped,
                            int* per_block) {
    atomics<<<(n + 127) / 128, 128>>>(values, n, totals, hist, exchanged, wrapped, per_block);
}
extern "C" void run_lock(int* lock, int* counter, int* inside, int* most_inside, int blocks, int threads) {
    spin_lock<<<blocks, threads>>>(lock, counter, inside, most_inside);
}
extern "C" void run_flag_wait(int* out, int threads) { flag_wait<<<1, threads>>>(out); }
"""


def test_atomics(tmp_path):
    n = 1003
    values = [((i * 7919) % 2003 - 1000) / 8.0 for i in range(n)]
    script = f"""
class Totals(ctypes.Structure):
    _fields_ = [("counter", ctypes.c_int), ("minimum", ctypes.c_int), ("bits", ctypes.c_uint),
                ("wrap", ctypes.c_uint), ("fsum", ctypes.c_float), ("fmax", ctypes.c_float),
                ("dsum", ctypes.c_double), ("slot", ctypes.c_int)]
totals = Totals(0, 1 << 30, 0, 0, 0.0, float("-inf"), 0.0, -1)
lib.kcourse_cuda_cpu_register(ctypes.addressof(totals), ctypes.sizeof(totals))
n = {n}
values = device(ctypes.c_float, n, {values})
hist = device(ctypes.c_int, 16)
exchanged = device(ctypes.c_int, n)
wrapped = device(ctypes.c_uint, n)
per_block = device(ctypes.c_int, 8)
lib.run_atomics(values, n, ctypes.byref(totals), hist, exchanged, wrapped, per_block)
emit(totals={{name: getattr(totals, name) for name, _ in Totals._fields_}}, hist=list(hist),
     exchanged=list(exchanged), wrapped=list(wrapped), per_block=list(per_block))
"""
    got = ok(run_cuda(tmp_path, ATOMICS, script))
    totals = got["totals"]
    assert totals["counter"] == n
    assert totals["minimum"] == min((i * 37) % 1009 - 300 for i in range(n))
    assert totals["bits"] == FULL
    assert totals["fsum"] == 0.25 * n * (n - 1) / 2  # exact in float32 in any order (multiples of 1/4 below 2^17)
    assert totals["dsum"] == 0.125 * n * (n - 1) / 2
    assert totals["fmax"] == max(values)
    assert got["hist"] == [sum(1 for i in range(n) if (i * 7) % 16 == b) for b in range(16)]
    # atomicExch: each old value is handed on exactly once, a chain from the first value to the last
    assert sorted(got["exchanged"] + [totals["slot"]]) == [-1] + list(range(n))
    # atomicInc(p, 9) counts 0..9 and wraps: 1003 increments leave 3, and hand out each of 0..9 100 or 101 times
    assert totals["wrap"] == n % 10
    assert sorted(got["wrapped"]) == sorted([k % 10 for k in range(n)])
    assert got["per_block"] == [128] * 7 + [n - 7 * 128]


def test_spin_lock_within_a_block_does_not_hang(tmp_path):
    blocks, threads = 2, 64
    script = f"""
lock, counter, inside, most = (device(ctypes.c_int, 1) for _ in range(4))
lib.run_lock(lock, counter, inside, most, {blocks}, {threads})
emit(lock=lock[0], counter=counter[0], inside=inside[0], most=most[0])
"""
    got = ok(run_cuda(tmp_path, ATOMICS, script, timeout=30))
    assert got == {"lock": 0, "counter": blocks * threads, "inside": 0, "most": 1}


@pytest.mark.xfail(
    strict=True,
    raises=subprocess.TimeoutExpired,
    reason="known limit (docs/cuda-on-cpu.md): the compiler leaves a static __shared__ variable's loads "
    "unchecked, so a poll of one never reaches a preemption hook and the other threads never run",
)
def test_spin_wait_on_a_volatile_flag_does_not_hang(tmp_path):
    threads = 64
    script = f"out = device(ctypes.c_int, {threads})\nlib.run_flag_wait(out, {threads})\nemit(out=list(out))"
    got = ok(run_cuda(tmp_path, ATOMICS, script, timeout=3))
    assert got["out"] == [42] * (threads - 1) + [0]


# ---- 6: static and dynamic shared memory -----------------------------------------------------------------------
SHARED = r"""
#include <cstdint>
#define TILE 16

__shared__ int file_scope[64];  // __shared__ at namespace scope

__global__ void transpose(const float* in, float* out, int rows, int cols) {
    __shared__ float tile[TILE][TILE + 1];
    int x = blockIdx.x * TILE + threadIdx.x, y = blockIdx.y * TILE + threadIdx.y;
    if (x < cols && y < rows) tile[threadIdx.y][threadIdx.x] = in[y * cols + x];
    __syncthreads();
    x = blockIdx.y * TILE + threadIdx.x;
    y = blockIdx.x * TILE + threadIdx.y;
    if (x < rows && y < cols) out[y * rows + x] = tile[threadIdx.x][threadIdx.y];
}

__global__ void rotate_file_scope(int* out) {
    int t = threadIdx.x;
    file_scope[t] = t * t + blockIdx.x;
    __syncthreads();
    out[blockIdx.x * 64 + t] = file_scope[(t + 1) % 64];
}

// reads its slot before anyone writes it (NaN on entry, in every block), then reverses the block's values
__global__ void reverse_dynamic(const float* in, float* out, int* was_nan) {
    extern __shared__ float buf[];
    int t = threadIdx.x, n = blockDim.x, base = blockIdx.x * n;
    was_nan[base + t] = buf[t] != buf[t];
    __syncthreads();
    buf[t] = in[base + t];
    __syncthreads();
    out[base + t] = buf[n - 1 - t];
}

// one aligned byte buffer carved into float4s and ints
__global__ void carve_aligned(const int* in, float* fout, int* iout, int* aligned) {
    extern __shared__ __align__(16) unsigned char smem[];
    float4* v = reinterpret_cast<float4*>(smem);
    int* counts = reinterpret_cast<int*>(smem + blockDim.x * sizeof(float4));
    int t = threadIdx.x;
    if (t == 0) aligned[0] = reinterpret_cast<uintptr_t>(smem) % 16 == 0;
    v[t] = make_float4(t, 2 * t, 3 * t, 4 * t);
    counts[t] = in[t] * 10;
    __syncthreads();
    int o = (t + 1) % blockDim.x;
    fout[t] = v[o].x + v[o].y + v[o].z + v[o].w;
    iout[t] = counts[o];
}

__global__ void volatile_alignas(int* out) {
    extern volatile __shared__ alignas(8) int vbuf[];
    vbuf[threadIdx.x] = 3 * threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = vbuf[blockDim.x - 1 - threadIdx.x];
}

// the CUDA samples' way to type dynamic shared memory in a template
template <class T> struct SharedMemory {
    __device__ operator T*() {
        extern __shared__ int __smem[];
        return (T*)__smem;
    }
};

template <class T> __global__ void tree_sum(const T* in, T* out) {
    T* s = SharedMemory<T>();
    int t = threadIdx.x;
    s[t] = in[blockIdx.x * blockDim.x + t];
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (t < stride) s[t] += s[t + stride];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}

extern "C" void run_transpose(const float* in, float* out, int rows, int cols) {
    transpose<<<dim3((cols + TILE - 1) / TILE, (rows + TILE - 1) / TILE), dim3(TILE, TILE)>>>(in, out, rows, cols);
}
extern "C" void run_file_scope(int* out) { rotate_file_scope<<<2, 64>>>(out); }
extern "C" void run_reverse(const float* in, float* out, int* was_nan, int blocks, int threads) {
    reverse_dynamic<<<blocks, threads, threads * sizeof(float)>>>(in, out, was_nan);
}
extern "C" void run_carve(const int* in, float* fout, int* iout, int* aligned, int threads) {
    carve_aligned<<<1, threads, threads * (sizeof(float4) + sizeof(int))>>>(in, fout, iout, aligned);
}
extern "C" void run_volatile(int* out, int threads) { volatile_alignas<<<1, threads, threads * sizeof(int)>>>(out); }
extern "C" void run_tree(const float* fin, float* fout, const double* din, double* dout, int blocks, int threads) {
    tree_sum<float><<<blocks, threads, threads * sizeof(float)>>>(fin, fout);
    tree_sum<double><<<blocks, threads, threads * sizeof(double)>>>(din, dout);
}
"""


def test_static_and_dynamic_shared_memory(tmp_path):
    rows, cols, blocks, threads = 37, 21, 3, 64
    matrix = [float(r * 100 + c) for r in range(rows) for c in range(cols)]
    script = f"""
inp = device(ctypes.c_float, {rows * cols}, {matrix})
out = device(ctypes.c_float, {rows * cols})
lib.run_transpose(inp, out, {rows}, {cols})
rotated = device(ctypes.c_int, 128)
lib.run_file_scope(rotated)
values = device(ctypes.c_float, {blocks * threads}, [float(i) for i in range({blocks * threads})])
reversed_ = device(ctypes.c_float, {blocks * threads})
was_nan = device(ctypes.c_int, {blocks * threads})
lib.run_reverse(values, reversed_, was_nan, {blocks}, {threads})
ints = device(ctypes.c_int, {threads}, list(range({threads})))
fout, iout, aligned = device(ctypes.c_float, {threads}), device(ctypes.c_int, {threads}), device(ctypes.c_int, 1)
lib.run_carve(ints, fout, iout, aligned, {threads})
vout = device(ctypes.c_int, {threads})
lib.run_volatile(vout, {threads})
fin = device(ctypes.c_float, {blocks * threads}, [0.5 * i for i in range({blocks * threads})])
din = device(ctypes.c_double, {blocks * threads}, [0.25 * i for i in range({blocks * threads})])
fsum, dsum = device(ctypes.c_float, {blocks}), device(ctypes.c_double, {blocks})
lib.run_tree(fin, fsum, din, dsum, {blocks}, {threads})
emit(transposed=list(out), rotated=list(rotated), reversed=list(reversed_), was_nan=list(was_nan), fout=list(fout),
     iout=list(iout), aligned=aligned[0], vout=list(vout), fsum=list(fsum), dsum=list(dsum))
"""
    got = ok(run_cuda(tmp_path, SHARED, script))
    assert got["transposed"] == [matrix[r * cols + c] for c in range(cols) for r in range(rows)]
    assert got["rotated"] == [((t + 1) % 64) ** 2 + b for b in range(2) for t in range(64)]
    assert got["reversed"] == [float(b * threads + threads - 1 - t) for b in range(blocks) for t in range(threads)]
    assert got["was_nan"] == [1] * (blocks * threads), "dynamic shared memory must start as NaN in every block"
    assert got["aligned"] == 1
    assert got["fout"] == [10.0 * ((t + 1) % threads) for t in range(threads)]
    assert got["iout"] == [10 * ((t + 1) % threads) for t in range(threads)]
    assert got["vout"] == [3 * (threads - 1 - t) for t in range(threads)]
    assert got["fsum"] == [sum(0.5 * i for i in range(b * threads, (b + 1) * threads)) for b in range(blocks)]
    assert got["dsum"] == [sum(0.25 * i for i in range(b * threads, (b + 1) * threads)) for b in range(blocks)]


# ---- 7: the runtime API ----------------------------------------------------------------------------------------
RUNTIME = r"""
#include <cuda_runtime.h>
#include <cstdlib>

// a failing call returns 1000 * its line + its error, so the test names the call
#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) return 1000 * __LINE__ + (int)e_; } while (0)

__constant__ float coeffs[8];

__global__ void affine(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 2.0f * in[i] + 1.0f;
}

__global__ void use_constant(float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = coeffs[i % 8] * i;
}

__global__ void mark(int* out) { out[blockIdx.x * blockDim.x + threadIdx.x] += 1; }

__global__ void big_shared(int* out, int n) {
    extern __shared__ int buf[];
    for (int k = threadIdx.x; k < n; k += blockDim.x) buf[k] = k;
    __syncthreads();
    if (threadIdx.x == 0) {
        long long total = 0;
        for (int k = 0; k < n; ++k) total += buf[k];
        out[0] = (int)total;
        out[1] = buf[n - 1];
    }
}

extern "C" int roundtrip(const float* host_in, float* host_out, int n) {
    float *a = nullptr, *b = nullptr;
    CK(cudaMalloc(&a, n * sizeof(float)));
    CK(cudaMalloc((void**)&b, n * sizeof(float)));
    CK(cudaMemcpy(a, host_in, n * sizeof(float), cudaMemcpyHostToDevice));
    affine<<<(n + 127) / 128, 128>>>(a, b, n);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(a, b, n * sizeof(float), cudaMemcpyDeviceToDevice));
    CK(cudaMemcpy(host_out, a, n * sizeof(float), cudaMemcpyDeviceToHost));
    CK(cudaFree(a));
    CK(cudaFree(b));
    return 0;
}

extern "C" int not_device_memory(int* codes) {
    int on_stack = 0;
    codes[0] = cudaFree(&on_stack);   // not from cudaMalloc
    codes[1] = cudaGetLastError();
    codes[2] = cudaGetLastError();    // cleared by the call before
    codes[3] = cudaFree(nullptr);
    return 0;
}

extern "C" int memset_check(unsigned char* host, int n, int* ints) {
    unsigned char* d;
    CK(cudaMalloc(&d, n));
    CK(cudaMemset(d, 0xab, n));
    CK(cudaMemset(d + 3, 0, 5));
    CK(cudaMemcpy(host, d, n, cudaMemcpyDeviceToHost));
    CK(cudaFree(d));
    int* di;
    CK(cudaMalloc(&di, 16 * sizeof(int)));
    CK(cudaMemset(di, 0xff, 16 * sizeof(int)));
    CK(cudaMemset(di, 0, 8 * sizeof(int)));
    CK(cudaMemcpy(ints, di, 16 * sizeof(int), cudaMemcpyDeviceToHost));
    CK(cudaFree(di));
    return 0;
}

extern "C" int constant_check(float* host_out, float* readback, int n) {
    float h[8];
    for (int k = 0; k < 8; ++k) h[k] = 0.5f * (k + 1);
    CK(cudaMemcpyToSymbol(coeffs, h, sizeof(h)));
    float last = -3.0f;
    CK(cudaMemcpyToSymbol(coeffs, &last, sizeof(float), 7 * sizeof(float)));  // an offset: coeffs[7]
    float* d;
    CK(cudaMalloc(&d, n * sizeof(float)));
    use_constant<<<(n + 63) / 64, 64>>>(d, n);
    CK(cudaGetLastError());
    CK(cudaMemcpy(host_out, d, n * sizeof(float), cudaMemcpyDeviceToHost));
    CK(cudaFree(d));
    CK(cudaMemcpyFromSymbol(readback, coeffs, sizeof(h)));
    return 0;
}

extern "C" int streams_and_events(const float* host_in, float* host_out, int n, float* ms) {
    cudaStream_t s;
    cudaEvent_t start, stop;
    CK(cudaStreamCreate(&s));
    CK(cudaEventCreate(&start));
    CK(cudaEventCreate(&stop));
    float *a, *b;
    CK(cudaMalloc(&a, n * sizeof(float)));
    CK(cudaMalloc(&b, n * sizeof(float)));
    CK(cudaMemcpyAsync(a, host_in, n * sizeof(float), cudaMemcpyHostToDevice, s));
    CK(cudaEventRecord(start, s));
    affine<<<(n + 63) / 64, 64, 0, s>>>(a, b, n);
    CK(cudaGetLastError());
    CK(cudaEventRecord(stop, s));
    CK(cudaMemcpyAsync(host_out, b, n * sizeof(float), cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaEventSynchronize(stop));
    CK(cudaEventElapsedTime(ms, start, stop));
    CK(cudaEventDestroy(start));
    CK(cudaEventDestroy(stop));
    CK(cudaStreamDestroy(s));
    CK(cudaFree(a));
    CK(cudaFree(b));
    return 0;
}

extern "C" int invalid_launch(int* codes, int* ran) {
    int* d;
    CK(cudaMalloc(&d, 2048 * sizeof(int)));
    CK(cudaMemset(d, 0, 2048 * sizeof(int)));
    mark<<<1, 2048>>>(d);
    codes[0] = cudaPeekAtLastError();
    codes[1] = cudaGetLastError();
    codes[2] = cudaGetLastError();
    mark<<<1, dim3(32, 32, 2)>>>(d);
    codes[3] = cudaGetLastError();
    mark<<<0, 32>>>(d);
    codes[4] = cudaGetLastError();
    CK(cudaMemcpy(ran, d, 2048 * sizeof(int), cudaMemcpyDeviceToHost));  // nothing ran: all 0
    mark<<<2, 32>>>(d);
    codes[5] = cudaGetLastError();
    CK(cudaMemcpy(ran + 2048, d, 2048 * sizeof(int), cudaMemcpyDeviceToHost));  // the first 64 are 1
    CK(cudaFree(d));
    return 0;
}

extern "C" int big_dynamic_shared(int* codes, int* results) {
    const int n = 64 * 1024 / sizeof(int);
    int* d;
    CK(cudaMalloc(&d, 2 * sizeof(int)));
    CK(cudaMemset(d, 0, 2 * sizeof(int)));
    big_shared<<<1, 256, 48 * 1024>>>(d, 48 * 1024 / sizeof(int));  // the default limit: fine
    codes[0] = cudaGetLastError();
    CK(cudaMemcpy(results, d, 2 * sizeof(int), cudaMemcpyDeviceToHost));
    CK(cudaMemset(d, 0, 2 * sizeof(int)));
    big_shared<<<1, 256, 64 * 1024>>>(d, n);  // above 48 KiB without opting in: refused
    codes[1] = cudaGetLastError();
    CK(cudaMemcpy(results + 2, d, 2 * sizeof(int), cudaMemcpyDeviceToHost));
    codes[2] = cudaFuncSetAttribute(big_shared, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024);
    big_shared<<<1, 256, 64 * 1024>>>(d, n);
    codes[3] = cudaGetLastError();
    CK(cudaMemcpy(results + 4, d, 2 * sizeof(int), cudaMemcpyDeviceToHost));
    codes[4] = cudaFuncSetAttribute(big_shared, cudaFuncAttributeMaxDynamicSharedMemorySize, 300 * 1024);
    codes[5] = cudaGetLastError();
    CK(cudaFree(d));
    return 0;
}

__device__ int table[64];

extern "C" int symbol_address(int* out) {
    int* p = nullptr;
    CK(cudaGetSymbolAddress((void**)&p, table));
    CK(cudaMemset(p, 0, sizeof(table)));
    mark<<<2, 32>>>(p);
    CK(cudaGetLastError());
    CK(cudaMemcpyFromSymbol(out, table, sizeof(table)));
    return 0;
}

extern "C" int properties(int* out) {
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    out[0] = p.warpSize;
    out[1] = p.maxThreadsPerBlock;
    out[2] = (int)p.sharedMemPerBlock;
    out[3] = p.multiProcessorCount > 0;
    int count = 0, size = 0;
    CK(cudaGetDeviceCount(&count));
    out[4] = count;
    CK(cudaDeviceGetAttribute(&size, cudaDevAttrWarpSize, 0));
    out[5] = size;
    out[6] = warpSize;
    out[7] = cudaGetDeviceProperties(&p, 1);
    out[8] = cudaGetLastError();
    return 0;
}
"""

CUDA_SUCCESS, CUDA_INVALID_VALUE, CUDA_INVALID_CONFIGURATION, CUDA_INVALID_DEVICE = 0, 1, 9, 101


def test_runtime_api(tmp_path):
    n = 300
    data = [0.5 * i - 20 for i in range(n)]
    script = f"""
F = ctypes.c_float
n = {n}
host_in = (F * n)(*{data})
out = (F * n)()
rc = {{}}
rc["roundtrip"] = lib.roundtrip(host_in, out, n)
roundtrip = list(out)
free_codes = (ctypes.c_int * 4)()
rc["not_device"] = lib.not_device_memory(free_codes)
bytes_, ints = (ctypes.c_ubyte * 20)(), (ctypes.c_int * 16)()
rc["memset"] = lib.memset_check(bytes_, 20, ints)
const_out, readback = (F * n)(), (F * 8)()
rc["constant"] = lib.constant_check(const_out, readback, n)
stream_out, ms = (F * n)(), F(-1.0)
rc["streams"] = lib.streams_and_events(host_in, stream_out, n, ctypes.byref(ms))
codes, ran = (ctypes.c_int * 6)(), (ctypes.c_int * 4096)()
rc["invalid"] = lib.invalid_launch(codes, ran)
shared_codes, shared_results = (ctypes.c_int * 6)(), (ctypes.c_int * 6)()
rc["shared"] = lib.big_dynamic_shared(shared_codes, shared_results)
props = (ctypes.c_int * 9)()
rc["props"] = lib.properties(props)
emit(rc=rc, roundtrip=roundtrip, free_codes=list(free_codes), bytes=list(bytes_), ints=list(ints),
     constant=list(const_out), readback=list(readback), stream_out=list(stream_out), ms=ms.value, codes=list(codes),
     ran_invalid=sum(ran[:2048]), ran_valid=list(ran[2048:]), shared_codes=list(shared_codes),
     shared_results=list(shared_results), props=list(props))
"""
    got = ok(run_cuda(tmp_path, RUNTIME, script))
    assert got["rc"] == dict.fromkeys(
        ["roundtrip", "not_device", "memset", "constant", "streams", "invalid", "shared", "props"], 0
    )
    assert got["roundtrip"] == [2 * x + 1 for x in data]
    assert got["free_codes"] == [CUDA_INVALID_VALUE, CUDA_INVALID_VALUE, CUDA_SUCCESS, CUDA_SUCCESS]
    assert got["bytes"] == [0xAB] * 3 + [0] * 5 + [0xAB] * 12
    assert got["ints"] == [0] * 8 + [-1] * 8
    coeffs = [0.5 * (k + 1) for k in range(7)] + [-3.0]
    assert got["readback"] == coeffs
    assert got["constant"] == [coeffs[i % 8] * i for i in range(n)]
    assert got["stream_out"] == [2 * x + 1 for x in data]
    assert got["ms"] >= 0
    # blockDim 2048 (or 32x32x2), and an empty grid: cudaErrorInvalidConfiguration, and the kernel did not run
    assert got["codes"] == [
        CUDA_INVALID_CONFIGURATION,
        CUDA_INVALID_CONFIGURATION,
        CUDA_SUCCESS,
        CUDA_INVALID_CONFIGURATION,
        CUDA_INVALID_CONFIGURATION,
        CUDA_SUCCESS,
    ]
    assert got["ran_invalid"] == 0
    assert got["ran_valid"] == [1] * 64 + [0] * (2048 - 64)
    # dynamic shared memory: 48 KiB by default; 64 KiB refused until cudaFuncSetAttribute opts in; 300 KiB never
    assert got["shared_codes"] == [
        CUDA_SUCCESS,
        CUDA_INVALID_VALUE,
        CUDA_SUCCESS,
        CUDA_SUCCESS,
        CUDA_INVALID_VALUE,
        CUDA_INVALID_VALUE,
    ]
    n48, n64 = 48 * 1024 // 4, 64 * 1024 // 4
    assert got["shared_results"] == [n48 * (n48 - 1) // 2, n48 - 1, 0, 0, n64 * (n64 - 1) // 2, n64 - 1]
    assert got["props"] == [32, 1024, 48 * 1024, 1, 1, 32, 32, CUDA_INVALID_DEVICE, CUDA_INVALID_DEVICE]


def test_symbol_address_is_device_memory(tmp_path):
    script = "out = (ctypes.c_int * 64)()\nrc = lib.symbol_address(out)\nemit(rc=rc, out=list(out))"
    assert ok(run_cuda(tmp_path, RUNTIME, script)) == {"rc": 0, "out": [1] * 64}


# ---- C++ that nvcc compiles and the emulator's header must too -------------------------------------------------
def test_volatile_pointer_parameter(tmp_path):
    source = r"""
__global__ void bump(volatile int* flags) { flags[threadIdx.x] += threadIdx.x; }
extern "C" void run(int* flags) { bump<<<1, 4>>>(flags); }
"""
    script = "flags = device(ctypes.c_int, 4, [1] * 4)\nlib.run(flags)\nemit(flags=list(flags))"
    assert ok(run_cuda(tmp_path, source, script)) == {"flags": [1, 2, 3, 4]}


def test_float_classification_functions(tmp_path):
    source = r"""
__global__ void classify(const float* x, int* out) {
    int i = threadIdx.x;
    out[4 * i] = isnan(x[i]);
    out[4 * i + 1] = isinf(x[i]);
    out[4 * i + 2] = isfinite(x[i]);
    out[4 * i + 3] = signbit(x[i]) != 0;
}
extern "C" void run(const float* x, int* out, int n) { classify<<<1, n>>>(x, out); }
"""
    values = [1.0, float("nan"), float("inf"), float("-inf"), -0.0, -2.5]
    script = f"""
x = device(ctypes.c_float, {len(values)}, [float(v) for v in {[repr(v) for v in values]}])
out = device(ctypes.c_int, {4 * len(values)})
lib.run(x, out, {len(values)})
emit(out=list(out))
"""
    expected = []
    for v in values:
        expected += [int(math.isnan(v)), int(math.isinf(v)), int(math.isfinite(v)), int(math.copysign(1, v) < 0)]
    assert ok(run_cuda(tmp_path, source, script)) == {"out": expected}


def test_overloaded_kernels(tmp_path):
    """An overload set has no function pointer to launch through: each thread calls the kernel, and the call picks
    the overload as nvcc's launch does."""
    source = r"""
__global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }
__global__ void twice(double* x) { x[threadIdx.x] *= 2.0; }
extern "C" void run(float* f, double* d) { twice<<<1, 4>>>(f); twice<<<1, 4>>>(d); }
"""
    script = """
f = device(ctypes.c_float, 4, [1.5] * 4)
d = device(ctypes.c_double, 4, [0.25] * 4)
lib.run(f, d)
emit(f=list(f), d=list(d))
"""
    assert ok(run_cuda(tmp_path, source, script)) == {"f": [3.0] * 4, "d": [0.5] * 4}


def test_template_kernel_with_deduced_arguments(tmp_path):
    """A template's arguments deduced from the launch's, as nvcc does (and explicit ones, through its pointer)."""
    source = r"""
template <typename T> __global__ void twice(T* x) { x[threadIdx.x] *= 2; }
template <typename T, int K> __global__ void scale(const T* in, T* out) { out[threadIdx.x] = K * in[threadIdx.x]; }
namespace ns { template <typename T> __global__ void add_one(T* x, int n) { if (threadIdx.x < n) x[threadIdx.x] += 1; } }
extern "C" void run(float* f, float* g) {
    twice<<<1, 4>>>(f);
    twice<float><<<1, 4>>>(f);
    scale<float, 3> <<<1, 4>>>(f, g);
    ns::add_one<<<1, 4>>>(g, 3);
}
"""
    script = """
f = device(ctypes.c_float, 4, [1.5] * 4)
g = device(ctypes.c_float, 4, [0.0] * 4)
lib.run(f, g)
emit(f=list(f), g=list(g))
"""
    assert ok(run_cuda(tmp_path, source, script)) == {"f": [6.0] * 4, "g": [19.0, 19.0, 19.0, 18.0]}


# ---- 8: faults: a clear message, never a hang -----------------------------------------------------------------
FAULTS = r"""
#include <cassert>
#include <cstdlib>

__global__ void copy_shifted(const float* in, float* out) {
    int i = threadIdx.x;
    out[i] = in[i + 64];  // OOB READ
}

__global__ void double_it(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = 2.0f * in[i];  // NO BOUNDS CHECK
}

__global__ void histogram(const int* bins, int* hist) {
    atomicAdd(&hist[bins[threadIdx.x]], 1);  // ATOMIC OOB
}

__global__ void write_all(int* out) { out[threadIdx.x] = 1; }  // NULL WRITE

__global__ void trap_on_three(int* out) {
    if (threadIdx.x == 3) __trap();
    out[threadIdx.x] = 1;
}

__global__ void assert_below_three(int* out) {
    assert(threadIdx.x < 3);  // ASSERT
    out[threadIdx.x] = 1;
}

__global__ void shuffle_after_return(int* out) {
    if (threadIdx.x == 5) return;
    out[threadIdx.x] = __shfl_sync(0xffffffff, (int)threadIdx.x, 0);
}

__global__ void barrier_against_shuffle(int* out) {
    int v = threadIdx.x;
    if (threadIdx.x < 16) __syncthreads();
    else v = __shfl_sync(0xffffffff, v, 0);
    out[threadIdx.x] = v;
}

extern "C" int host_pointer() {
    float* in = (float*)malloc(64 * sizeof(float));
    float* out = (float*)malloc(64 * sizeof(float));
    double_it<<<1, 64>>>(in, out, 64);
    return 0;
}

extern "C" int oob_read() {
    float *in, *out;
    cudaMalloc(&in, 16 * sizeof(float));
    cudaMalloc(&out, 64 * sizeof(float));
    copy_shifted<<<1, 64>>>(in, out);
    cudaDeviceSynchronize();
    return 0;
}

extern "C" int missing_bounds_check() {
    const int n = 1000;
    float *in, *out;
    cudaMalloc(&in, n * sizeof(float));
    cudaMalloc(&out, n * sizeof(float));
    cudaMemset(in, 0, n * sizeof(float));
    double_it<<<(n + 255) / 256, 256>>>(in, out, n);
    cudaDeviceSynchronize();
    return 0;
}

extern "C" int atomic_oob() {
    int *bins, *hist;
    int host[32];
    for (int k = 0; k < 32; ++k) host[k] = 64 + k;  // hist has 16: past the end (and past cudaMalloc's rounding)
    cudaMalloc(&bins, sizeof(host));
    cudaMalloc(&hist, 16 * sizeof(int));
    cudaMemcpy(bins, host, sizeof(host), cudaMemcpyHostToDevice);
    histogram<<<1, 32>>>(bins, hist);
    return 0;
}

extern "C" int null_write() { write_all<<<1, 32>>>(nullptr); return 0; }

template <void (*K)(int*)> int with_buffer(int threads) {
    int* d;
    cudaMalloc(&d, threads * sizeof(int));
    K<<<1, threads>>>(d);
    cudaDeviceSynchronize();
    return 0;
}
extern "C" int trap() { return with_buffer<trap_on_three>(32); }
extern "C" int assert_fails() { return with_buffer<assert_below_three>(32); }
extern "C" int lane_returned() { return with_buffer<shuffle_after_return>(32); }
extern "C" int split_barrier() { return with_buffer<barrier_against_shuffle>(32); }
"""


def run_fault(tmp_path, entry: str, name: str = "faults.cu", seed: int = 1) -> Run:
    run = run_cuda(tmp_path, FAULTS, f"lib.{entry}()\nemit(finished=True)", seed=seed, name=name, timeout=60)
    assert run.returncode != 0 and run.result is None, f"{entry} did not stop the child:\n{run.output[-3000:]}"
    explained = run.explained()
    assert explained is not None, run.output[-3000:]
    code, message = explained
    assert code in ("memory_error", "emulated_fault") and message
    return run


def test_fault_unregistered_host_pointer(tmp_path):
    run = run_fault(tmp_path, "host_pointer")
    assert "kcourse-emu: " in run.output and "host pointer" in run.output
    code, message = run.explained()
    assert code == "emulated_fault" and "host pointer" in message and "double_it" in message


@needs_asan
def test_fault_out_of_bounds_read_names_the_line(tmp_path):
    run = run_fault(tmp_path, "oob_read")
    line = line_of(FAULTS, "// OOB READ")
    assert "heap-buffer-overflow" in run.output
    assert f"faults.cu:{line}" in run.output
    code, message = run.explained()
    assert code == "memory_error"
    assert f"faults.cu:{line}" in message and "copy_shifted" in message and "read of 4 bytes" in message


@needs_asan
def test_fault_missing_bounds_check_in_the_last_block(tmp_path):
    run = run_fault(tmp_path, "missing_bounds_check")
    assert f"faults.cu:{line_of(FAULTS, '// NO BOUNDS CHECK')}" in run.explained()[1]


@needs_asan
def test_fault_out_of_bounds_atomic_names_the_learners_line(tmp_path):
    run = run_fault(tmp_path, "atomic_oob")
    assert "heap-buffer-overflow" in run.output
    code, message = run.explained()
    assert code == "memory_error"
    assert f"faults.cu:{line_of(FAULTS, '// ATOMIC OOB')}" in message, message


@needs_asan
def test_fault_report_names_the_file_built(tmp_path):
    build_library(tmp_path, FAULTS, "faults.cu")
    (tmp_path / "other").mkdir()
    run = run_fault(tmp_path / "other", "oob_read", name="renamed.cu")
    assert f"renamed.cu:{line_of(FAULTS, '// OOB READ')}" in run.explained()[1]


@needs_asan
def test_fault_null_pointer_write(tmp_path):
    run = run_fault(tmp_path, "null_write")
    assert "SEGV on unknown address" in run.output
    code, message = run.explained()
    assert code == "memory_error" and f"faults.cu:{line_of(FAULTS, '// NULL WRITE')} in write_all" in message


@needs_asan
def test_fault_null_pointer_write_is_explained_as_one(tmp_path):
    code, message = run_fault(tmp_path, "null_write").explained()
    assert "null or wild pointer" in message, message


def test_fault_trap(tmp_path):
    run = run_fault(tmp_path, "trap")
    assert "kcourse-emu: " in run.output and "__trap" in run.output
    code, message = run.explained()
    assert code == "emulated_fault" and "__trap" in message and "thread (3, 0, 0)" in message


def test_fault_assert_in_a_kernel(tmp_path):
    run = run_fault(tmp_path, "assert_fails")
    assert f"faults.cu:{line_of(FAULTS, '// ASSERT')}" in run.explained()[1]


def test_fault_warp_intrinsic_waits_for_a_lane_that_returned(tmp_path):
    run = run_fault(tmp_path, "lane_returned")
    code, message = run.explained()
    assert code == "emulated_fault" and "already returned" in message and "shuffle_after_return" in message


def test_fault_barrier_against_shuffle_is_a_deadlock(tmp_path):
    run = run_fault(tmp_path, "split_barrier")
    code, message = run.explained()
    assert code == "emulated_fault" and "deadlock" in message and "__syncthreads" in message


# ---- tensor cores: nvcuda::wmma (mma.h) -----------------------------------------------------------------------------
WMMA = r"""
#include <mma.h>
using namespace nvcuda;

// one warp: d = a b + c twice over (the second mma's c is the first's d), a row-major, b as `b_col` says, d stored
// row-major at d and column-major at d_t; its fragments' element counts at counts
template <class L>
__global__ void gemm16(const __half* a, const __half* b, const float* c, float* d, float* d_t, int* counts) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, L> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::load_matrix_sync(acc, c, 16, wmma::mem_row_major);
    wmma::mma_sync(acc, fa, fb, acc);
    for (int i = 0; i < acc.num_elements; ++i) acc.x[i] *= 2.f;  // element-wise, whatever the layout
    wmma::mma_sync(acc, fa, fb, acc);
    wmma::store_matrix_sync(d, acc, 16, wmma::mem_row_major);
    wmma::store_matrix_sync(d_t, acc, 16, wmma::mem_col_major);
    if (threadIdx.x == 0) counts[0] = fa.num_elements, counts[1] = fb.num_elements, counts[2] = acc.num_elements;
}

// m32n8k16 in bfloat16, the accumulator filled with 1: d = a b + 1
__global__ void gemm32x8(const __nv_bfloat16* a, const __nv_bfloat16* b, float* d) {
    wmma::fragment<wmma::matrix_a, 32, 8, 16, __nv_bfloat16, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 32, 8, 16, __nv_bfloat16, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 32, 8, 16, float> acc;
    wmma::fill_fragment(acc, 1.f);
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 8);
    wmma::mma_sync(acc, fa, fb, acc);
    wmma::store_matrix_sync(d, acc, 8, wmma::mem_row_major);
}

__global__ void half_warp_mma(float* d) {  // lanes 16..31 never reach mma_sync
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(fa, __float2half(1.f));
    wmma::fill_fragment(fb, __float2half(1.f));
    wmma::fill_fragment(acc, 0.f);
    if (threadIdx.x < 16) wmma::mma_sync(acc, fa, fb, acc);  // WMMA HALF
    d[threadIdx.x] = acc.x[0];
}

extern "C" void run_gemm16(const __half* a, const __half* b, const float* c, float* d, float* d_t, int* counts,
                           int b_col) {
    if (b_col) gemm16<wmma::col_major><<<1, 32>>>(a, b, c, d, d_t, counts);
    else gemm16<wmma::row_major><<<1, 32>>>(a, b, c, d, d_t, counts);
}
extern "C" void run_gemm32x8(const __nv_bfloat16* a, const __nv_bfloat16* b, float* d) { gemm32x8<<<1, 32>>>(a, b, d); }
extern "C" void run_half_warp(float* d) { half_warp_mma<<<1, 32>>>(d); }
extern "C" void run_short_warp(float* d) { half_warp_mma<<<1, 16>>>(d); }
"""

# a's row 0 holds 16-bit floats of every class a tensor core multiplies exactly: the largest, the smallest normal and
# subnormals, a negative zero (the rest small integers, so every product and sum is exact in float)
SPECIAL_HALVES = [65504.0, 2.0**-14, 2.0**-24, 3 * 2.0**-24, -0.0, -2.5, 0.5, 1.0] + [float(i - 4) for i in range(8)]


def half_bits(values):
    return [struct.unpack("<H", struct.pack("<e", v))[0] for v in values]


def bfloat16_bits(values):  # the float's high half: exact for the small integers used here
    return [struct.unpack("<I", struct.pack("<f", v))[0] >> 16 for v in values]


def matmul(a, b, n, m, k):
    return [[sum(a[i][t] * b[t][j] for t in range(k)) for j in range(m)] for i in range(n)]


@pytest.mark.parametrize("b_col", [1, 0])
def test_wmma_products_stores_and_fragment_sizes(tmp_path, b_col):
    a = [SPECIAL_HALVES] + [[float((3 * i + j) % 7 - 3) for j in range(16)] for i in range(1, 16)]
    # b[k][n] picks a's column 5n + 3 (mod 16) into d's column n: one product each, so the special values come
    # through exactly, and a layout mistaken anywhere (a transposed, b's major) moves them
    b = [[1.0 if k == (5 * n + 3) % 16 else 0.0 for n in range(16)] for k in range(16)]
    b_memory = [b[k][n] for n in range(16) for k in range(16)] if b_col else [v for row in b for v in row]
    c = [0.0] * 16 + [float(i % 9 - 4) for i in range(16, 256)]  # row 0's sums hold one term: exact in float
    script = f"""
a = device(ctypes.c_uint16, 256, {half_bits([v for row in a for v in row])})
b = device(ctypes.c_uint16, 256, {half_bits(b_memory)})
c = device(ctypes.c_float, 256, {c})
d, d_t, counts = device(ctypes.c_float, 256), device(ctypes.c_float, 256), device(ctypes.c_int, 3)
lib.run_gemm16(a, b, c, d, d_t, counts, {b_col})
emit(d=list(d), d_t=list(d_t), counts=list(counts))
"""
    got = ok(run_cuda(tmp_path, WMMA, script))
    ab = matmul(a, b, 16, 16, 16)
    want = [[3 * ab[i][j] + 2 * c[16 * i + j] for j in range(16)] for i in range(16)]  # (ab + c) * 2 + ab
    assert got["d"] == [v for row in want for v in row]
    assert got["d_t"] == [want[i][j] for j in range(16) for i in range(16)]
    assert got["counts"] == [16, 16, 8]  # as on a GPU


def test_wmma_m32n8k16_in_bfloat16(tmp_path):
    a = [[float((i + 2 * j) % 5 - 2) for j in range(16)] for i in range(32)]
    b = [[float((i * 3 + j) % 4 - 1) for j in range(8)] for i in range(16)]
    script = f"""
a = device(ctypes.c_uint16, 512, {bfloat16_bits([v for row in a for v in row])})
b = device(ctypes.c_uint16, 128, {bfloat16_bits([v for row in b for v in row])})
d = device(ctypes.c_float, 256)
lib.run_gemm32x8(a, b, d)
emit(d=list(d))
"""
    want = matmul(a, b, 32, 8, 16)
    assert ok(run_cuda(tmp_path, WMMA, script))["d"] == [v + 1 for row in want for v in row]


def test_fault_wmma_reached_by_half_a_warp_is_a_deadlock(tmp_path):
    run = run_cuda(tmp_path, WMMA, "d = device(ctypes.c_float, 32)\nlib.run_half_warp(d)\nemit(finished=True)")
    assert run.returncode != 0 and run.result is None
    code, message = run.explained()
    assert code == "emulated_fault" and "already returned" in message and "half_warp_mma" in message


def test_fault_wmma_in_a_block_of_16_threads(tmp_path):
    run = run_cuda(tmp_path, WMMA, "d = device(ctypes.c_float, 32)\nlib.run_short_warp(d)\nemit(finished=True)")
    code, message = run.explained()
    assert code == "emulated_fault" and "whole warp of 32 threads" in message


# ---- tensor cores: the PTX (ldmatrix, mma.sync m16n8k16, st.shared.v4), as the kit's attention kernels write it ----
PTX_MMA = r"""
#include <cuda_bf16.h>
#include <cuda_fp16.h>

__device__ __forceinline__ uint32_t smem_address(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
// written compactly, and with c apart from d: the emulator reads any spacing and either way of passing c
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3},[%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], uint32_t addr, bool trans) {
    if (trans) asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1},[%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
    else asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1},[%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}
__device__ __forceinline__ void st_shared_16(uint32_t dst, const uint32_t (&w)[4]) {
    asm volatile("st.shared.v4.b32 [%0],{%1,%2,%3,%4};" ::"r"(dst), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3]));
}
template <bool BF16>
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], const float (&c)[4]) {
    if (BF16) asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3},{%4,%5,%6,%7},{%8,%9},{%10,%11,%12,%13};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
    else asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3},{%4,%5,%6,%7},{%8,%9},{%10,%11,%12,%13};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

// one warp: d (16 x 8, row-major) = a (16 x 16, row-major) b + 1, b given k-major (16 x 8: ldmatrix .trans) or
// n-major (8 x 16: plain ldmatrix); a reaches shared memory through st.shared.v4, b by plain stores
template <bool BF16>
__global__ void mma16816(const uint16_t* a, const uint16_t* b, float* out, int b_k_major) {
    __shared__ __align__(16) uint16_t sa[16 * 16], sb[16 * 8];
    const int lane = threadIdx.x;
    for (int i = lane; i < 16 * 8; i += 32) sb[i] = b[i];
    for (int chunk = lane; chunk < 32; chunk += 32) {  // 32 chunks of 8 values: one each
        uint32_t w[4];
        for (int j = 0; j < 4; ++j) w[j] = a[8 * chunk + 2 * j] | (uint32_t(a[8 * chunk + 2 * j + 1]) << 16);
        st_shared_16(smem_address(sa + 8 * chunk), w);
    }
    __syncthreads();
    uint32_t fa[4], fb[2];
    ldmatrix_x4(fa, smem_address(sa + (lane % 16) * 16 + (lane / 16) * 8));  // rows 0-15, k 0-7 then 8-15
    if (b_k_major) ldmatrix_x2(fb, smem_address(sb + (lane % 16) * 8), true);      // k rows 0-15
    else ldmatrix_x2(fb, smem_address(sb + (lane % 8) * 16 + ((lane / 8) % 2) * 8), false);  // n rows, k halves
    const float c[4] = {1.f, 1.f, 1.f, 1.f};
    float d[4];
    mma<BF16>(d, fa, fb, c);
    const int g = lane / 4, t = lane % 4;
    for (int e = 0; e < 4; ++e) out[(g + 8 * (e / 2)) * 8 + 2 * t + e % 2] = d[e];
}

extern "C" void run_mma(const uint16_t* a, const uint16_t* b, float* d, int bf16, int b_k_major, int threads) {
    if (bf16) mma16816<true><<<1, threads>>>(a, b, d, b_k_major);
    else mma16816<false><<<1, threads>>>(a, b, d, b_k_major);
}
"""


@pytest.mark.parametrize("bf16", [0, 1])
@pytest.mark.parametrize("b_k_major", [1, 0])
def test_ptx_ldmatrix_and_mma_sync_as_a_gpu_lays_their_fragments_out(tmp_path, bf16, b_k_major):
    a = [[float((3 * i + 5 * j) % 7 - 3) for j in range(16)] for i in range(16)]
    b = [[float((i + 2 * j) % 5 - 2) for j in range(8)] for i in range(16)]  # b[k][n]
    bits = bfloat16_bits if bf16 else half_bits
    b_memory = (
        [b[k][n] for k in range(16) for n in range(8)] if b_k_major else [b[k][n] for n in range(8) for k in range(16)]
    )
    script = f"""
a = device(ctypes.c_uint16, 256, {bits([v for row in a for v in row])})
b = device(ctypes.c_uint16, 128, {bits(b_memory)})
d = device(ctypes.c_float, 128)
lib.run_mma(a, b, d, {bf16}, {b_k_major}, 32)
emit(d=list(d))
"""
    want = matmul(a, b, 16, 8, 16)
    assert ok(run_cuda(tmp_path, PTX_MMA, script))["d"] == [v + 1 for row in want for v in row]


def test_fault_ldmatrix_in_a_block_of_16_threads(tmp_path):
    script = "a, b, d = device(ctypes.c_uint16, 256), device(ctypes.c_uint16, 128), device(ctypes.c_float, 128)\n"
    run = run_cuda(tmp_path, PTX_MMA, script + "lib.run_mma(a, b, d, 0, 1, 16)\nemit(finished=True)")
    code, message = run.explained()
    assert code == "emulated_fault" and "whole warp of 32 threads" in message


# ---- what a fault report names: the kernel's access and thread, never the emulator's --------------------------------
# The preemption hook (chance(), in the header) notes the bytes a kernel's load or store is about to touch before it
# lets another thread run, and puts back what others wrote meanwhile. Those are the emulator's own accesses: they must
# neither fault where the kernel's access would not (a write to read-only memory the kernel only reads) nor have
# AddressSanitizer's report name their kind (a READ) for the kernel's (a write).
READ_ONLY_TABLE = r"""
__device__ const float kTable[8] = {1, 2, 3, 4, 5, 6, 7, 8};  // const: in read-only memory (.rodata) on the CPU

__global__ void lookup(const int* start, float* out) {
    float sum = 0.f;
    for (int r = 0; r < 200; ++r) sum += kTable[(start[threadIdx.x] + r) & 7];  // 200 loads: the hook stops at some
    out[threadIdx.x] = sum;
}

extern "C" void run(const int* start, float* out) { lookup<<<1, 32>>>(start, out); }
"""


@needs_asan
def test_a_table_in_read_only_memory_is_read_without_a_fault(tmp_path):
    run = run_cuda(
        tmp_path,
        READ_ONLY_TABLE,
        "start = device(ctypes.c_int, 32, range(32))\nout = device(ctypes.c_float, 32)\n"
        "lib.run(start, out)\nemit(out=list(out))",
    )
    expected = [sum(float((s + r) % 8 + 1) for r in range(200)) for s in range(32)]
    assert ok(run)["out"] == expected


STORE_PAST_THE_END = r"""
__global__ void one_past(float* out, int n) {
    out[threadIdx.x] = 1.f;
    if (threadIdx.x == 5) out[n] = 2.f;  // ONE PAST
}

extern "C" void run(float* out, int n) { one_past<<<1, 64>>>(out, n); }
"""
# A page of device memory with no access after it: the store one past its end faults wherever it lands
UNMAPPED_AFTER = """\
import mmap
libc = ctypes.CDLL(None)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
memory = mmap.mmap(-1, 2 * mmap.PAGESIZE)
start = ctypes.addressof((ctypes.c_char * (2 * mmap.PAGESIZE)).from_buffer(memory))
assert libc.mprotect(start + mmap.PAGESIZE, mmap.PAGESIZE, 0) == 0
lib.kcourse_cuda_cpu_register(start, mmap.PAGESIZE)
"""


@needs_asan
def test_fault_store_into_unmapped_memory_is_a_write_of_the_thread_that_made_it(tmp_path):
    library = build_library(tmp_path, STORE_PAST_THE_END)
    entry = UNMAPPED_AFTER + "lib.run(ctypes.c_void_p(start), mmap.PAGESIZE // 4)\nemit(finished=True)"
    # seed 1: the hook stops the thread at that store (its read of the bytes faults); seed 2: the store itself faults
    runs = {seed: run_library(library, entry, seed=seed) for seed in (1, 2)}
    assert [" in chance " in runs[seed].output for seed in (1, 2)] == [True, False], "the seeds no longer cover both"
    line = line_of(STORE_PAST_THE_END, "// ONE PAST")
    for seed, run in runs.items():
        code, message = run.explained()
        assert code == "memory_error", (seed, message)
        assert re.search(r"\((a write|write of 4 bytes)\) at kernel\.cu:%d in one_past;" % line, message), message
        assert "block (0, 0, 0), thread (5, 0, 0)" in message, message


FAULT_ON_ANOTHER_OS_THREAD = r"""
#include <cstdlib>

__global__ void spin(volatile int* flag) {
    while (!*flag) __nanosleep(1000);
}

extern "C" void spin_forever() {
    int* flag;
    cudaMalloc(&flag, sizeof(int));
    cudaMemset(flag, 0, sizeof(int));
    spin<<<1, 32>>>(flag);
}

extern "C" int read_past_a_host_array() {
    volatile int* p = static_cast<volatile int*>(malloc(4 * sizeof(int)));
    return p[4];
}
"""


@needs_asan
def test_fault_on_another_os_thread_names_no_kernel_thread(tmp_path):
    entry = (
        "import threading, time\n"
        "def fault():\n    time.sleep(0.3)\n    lib.read_past_a_host_array()\n"
        "threading.Thread(target=fault).start()\nlib.spin_forever()\n"
    )
    run = run_cuda(tmp_path, FAULT_ON_ANOTHER_OS_THREAD, entry, timeout=30)
    assert "heap-buffer-overflow" in run.output, run.output[-3000:]
    code, message = run.explained()
    assert code == "memory_error" and "in kernel spin(int volatile*), block (0, 0, 0), thread unknown" in message
    assert "thread (" not in message, message
