"""The grading child's call of the learner's function (grader/child/worker.py), with the child's state faked: a
host-side function that returns while its output is still being written fails, one that waits passes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from grader.child import worker
from grader.core.vocabulary import Code


def fake_child(host_side: bool = True, device: str = "cuda"):
    """The few attributes Worker.call reads, and the checks it adds, kept."""
    child = worker.Worker.__new__(worker.Worker)
    child.variant = SimpleNamespace(kind_of=SimpleNamespace(host_side=host_side))
    child.device = device
    child.added = []
    child.add = lambda name, status, message, **details: child.added.append((name, status, message, details))
    return child


def call(child, learner, y: torch.Tensor, late_write):
    """child.call with `late_write` standing in for the GPU finishing queued work (it runs where the real child
    waits for the GPU)."""
    child.sync = late_write
    case = SimpleNamespace(params={})
    return child.call(lambda tensors, params: learner(tensors["y"]), {"y": y}, case, "n=3", {"y": y})


def test_an_output_still_being_written_after_the_return_fails_naming_it():
    child, y = fake_child(), torch.full((3,), float("nan"))
    with pytest.raises(worker.Stop):
        call(child, lambda out: out[:1].fill_(1.0), y, late_write=lambda: y[1:].fill_(1.0))
    (name, status, message, details) = child.added[0]
    assert (name, status, details["code"]) == ("numerics", "failed", Code.RETURNED_EARLY)
    assert "`y` changed after your function returned" in message and "cudaStreamSynchronize" in message


def test_an_output_complete_at_the_return_passes_even_where_it_is_nan():
    child, y = fake_child(), torch.full((3,), float("nan"))
    call(child, lambda out: out[:1].fill_(1.0), y, late_write=lambda: None)  # NaN left in place is numerics' call
    assert child.added == []


@pytest.mark.parametrize("host_side, device", [(False, "cuda"), (True, "cpu")])
def test_only_host_side_code_on_a_gpu_is_compared(host_side, device):
    """A kernel-only function's outputs live on the GPU, in the caller's stream; the CPU emulator's calls are done
    when they return."""
    child, y = fake_child(host_side, device), torch.zeros(3)
    call(child, lambda out: None, y, late_write=lambda: y.fill_(1.0))
    assert child.added == []


def test_a_full_gpu_in_the_childs_own_work_is_reported_as_such_and_any_other_error_as_a_grader_bug():
    """worker.main's last resort: torch's OutOfMemoryError outside the learner's calls (inputs loaded onto a GPU that
    other processes filled) says the GPU is full and what to do; anything else is an internal error with its trace."""
    import torch

    from grader.child import worker

    full = worker._grader_failure(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 66.00 MiB"))
    assert (full.name, full.status, full.details) == ("grader", "error", {"code": "gpu_full"})
    assert full.message.startswith("not judged: the GPU ran out of memory") and "nvidia-smi" in full.message
    try:
        raise KeyError("case")
    except KeyError as exc:
        bug = worker._grader_failure(exc)
    assert bug.message == "internal grader error: KeyError: 'case'" and "Traceback" in bug.details["traceback"]
