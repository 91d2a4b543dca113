"""Reference: gray = (299 R + 587 G + 114 B + 500) / 1000 in integer arithmetic.

That is 0.299 R + 0.587 G + 0.114 B (ITU-R BT.601 luma) rounded to the nearest integer, halves up, computed
exactly: the weighted sum times 1000 is an integer, so no float rounding decides a tie. The result is at
most 255 (the weights sum to 1)."""

import torch


def reference(rgb: torch.Tensor) -> torch.Tensor:
    c = rgb.to(torch.int32)
    weighted = 299 * c[..., 0] + 587 * c[..., 1] + 114 * c[..., 2] + 500
    return torch.div(weighted, 1000, rounding_mode="floor").to(torch.uint8)
