"""Reference: GELU with the tanh approximation, y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""

import math

import torch

PIECE = 2**20  # elements of the float64 truth computed at a time on the CPU


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def reference(x: torch.Tensor) -> torch.Tensor:
    if x.device.type != "cpu":  # on the GPU it is the "torch" figure a grade times: PyTorch's own kernels
        return gelu_tanh(x)
    # The grader's float64 truth, up to 2^28 elements: a piece at a time, so the temporaries stay in the CPU's
    # cache (the same values as the whole tensor at once)
    flat = x.reshape(-1)
    out = torch.empty_like(flat)
    for start in range(0, flat.numel(), PIECE):
        out[start : start + PIECE] = gelu_tanh(flat[start : start + PIECE])
    return out.reshape(x.shape)
