"""Reference: out[i] = sum_k x[i + k - r] * w[k], x zero outside [0, n), out as long as x.

This is what deep-learning frameworks call a convolution (a cross-correlation: w is not flipped), and
exactly torch.nn.functional.conv1d on x viewed as one batch of one channel, padded by r on each side."""

import torch


def reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    r = (w.numel() - 1) // 2
    return torch.nn.functional.conv1d(x.view(1, 1, -1), w.view(1, 1, -1), padding=r).view(-1)
