"""The kinds of exercise version (spec.toml's `variants.<lang>.kind`), each in one place: what the learner
writes, how the kit builds and loads it, what runs without a GPU, which compute-sanitizer tools check it, and
how it is timed. Modules ask a version's Kind (`Variant.kind_of`) rather than compare kind names, so a new
kind of exercise is one more entry here and the code its new behaviour needs."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    name: str
    lang: str  # the language the learner writes: "triton" or "cuda"
    entry: str  # what the learner's entry point is
    suffixes: tuple[str, ...]  # the learner's file
    nvcc: bool  # built by the kit with nvcc into a shared library and called through ctypes
    gpu_to_run: bool  # without a GPU only compiled (or run on the CPU emulator where it takes it)
    sanitizer_tools: tuple[str, ...]  # compute-sanitizer's tools that check it on a GPU
    prewarm: str | None = None  # what the early child imports ahead of the job (child/worker.py)
    host_side: bool = False  # host pointers: it allocates, copies and launches itself; its timing includes transfers
    watch_ops: bool = False  # torch operators called from Python are recorded (integrity.ops_called)
    returns_outputs: bool = False  # the entry point returns its outputs rather than filling given ones


TRITON = Kind(
    "triton",
    "triton",
    "a Python function taking torch tensors (Triton kernels inside)",
    (".py", ".ipynb"),
    nvcc=False,
    gpu_to_run=False,
    sanitizer_tools=("memcheck",),
    prewarm="triton",
    watch_ops=True,
)
CUDA = Kind(
    "cuda",
    "cuda",
    'an extern "C" host function taking device pointers, called through ctypes',
    (".cu",),
    nvcc=True,
    gpu_to_run=True,
    sanitizer_tools=("racecheck", "synccheck", "memcheck", "initcheck"),
)
CUDA_HOST = Kind(
    "cuda_host",
    "cuda",
    'an extern "C" function taking host pointers; it allocates, copies and launches itself',
    (".cu",),
    nvcc=True,
    gpu_to_run=True,
    sanitizer_tools=("racecheck", "synccheck", "memcheck", "initcheck"),
    host_side=True,
)
TORCH_OP = Kind(
    "torch_op",
    "cuda",
    "a PyTorch operator registered with TORCH_LIBRARY, built with torch's extension builder",
    (".cu",),
    nvcc=False,
    gpu_to_run=True,
    sanitizer_tools=("racecheck", "synccheck", "memcheck"),
    prewarm="profiler",
    watch_ops=True,
    returns_outputs=True,
)

KINDS: dict[str, Kind] = {k.name: k for k in (TRITON, CUDA, CUDA_HOST, TORCH_OP)}
NVCC_KINDS = tuple(k.name for k in KINDS.values() if k.nvcc)
GPU_TO_RUN = tuple(k.name for k in KINDS.values() if k.gpu_to_run)


def kind_named(name: str) -> Kind:
    """The Kind of that name (spec loading has refused any other)."""
    return KINDS[name]
