"""Reference: out[row][col] = f(x[row][col], row, col), with the README's f:

f(v, row, col) = p(v) * s(row) + t(col)
p(v)   = 0.5 v^3 - v^2 + 2 v - 3        (a cubic, evaluated as ((0.5 v - 1) v + 2) v - 3)
s(row) = 1 + 0.25 * (row % 5)           (the row's scale: 1, 1.25, 1.5, 1.75, 2, 1, ...)
t(col) = (col % 3) - 1                  (the column's shift: -1, 0, 1, -1, ...)
"""

import torch


def reference(x: torch.Tensor) -> torch.Tensor:
    rows, cols = x.shape
    row = torch.arange(rows, device=x.device)[:, None]
    col = torch.arange(cols, device=x.device)[None, :]
    p = ((0.5 * x - 1.0) * x + 2.0) * x - 3.0
    scale = (1.0 + 0.25 * (row % 5)).to(x.dtype)
    shift = ((col % 3) - 1).to(x.dtype)
    return p * scale + shift
