"""Day 45 — attention patterns: Flash Attention forward under a sliding window or a document mask.

Two entry points, two versions of the exercise: sliding_window(q, k, v, out, W) and document_mask(q, k, v,
doc_ids, out), q, k, v, out of shape (B, H, N, d), float16 or bfloat16. Both masks are causal intervals:
query i sees keys lo(i) <= j <= i, with lo(i) = i - W + 1 for the window and the first token of i's
document for the documents. Read README.md first. Grade with:
    kcourse grade attention_patterns --lang sliding_window      (or --lang document_mask)
"""

import math

import torch
import triton
import triton.language as tl


@triton.jit
def document_starts_kernel(DocIds, Starts, n_ctx, SEARCH_STEPS: tl.constexpr, BLOCK: tl.constexpr):
    # TODO: Starts[i] = the first index holding DocIds[i], for the BLOCK tokens of this program. The ids never
    #       decrease, so each lane can binary-search [0, i]: lo = 0, hi = i (token i is in its own document);
    #       SEARCH_STEPS times: mid = (lo + hi) // 2; where DocIds[mid] < DocIds[i] (an earlier document)
    #       lo = mid + 1, else hi = mid. SEARCH_STEPS = N.bit_length() steps are enough.
    pass


@triton.jit
def pattern_fwd_kernel(
    Q,
    K,
    V,
    Out,
    Starts,
    sm_scale,
    W,
    stride_qb,
    stride_qh,
    stride_qn,
    stride_qd,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_kd,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_vd,
    stride_ob,
    stride_oh,
    stride_on,
    stride_od,
    H,
    n_ctx,
    HEAD_DIM: tl.constexpr,
    DOCS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # TODO: start_m = tl.program_id(0) (a block of BLOCK_M queries), off_bh = tl.program_id(1) (batch * H + head)
    #       offs_m, offs_n, offs_d as in flash_attention_v1; load the q block once (mask rows >= n_ctx), by strides
    #       lo, one per query row: DOCS: tl.load(Starts + offs_m) (masked); else offs_m - W + 1
    #       m_i = -inf, l_i = 0 (float32, one per row); acc = zeros([BLOCK_M, HEAD_DIM], float32)
    #       for start_n in range(0, end, BLOCK_N):   (step 1: every block up to the diagonal, end = min(m1, n_ctx))
    #           k, v blocks (mask keys >= n_ctx); s = tl.dot(q, tl.trans(k)) * sm_scale
    #           keep = (col >= lo[:, None]) & (col <= row) & (col < n_ctx); s = where(keep, s, -inf)
    #           m_new = max(m_i, rowmax(s)) -- still -inf for a row that has seen no key yet: subtract 0 then
    #           p = exp(s - m_new); alpha = exp(m_i - m_new); l_i = l_i * alpha + rowsum(p)
    #           acc = acc * alpha + tl.dot(p.to(v.dtype), v); m_i = m_new
    #       step 2: start the loop at the block holding lo of the block's first row (README)
    #       out = acc / l_i, stored in Out's dtype (mask rows >= n_ctx)
    pass


def sliding_window(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, W: int) -> None:
    """out[:] = causal attention where query i sees keys i - W < j <= i; all (B, H, N, d)."""
    batch, heads, n_ctx, head_dim = q.shape
    sm_scale = 1.0 / math.sqrt(head_dim)
    # TODO: launch pattern_fwd_kernel on the grid (triton.cdiv(n_ctx, BLOCK_M), batch * heads) with Starts = q
    #       (unused), W, *q.stride(), *k.stride(), *v.stride(), *out.stride(), HEAD_DIM=head_dim, DOCS=False and,
    #       to start, BLOCK_M = BLOCK_N = 64; then delete the line below.
    raise NotImplementedError("write pattern_fwd_kernel and launch it in sliding_window()")


def document_mask(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, doc_ids: torch.Tensor, out: torch.Tensor) -> None:
    """out[:] = causal attention within each document: query i sees keys j <= i with doc_ids[j] == doc_ids[i]."""
    batch, heads, n_ctx, head_dim = q.shape
    sm_scale = 1.0 / math.sqrt(head_dim)
    # TODO: starts = torch.empty(n_ctx, dtype=torch.int32, device=q.device): lo(i), the first token of i's
    #       document, written by document_starts_kernel on the grid (triton.cdiv(n_ctx, BLOCK),) (torch's own
    #       searchsorted would compute it, and the grader allows torch only to allocate, view and copy); then
    #       launch pattern_fwd_kernel as above with Starts = starts, W = 0, DOCS=True; then delete the line below.
    raise NotImplementedError("write pattern_fwd_kernel and launch it in document_mask()")
