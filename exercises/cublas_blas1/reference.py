"""Reference: the four level-1 BLAS results cuBLAS computes, in PyTorch.

dot = x . y; axpy = alpha x + y (cuBLAS's axpy overwrites y: here y is an input, so the result goes to its
own output); amax / amin = the 0-based index of the element of largest / smallest magnitude |x[i]|.
The indices are judged by largest_magnitude / smallest_magnitude below (spec.toml `check`), exactly,
accepting any index whose magnitude ties with the answer's, and naming the 1-based mistake."""

import torch


def reference(x: torch.Tensor, y: torch.Tensor, *, alpha: float):
    dot = (x * y).sum().reshape(1)
    axpy = alpha * x + y
    amax = x.abs().argmax().reshape(1).to(torch.int32)
    amin = x.abs().argmin().reshape(1).to(torch.int32)
    return dot, axpy, amax, amin


def largest_magnitude_negative(x: torch.Tensor) -> torch.Tensor:
    """The drawn values with the largest |x| made negative: max(x) (signed) then picks another element."""
    x = x.clone()
    i = int(x.abs().argmax())
    x[i] = -x[i].abs()
    return x


def largest_magnitude(got: torch.Tensor, *, inputs: dict, expected: torch.Tensor) -> str | None:
    return _judge_index(got, inputs["x"], expected, "largest", "cublasIsamax")


def smallest_magnitude(got: torch.Tensor, *, inputs: dict, expected: torch.Tensor) -> str | None:
    return _judge_index(got, inputs["x"], expected, "smallest", "cublasIsamin")


def _judge_index(got: torch.Tensor, x: torch.Tensor, expected: torch.Tensor, which: str, routine: str) -> str | None:
    """None when got is an index of the extreme magnitude, else what is wrong and what to do."""
    x = x.detach().cpu().flatten().double()
    i, want = int(got.flatten()[0]), int(expected.flatten()[0])
    if 0 <= i < x.numel() and x[i].abs() == x[want].abs():
        return None
    if i == want + 1:
        return (
            f"got index {i}, expected {want}: {routine} returns a 1-based index (BLAS comes from Fortran): "
            "subtract 1 before you hand it back (a kernel of 1 thread that does `*amax -= 1` on the device, "
            "or compute it on the host)"
        )
    if not 0 <= i < x.numel():
        return f"got index {i}, outside [0, {x.numel()}): write the index of the element, 0-based"
    signed = "; it is the largest signed value: compare |x[i]|" if which == "largest" and i == int(x.argmax()) else ""
    signed = signed or (
        "; it is the smallest signed value: compare |x[i]|" if which == "smallest" and i == int(x.argmin()) else ""
    )
    return (
        f"got index {i} (|x| = {float(x[i].abs()):.6g}), expected {want} (|x| = {float(x[want].abs()):.6g}), "
        f"the {which} magnitude{signed}"
    )
