"""A picture of where an output went wrong: the output as rows × columns, shrunk to a few lines of characters,
each cell showing the worst thing among the elements it covers (NaN/inf, never written, wrong, right).

A tail block that never stores shows as a stripe of `░` at the right or the bottom; a wrong stride as a
diagonal or a column pattern; an overflow as `N` over the rows with large values. Computed in the parent
from the output and the reference (checking.compare), kept in the failing check's details ("map"), and
printed under the check by the console."""

from __future__ import annotations

import math

import torch

RIGHT, WRONG, UNWRITTEN, NON_FINITE = 0, 1, 2, 3  # a cell shows the largest of its elements'
GLYPHS = "·█░N"
LEGEND = "█ wrong  ░ never written  N NaN/inf  · right"
MAX_ROWS, MAX_COLUMNS = 8, 48


def categories(got: torch.Tensor, bad: torch.Tensor, never: torch.Tensor) -> torch.Tensor:
    """Each element's category (flat tensors of one length: the output's values, wrong, never written)."""
    kind = torch.zeros(got.shape, dtype=torch.uint8)
    kind[bad] = WRONG
    kind[bad & ~torch.isfinite(got)] = NON_FINITE
    kind[never] = UNWRITTEN
    return kind


def as_rows(kind: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """Rows × columns: the last dimension across, every other one down (a vector is one row)."""
    columns = shape[-1] if shape else 1
    return kind.reshape(-1, max(columns, 1))


def shrink(
    grid: torch.Tensor, max_rows: int = MAX_ROWS, max_columns: int = MAX_COLUMNS
) -> tuple[torch.Tensor, int, int]:
    """The grid in at most max_rows × max_columns cells, each the largest category of its block; with the block's
    height and width."""
    rows, columns = grid.shape
    tall, wide = math.ceil(rows / max_rows), math.ceil(columns / max_columns)
    padded = torch.zeros((math.ceil(rows / tall) * tall, math.ceil(columns / wide) * wide), dtype=grid.dtype)
    padded[:rows, :columns] = grid
    cells = padded.reshape(padded.shape[0] // tall, tall, padded.shape[1] // wide, wide).amax(dim=(1, 3))
    return cells, tall, wide


def draw(name: str, shape: tuple[int, ...], kind: torch.Tensor) -> list[str] | None:
    """The picture's lines (None when every element is right, or there is nothing to draw)."""
    if kind.numel() == 0 or not bool((kind != RIGHT).any()):
        return None
    cells, tall, wide = shrink(as_rows(kind, shape))
    size = "×".join(str(d) for d in shape) or "1"
    block = "one element" if tall == wide == 1 else f"{tall}×{wide} elements"
    lines = [f"where {name} ({size}) is wrong, a character for {block} — {LEGEND}:"]
    lines += ["  " + "".join(GLYPHS[int(c)] for c in row) for row in cells]
    return lines
