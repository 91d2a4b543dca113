"""Large trial inputs from the judge's files onto the GPU, fast: the grading child's side of the hand-over.

The judge writes each input as raw bytes under /dev/shm. Read into the child's memory and then copied, a GB
costs a noticeable share of a `kcourse watch` answer, twice in a grade of a 2^28-element exercise (its largest
trial and its timed size). Here the file is mapped rather than read, and torch's threads copy it into one of two
page-locked buffers while the other is on its way to the GPU (figures: docs/measurements.md). The buffers are
allocated while the child warms up, before any job, because page-locking memory is slow."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from grader.checks.inputs import load_tensor

CHUNK_BYTES = 64 * 2**20
STAGED_FROM = 32 * 2**20  # smaller files: reading and copying them directly is as fast

_stager: Stager | None = None


class Stager:
    def __init__(self) -> None:
        self.buffers = [torch.empty(CHUNK_BYTES, dtype=torch.uint8, pin_memory=True) for _ in range(2)]
        self.sent = [torch.cuda.Event(), torch.cuda.Event()]
        self.stream = torch.cuda.Stream()  # its own: learner code may have made another stream current

    def load(self, meta: dict[str, Any]) -> torch.Tensor:
        """The tensor of a file written by save_tensor, on the GPU, copied in by the time this returns."""
        mapped = load_tensor(meta, mapped=True)
        out = torch.empty(mapped.shape, dtype=mapped.dtype, device="cuda")
        src, dst = mapped.reshape(-1).view(torch.uint8), out.reshape(-1).view(torch.uint8)
        with torch.cuda.stream(self.stream):
            for i, start in enumerate(range(0, src.numel(), CHUNK_BYTES)):
                chunk = src[start : start + CHUNK_BYTES]
                buffer, sent = self.buffers[i % 2][: chunk.numel()], self.sent[i % 2]
                sent.synchronize()  # the buffer's previous chunk has reached the GPU
                buffer.copy_(chunk)
                dst[start : start + chunk.numel()].copy_(buffer, non_blocking=True)
                sent.record(self.stream)
        self.stream.synchronize()
        return out


def warm_up() -> None:
    """On a child with a GPU, before its job: the page-locked buffers."""
    global _stager
    if _stager is None:
        _stager = Stager()


def load(meta: dict[str, Any], device: str) -> torch.Tensor:
    """A trial's input, on `device` when it is the GPU (through the buffers, when the file is large and the
    child warmed them up), else in host memory as the file holds it."""
    if _stager is not None and device == "cuda" and Path(meta["path"]).stat().st_size >= STAGED_FROM:
        return _stager.load(meta)
    return load_tensor(meta)


def tracked(placed: torch.Tensor, loaded: torch.Tensor) -> torch.Tensor:
    """For the CPU emulator: an input still lying on the judge's mapped file (`loaded`, placed contiguous), copied
    into memory of its own from torch's allocator, which the preloaded AddressSanitizer runtime intercepts: ASan
    tracks those bytes and poisons those after them, so a kernel's read or write past the input stops the run as
    one past cudaMalloc memory does (a mapped file is memory ASan does not track: a read past it went unseen
    wherever the next page was mapped). A layout that copied the values already (row slice, transposed,
    interleaved) is in such memory and is returned as it is; the copy keeps the storage's size, strides and
    offset, so only bytes past the whole storage are poisoned (a row slice's padding stays readable)."""
    storage = placed.untyped_storage()
    if storage.nbytes() == 0 or storage.data_ptr() != loaded.untyped_storage().data_ptr():
        return placed
    whole = placed.new_empty(0).set_(storage).clone()  # the storage, flat, in one copy
    return whole.as_strided(placed.shape, placed.stride(), placed.storage_offset())
