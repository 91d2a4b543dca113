"""stream_overlap (week 3) and what the grader grew for it: pinned host arrays for `cuda_host` entry
points (`host_memory = "pinned"`), the learner's own code timed with `[performance] baseline_args`
(n_streams = 1) and reported as a speedup, and the profile's summary of what ran at once on the GPU.

On the CPU the solution's host code also runs for real: a stand-in CUDA runtime (MOCK_CUDA below) runs
each stream's copies and launches in a random interleaving that keeps only each stream's own order, so
a chunk copied back in another stream than its kernel, or buffers shared across streams, give wrong
answers here as they would on a GPU."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT

from grader.checks import speed
from grader.child.worker_tools import device_concurrency
from grader.core.discovery import discover_exercises
from grader.core.spec import SpecError, load_spec

SOLUTION = ROOT / "solutions" / "stream_overlap" / "stream_overlap.cu"
STUB = ROOT / "exercises" / "stream_overlap" / "stream_overlap.cu"


def spec():
    return discover_exercises()["stream_overlap"]


# --- the spec -----------------------------------------------------------------------------------
def test_spec_asks_for_pinned_arrays_and_a_one_stream_baseline():
    s = spec()
    variant = s.variant("cuda")
    assert variant.kind == "cuda_host" and variant.host_memory == "pinned"
    assert [a.name for a in variant.args] == ["x", "y", "n", "n_streams"]
    assert s.performance.baseline_args == {"n_streams": 1}
    assert all(c.params["n_streams"] > 1 for c in s.performance.cases)  # otherwise the baseline is the same run


def test_cases_cover_ragged_sizes_tiny_sizes_and_every_stream_count():
    cases = [c.params for c in spec().cases]
    assert {c["n_streams"] for c in cases} >= {1, 3, 4, 8}
    assert any(c["n"] < c["n_streams"] for c in cases)
    assert any(c["n"] % 256 and c["n"] % c["n_streams"] for c in cases if c["n"] > 10_000)


def write_spec(folder: Path, variant: str, perf: str = "") -> Path:
    folder.mkdir()
    (folder / "spec.toml").write_text(
        f'id = "{folder.name}"\n{variant}\nstub = "a.cu"\nentry = "f"\nargs = ["x", "y", "n", "k"]\n'
        '[inputs.x]\nshape = ["n"]\n[outputs.y]\nshape = ["n"]\n[[cases]]\nn = 3\nk = 2\n'
        f'[tolerance.float32]\natol = 0\nrtol = 0\n[performance]\nbytes = "n"\n{perf}'
        "[[performance.cases]]\nn = 8\nk = 2\n"
    )
    return folder


def test_pinned_memory_is_for_host_pointer_entry_points_only(tmp_path):
    with pytest.raises(SpecError, match='host_memory applies to kind "cuda_host" only'):
        load_spec(write_spec(tmp_path / "a", '[variants.cuda]\nkind = "cuda"\nhost_memory = "pinned"'))
    with pytest.raises(SpecError, match="host_memory = 'locked'; known: pageable, pinned"):
        load_spec(write_spec(tmp_path / "b", '[variants.cuda]\nkind = "cuda_host"\nhost_memory = "locked"'))
    ok = load_spec(write_spec(tmp_path / "c", '[variants.cuda]\nkind = "cuda_host"\nhost_memory = "pinned"'))
    assert ok.variant("cuda").host_memory == "pinned"
    assert (
        load_spec(write_spec(tmp_path / "d", '[variants.cuda]\nkind = "cuda_host"')).variant("cuda").host_memory
        == "pageable"
    )


def test_baseline_args_must_be_parameters_of_every_timed_case(tmp_path):
    with pytest.raises(SpecError, match="baseline_args names streams, which is not a parameter"):
        load_spec(
            write_spec(tmp_path / "a", '[variants.cuda]\nkind = "cuda_host"', "baseline_args = { streams = 1 }\n")
        )
    ok = load_spec(write_spec(tmp_path / "b", '[variants.cuda]\nkind = "cuda_host"', "baseline_args = { k = 1 }\n"))
    assert ok.performance.baseline_args == {"k": 1}


# --- the child: the baseline run and pinned tensors ----------------------------------------------------
def make_worker(tmp_path):
    from grader.child.worker import Worker

    job = {
        "spec_folder": str(spec().folder),
        "lang": "cuda",
        "device": "cpu",
        "learner": str(STUB),
        "work_dir": str(tmp_path),
    }
    return Worker(job, events=None, device_info={})


def test_the_baseline_is_the_learners_own_function_with_baseline_args_and_its_own_outputs(tmp_path):
    import torch

    worker = make_worker(tmp_path)
    # the spec pins the host arrays; a CPU worker (the CUDA emulator's) cannot page-lock: test_gpu_pinned_tensors covers it
    assert worker.variant.host_memory == "pinned" and not worker.pinned
    case = spec().performance.cases[0]
    seen = []
    x = torch.ones(4)
    runs = worker._baseline(lambda tensors, params: seen.append((tensors, params)), {"x": x}, case)
    runs["learner_baseline"]()
    tensors, params = seen[0]
    assert params == {**case.params, "n_streams": 1} and case.params["n_streams"] == 4
    assert tensors["x"] is x and tensors["y"].numel() == case.params["n"]


# --- the parent: the speedup in the record and the verdict -----------------------------------------------
def test_the_speedup_over_one_stream_is_reported_and_the_verdict_stays_relative_to_the_solution():
    s = spec()
    case = s.performance.cases[-1]
    measured = {
        "learner": {"median_ms": 6.0, "runs": 40, "spread": 0.01},
        "solution": {"median_ms": 5.7, "runs": 40},
        "learner_baseline": {"median_ms": 14.4, "runs": 40},
    }
    record = speed.timing_record(s, s.variant("cuda"), case, measured, {"name": "H100"})
    assert record.baseline_ms == 14.4 and record.baseline_args == "n_streams=1"
    check = speed.verdict(s, s.variant("cuda"), record, None, {"name": "H100"})
    assert check.status == "passed" and check.details["ratio"] == pytest.approx(0.95)
    assert "2.40× the speed of your own code with n_streams=1 (14.4 ms)" in check.message
    assert check.details["baseline_speedup"] == pytest.approx(2.4)
    serial = {**measured, "learner": {"median_ms": 14.0, "runs": 40}}
    slow = speed.verdict(s, s.variant("cuda"), speed.timing_record(s, s.variant("cuda"), case, serial, {}), None, {})
    assert slow.status == "failed" and "1.03× the speed of your own code" in slow.message


# --- the profile's concurrency summary ----------------------------------------------------------------
def gpu_event(cat, ts, dur, stream):
    return {
        "ph": "X",
        "cat": cat,
        "name": cat,
        "pid": 0,
        "tid": stream,
        "ts": ts,
        "dur": dur,
        "args": {"stream": stream},
    }


def test_profile_summary_tells_serial_from_overlapped(tmp_path):
    serial = [
        gpu_event("gpu_memcpy", 0, 10, 7),
        gpu_event("kernel", 10, 10, 7),
        gpu_event("gpu_memcpy", 20, 10, 7),
        {"ph": "X", "cat": "cpu_op", "name": "x", "ts": 0, "dur": 30},
    ]
    overlapped = [
        gpu_event("gpu_memcpy", 0, 10, 13),
        gpu_event("kernel", 10, 10, 13),
        gpu_event("gpu_memcpy", 20, 10, 13),
        gpu_event("gpu_memcpy", 10, 10, 14),
        gpu_event("kernel", 20, 10, 14),
        gpu_event("gpu_memcpy", 30, 10, 14),
    ]
    for name, events in (("serial", serial), ("overlapped", overlapped)):
        (tmp_path / f"{name}.json").write_text(json.dumps({"traceEvents": events}))
    assert device_concurrency(tmp_path / "serial.json") == {"streams": 1, "most_at_once": 1, "overlap_pct": 0.0}
    assert device_concurrency(tmp_path / "overlapped.json") == {"streams": 2, "most_at_once": 2, "overlap_pct": 50.0}
    (tmp_path / "cpu.json").write_text(json.dumps({"traceEvents": serial[-1:]}))
    assert device_concurrency(tmp_path / "cpu.json") == {} and device_concurrency(tmp_path / "missing.json") == {}


def test_profile_table_prints_the_summary():
    from grader.commands.tools import format_profile

    record = {
        "exercise": "stream_overlap",
        "lang": "cuda",
        "case": "n=8",
        "calls": 5,
        "device": "H100",
        "top": [],
        "trace": "t.json",
        "streams": 20,
        "most_at_once": 3,
        "overlap_pct": 71.4,
    }
    assert (
        "GPU work on 20 stream(s) over the 5 calls; at most 3 operations at once; two or more at once 71%"
        in format_profile(record)
    )


# --- the host code, run on the CPU against a stand-in CUDA runtime ------------------------------------------
MOCK_CUDA = r"""
#pragma once
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <random>
#include <vector>
struct dim3 { unsigned x, y, z; dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
static dim3 blockIdx, threadIdx, blockDim, gridDim;
#define __global__
#define __restrict__
typedef int cudaError_t;
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice, cudaMemcpyDefault };
enum { cudaSuccess = 0, cudaErrorInvalidConfiguration = 9, cudaStreamNonBlocking = 1 };
struct Stream { std::deque<std::function<void()>> ops; };
typedef Stream* cudaStream_t;
static std::vector<Stream*> streams_;
static Stream default_;
static int error_ = 0, live_ = 0;
static std::mt19937 rng_;  // seeded by the driver: each seed, another interleaving
static void drain() {  // every queued operation, a random stream's next one each time
    for (;;) {
        std::vector<Stream*> ready;
        if (!default_.ops.empty()) ready.push_back(&default_);
        for (auto* s : streams_) if (!s->ops.empty()) ready.push_back(s);
        if (ready.empty()) return;
        Stream* s = ready[rng_() % ready.size()];
        auto op = s->ops.front(); s->ops.pop_front(); op();
    }
}
inline const char* cudaGetErrorString(cudaError_t e) { return e ? "mock error" : "no error"; }
inline cudaError_t cudaGetLastError() { int e = error_; error_ = 0; return e; }
template <class T> cudaError_t cudaMalloc(T** p, size_t bytes) {
    float* f = (float*)malloc(bytes + 4);
    for (size_t i = 0; i < bytes / 4; ++i) f[i] = NAN;
    *p = (T*)f; ++live_; return cudaSuccess; }
inline cudaError_t cudaFree(void* p) { drain(); free(p); --live_; return cudaSuccess; }
inline cudaError_t cudaStreamCreate(cudaStream_t* s) { *s = new Stream; streams_.push_back(*s); return cudaSuccess; }
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) { return cudaStreamCreate(s); }
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { drain(); return cudaSuccess; }
inline cudaError_t cudaDeviceSynchronize() { drain(); return cudaSuccess; }
inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
    drain();
    for (size_t i = 0; i < streams_.size(); ++i) if (streams_[i] == s) streams_.erase(streams_.begin() + i);
    delete s; return cudaSuccess; }
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind, cudaStream_t st = nullptr) {
    (st ? st : &default_)->ops.push_back([=] { memcpy(d, s, n); }); return cudaSuccess; }
inline cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind) { drain(); memcpy(d, s, n); return cudaSuccess; }
template <class F, class... A> void mock_launch(dim3 g, dim3 b, size_t, cudaStream_t st, F f, A... a) {
    if (g.x == 0 || b.x == 0 || b.x > 1024) { error_ = cudaErrorInvalidConfiguration; return; }
    (st ? st : &default_)->ops.push_back([=] {
        gridDim = g; blockDim = b;
        for (unsigned bx = 0; bx < g.x; ++bx) for (unsigned tx = 0; tx < b.x; ++tx) {
            blockIdx = dim3(bx); threadIdx = dim3(tx); f(a...); } });
}
"""

DRIVER = r"""
#include <cmath>
#include <cstdio>
extern "C" void stream_overlap(const float* x, float* y, int n, int n_streams);
int main(int argc, char** argv) {
    int n = atoi(argv[1]), ns = atoi(argv[2]), bad = 0, guard = 0;
    rng_.seed(atoi(argv[3]));
    std::vector<float> x(n), y(n + 64, -7.0f);
    std::mt19937 gen(n * 31 + ns);
    std::normal_distribution<float> normal(0.0f, 1.5f);
    for (auto& v : x) v = normal(gen);
    stream_overlap(x.data(), y.data(), n, ns);
    for (int i = 0; i < n; ++i) {
        double want = 1.0 / std::sqrt(1.0 + (double)x[i] * x[i]);
        bad += !(std::fabs(y[i] - want) <= 1e-6 * want);
    }
    for (int i = n; i < n + 64; ++i) guard += y[i] != -7.0f;
    printf("%d %d %d\n", bad, guard, live_);
    return 0;
}
"""


def emulate(source: Path, folder: Path) -> Path:
    """Build `source`'s host code against MOCK_CUDA: each kernel<<<g, b, smem, s>>>(...) becomes a queued loop.
    NEWTON_STEPS=48 where the file lets it be set: the answer is the same (converged), the CPU run 10x shorter."""
    text = source.read_text().replace("#include <cuda_runtime.h>", '#include "mock_cuda.h"')

    def launch(match):
        config = [c.strip() for c in match.group(2).split(",")]
        config += ["0", "nullptr"][len(config) - 2 :]
        return f"mock_launch({', '.join(config)}, {match.group(1)}, "

    (folder / "mock_cuda.h").write_text(MOCK_CUDA)
    (folder / "unit.cpp").write_text(re.sub(r"(\w+)\s*<<<(.*?)>>>\s*\(", launch, text) + DRIVER)
    binary = folder / "run"
    subprocess.run(
        [
            "g++",
            "-O1",
            "-std=c++17",
            "-DNEWTON_STEPS=48",
            "-w",
            "-I",
            str(folder),
            "-o",
            str(binary),
            str(folder / "unit.cpp"),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return binary


def run_emulated(binary: Path, n: int, n_streams: int, seed: int = 1) -> tuple[int, int, int]:
    """(elements wrong, stores past the end, device buffers not freed) for one call."""
    out = subprocess.run(
        [str(binary), str(n), str(n_streams), str(seed)], check=True, capture_output=True, text=True
    ).stdout
    bad, guard, live = (int(v) for v in out.split())
    return bad, guard, live


needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found: the host-code emulation needs it")


@pytest.mark.slow
@pytest.mark.solutions
@needs_gxx
def test_solution_host_code_is_right_for_every_case_under_any_stream_interleaving(tmp_path):
    binary = emulate(SOLUTION, tmp_path)
    sizes = [(c.params["n"], c.params["n_streams"]) for c in spec().cases if not c.gpu_only]
    runs = [(n, k, 1) for n, k in sizes] + [
        (n, k, seed) for n, k in [(65_537, 3), (262_147, 4), (300_000, 8)] for seed in (2, 3)
    ]
    for n, n_streams, seed in runs:
        assert run_emulated(binary, n, n_streams, seed) == (0, 0, 0), (
            f"n={n} n_streams={n_streams} seed={seed}: (wrong, past the end, not freed)"
        )


@pytest.mark.slow
@pytest.mark.solutions
@needs_gxx
def test_emulation_catches_a_copy_back_in_another_stream_than_its_kernel(tmp_path):
    racy = tmp_path / "racy.cu"
    text = SOLUTION.read_text()
    copy_back = "cudaMemcpyAsync(y + start, by, bytes, cudaMemcpyDeviceToHost, streams[s]);"
    assert copy_back in text
    racy.write_text(text.replace(copy_back, copy_back.replace("streams[s]", "streams[(s + 1) % n_streams]")))
    bad, _, _ = run_emulated(emulate(racy, tmp_path), 1_000_003, 4)
    assert bad > 0


@needs_gxx
def test_emulated_stub_writes_nothing(tmp_path):
    assert run_emulated(emulate(STUB, tmp_path), 1000, 3)[0] == 1000


# --- on a GPU ---------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_gpu_pinned_tensors_keep_values_layout_and_guard():
    import torch

    from grader.checks.inputs import make_outputs, unwritten, written_outside
    from grader.child.worker import pinned

    case = spec().cases[3]
    out = make_outputs(spec(), case, "cpu")["y"]
    got = pinned(out)
    assert got.is_pinned() and got.shape == out.shape and got.stride() == out.stride()
    assert bool(unwritten(got).all()) and not written_outside(got)
    assert got.untyped_storage().nbytes() > got.numel() * got.element_size()  # the guard after it came along
    x = torch.randn(1000)[10:510]
    assert torch.equal(pinned(x), x) and pinned(x).is_pinned()


@pytest.mark.gpu
@pytest.mark.solutions
def test_gpu_solution_passes_and_beats_one_stream_by_1_8x():
    from grader.core.discovery import resolve
    from grader.run.grade import grade

    result = grade(resolve(("stream_overlap",)), source="solutions", seed=11)
    assert result.status == "passed", result.verdict
    t = result.timings[-1]
    print(
        f"\nstream_overlap {t.case}: solution {t.solution_ms:.3g} ms, learner {t.learner_ms:.3g} ms, "
        f"one stream {t.baseline_ms:.3g} ms: {t.baseline_ms / t.learner_ms:.2f}x, {t.learner_rate:.3g} GB/s"
    )
    assert t.baseline_ms / t.learner_ms >= 1.8


@pytest.mark.gpu
@pytest.mark.solutions
def test_gpu_profile_shows_pinned_copies_overlapping_kernels(tmp_path):
    from grader.commands.tools import format_profile, run_profile
    from grader.core.discovery import resolve

    record = run_profile(resolve(("stream_overlap",)), tmp_path, source="solutions")
    print("\n" + format_profile(record))
    names = " ".join(r["name"] for r in record["top"])
    assert "transform_kernel" in names and "Pinned" in names
    assert record["most_at_once"] >= 2 and record["overlap_pct"] > 30
