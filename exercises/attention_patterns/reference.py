"""References: attention under two masks beyond full and causal, one function per version of the exercise
(spec.toml: each [variants.*] names its `reference`), and the transform that draws the document ids.

Both masks are causal intervals: query i sees the keys lo(i) <= j <= i, with

    sliding_window:  lo(i) = i - W + 1                  (the last W keys, itself included)
    document_mask:   lo(i) = first token of i's document (its own document only)

The grader calls a version's function with every input, q, k, v and doc_ids (the window ignores doc_ids).
On the grader's float64 copies (the verdict) it is exact; in the case's dtype on the GPU, where it is timed
as the "torch" figure, it is what plain PyTorch offers: scaled_dot_product_attention with the N x N boolean
mask materialised, which computes every score and throws most away. (FlexAttention, torch.nn.attention
.flex_attention with a block mask, skips the masked blocks as your kernel does; it needs torch.compile.)"""

import torch
import torch.nn.functional as F

ROWS_PER_CHUNK = 256  # float64 queries attended at once: only their visible keys, so N = 8192 takes seconds


def sliding_window(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, doc_ids: torch.Tensor, *, W: int) -> torch.Tensor:
    """Causal attention over the last W keys: query i sees keys j with i - W < j <= i."""

    def visible(rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        return (cols[None, :] <= rows[:, None]) & (cols[None, :] > rows[:, None] - W)

    return masked_attention(q, k, v, visible)


def document_mask(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, doc_ids: torch.Tensor) -> torch.Tensor:
    """Packed sequences: query i sees keys j <= i of its own document (doc_ids[j] == doc_ids[i])."""
    ids = doc_ids.to(q.device)

    def visible(rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        return (cols[None, :] <= rows[:, None]) & (ids[cols][None, :] == ids[rows][:, None])

    return masked_attention(q, k, v, visible)


def masked_attention(q, k, v, visible) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) where visible, else -inf) v; visible(rows, cols) -> bool [rows, cols]."""
    n_ctx = q.shape[-2]
    index = torch.arange(n_ctx, device=q.device)
    if q.dtype != torch.float64:  # the "torch" figure: one call, the whole mask materialised
        return F.scaled_dot_product_attention(q, k, v, attn_mask=visible(index, index))
    # the float64 truth: the same call a block of queries at a time, over the keys from the first one any of
    # them sees (every row sees itself, so no row is empty)
    out = torch.empty_like(q)
    for start in range(0, n_ctx, ROWS_PER_CHUNK):
        rows = index[start : start + ROWS_PER_CHUNK]
        first = int(visible(rows, index[: int(rows[-1]) + 1]).any(0).nonzero()[0])
        cols = index[first : int(rows[-1]) + 1]
        out[..., rows, :] = F.scaled_dot_product_attention(
            q[..., rows, :], k[..., cols, :], v[..., cols, :], attn_mask=visible(rows, cols)
        )
    return out


def document_ids(x: torch.Tensor, *, N: int, doc_a: int, doc_b: int) -> torch.Tensor:
    """Packed documents of lengths doc_a, doc_b, doc_a, ... (the last one cut at N), each with an id that
    grows by 1 to 3 from the one before: non-decreasing, but not 0, 1, 2, ... (compare ids, never use them
    as indices). x: the drawn U[0, 1) values (a second trial's up to 1.5), which pick the gaps."""
    lengths, total = [], 0
    while total < N:
        lengths.append(doc_a if len(lengths) % 2 == 0 else doc_b)
        total += lengths[-1]
    lengths[-1] -= total - N
    starts = torch.tensor([0] + lengths[:-1], device=x.device).cumsum(0)
    gaps = 1 + torch.floor(x[starts] * 3).remainder(3)
    ids = gaps.cumsum(0) + 4
    return ids.repeat_interleave(torch.tensor(lengths, device=x.device))
