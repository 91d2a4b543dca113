"""Reference: every thread's global index. There are no inputs, so the grader passes the case's sizes
(and the device to build the answer on) as keyword arguments."""

import torch


def reference(*, n: int, rows: int, cols: int, device: str = "cpu"):
    ids = torch.arange(n, dtype=torch.int32, device=device)
    row_idx = torch.arange(rows, dtype=torch.int32, device=device)[:, None].expand(rows, cols).contiguous()
    col_idx = torch.arange(cols, dtype=torch.int32, device=device)[None, :].expand(rows, cols).contiguous()
    return ids, row_idx, col_idx
