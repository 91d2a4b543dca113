"""Triton's autotuner under compute-sanitizer (grader/child/sanitize_run.py `autotune_once`): every config
still runs on the sanitized case, each once, and nothing reaches the on-disk autotune cache the grade uses."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl
from triton.runtime.autotuner import Autotuner

from grader.child import sanitize_run

RUNS: dict[int, int] = {}


def _counting(block: int) -> triton.Config:
    def count(nargs):
        RUNS[block] = RUNS.get(block, 0) + 1

    return triton.Config({"BLOCK": block}, pre_hook=count)


@triton.autotune(configs=[_counting(16), _counting(32), _counting(64)], key=["n"])
@triton.jit
def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n)


@pytest.fixture
def patched(monkeypatch):
    """autotune_once's patches, undone after the test (monkeypatch restores what it records)."""
    for name in ("do_bench", "check_disk_cache"):
        monkeypatch.setattr(Autotuner, name, Autotuner.__dict__[name])
    sanitize_run.autotune_once()
    RUNS.clear()


@pytest.mark.skipif(torch.cuda.is_available(), reason="runs the kernel under Triton's interpreter")
def test_each_config_runs_once_and_the_first_is_kept(patched):
    x = torch.arange(100, dtype=torch.float32)
    y = torch.zeros_like(x)
    _copy[lambda meta: (triton.cdiv(100, meta["BLOCK"]),)](x, y, 100)
    assert torch.equal(x, y)
    assert RUNS == {16: 2, 32: 1, 64: 1}  # each config's one run, then the kept (first) config's own run
    assert _copy.best_config.kwargs == {"BLOCK": 16}


def test_an_older_tritons_assignment_of_do_bench_is_ignored(patched):
    tuner = Autotuner.__new__(Autotuner)
    tuner.do_bench = lambda kernel_call, quantiles: [9.0, 9.0, 9.0]  # what Triton 3.0-3.1's __init__ does
    calls = []
    assert tuner.do_bench(lambda: calls.append(1), quantiles=(0.5, 0.2, 0.8)) == [1.0, 1.0, 1.0]
    assert calls == [1]


def test_the_disk_cache_is_neither_read_nor_written(patched):
    ran = []
    assert Autotuner.check_disk_cache(None, ("key",), [], lambda: ran.append(1)) is False
    assert ran == [1]
