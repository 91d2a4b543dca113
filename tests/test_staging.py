"""The grading child's hand-over of large inputs: a mapped file through page-locked buffers onto the GPU
gives the very tensor the judge wrote, whatever its size against the buffers' chunks."""

from __future__ import annotations

import pytest
import torch

from grader.checks.inputs import save_tensor
from grader.child import staging


def test_without_a_gpu_an_input_is_read_into_host_memory_as_written(tmp_path):
    values = torch.arange(10, dtype=torch.int32)
    loaded = staging.load(save_tensor(values, tmp_path / "x.bin"), "cpu")
    assert loaded.device.type == "cpu" and torch.equal(loaded, values)


@pytest.mark.gpu
@pytest.mark.parametrize("numel", [staging.STAGED_FROM // 4, 3 * staging.CHUNK_BYTES // 4 + 5, 2**28])
def test_a_large_input_reaches_the_gpu_whole_through_the_buffers(tmp_path, numel):
    staging.warm_up()
    values = torch.randn(numel)
    loaded = staging.load(save_tensor(values, tmp_path / "x.bin"), "cuda")
    assert loaded.is_cuda and loaded.shape == values.shape and torch.equal(loaded.cpu(), values)
    bools = torch.rand(staging.STAGED_FROM + 3) > 0.5  # another dtype, an odd byte count
    assert torch.equal(staging.load(save_tensor(bools, tmp_path / "b.bin"), "cuda").cpu(), bools)
