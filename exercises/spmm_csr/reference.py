"""Reference: C = A @ B for A sparse (CSR) and B dense, and the transforms that draw a CSR matrix.

The matrix has `nnz` entries: row M // 2 holds `long_row` of them (the load-imbalance case: one row far
longer than the rest), about one row in 20 and the last row are empty, and the other rows share what is
left in random lengths. Column indices are sorted and distinct within each row."""

import warnings

import torch

EMPTY_SHARE = 0.05  # about this share of the rows hold no entry
WEIGHT_STEPS = 1 << 10  # row lengths are drawn as integer weights, so they add up to nnz exactly


def reference(row_ptr: torch.Tensor, col_idx: torch.Tensor, values: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """torch's CSR product: cuSPARSE on the GPU (timed beside yours), exact sums in float64 on the CPU."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "sparse CSR support is in beta": not news to the learner
        A = torch.sparse_csr_tensor(row_ptr, col_idx, values, (row_ptr.numel() - 1, B.shape[0]), check_invariants=False)
        return A @ B


def csr_row_ptr(x: torch.Tensor, *, M: int, nnz: int, long_row: int) -> torch.Tensor:
    """Row pointers (M + 1, from 0 to nnz) drawn from x's U[0, 1) values (wrapped: a second trial's x
    runs to 1.5)."""
    u = x.flatten()[:M].remainder(1.0)
    long_at = M // 2
    shares = u >= EMPTY_SHARE  # the rows that get a share of what the long row leaves
    shares[long_at] = False
    if M - 1 != long_at:
        shares[M - 1] = False  # the last row empty: where a loop that runs to row_ptr[M] goes wrong
    rest = nnz - long_row
    weights = torch.where(shares, (WEIGHT_STEPS * (0.5 + u)).long(), 0)
    if rest < 0 or (rest > 0 and not bool(shares.any())):
        raise ValueError(
            f"M={M}, nnz={nnz}, long_row={long_row}: the long row cannot hold more than nnz entries, "
            "and the others need a row to go in: check the case's sizes"
        )
    cumulative = weights.cumsum(0) * rest // max(1, int(weights.sum()))  # exact integers, ending at rest
    lengths = torch.diff(cumulative, prepend=cumulative.new_zeros(1))
    lengths[long_at] += long_row
    return torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])


def csr_col_idx(x: torch.Tensor, *, row_ptr: torch.Tensor, K: int) -> torch.Tensor:
    """Column indices, sorted and distinct within each row: entry j of a row of length L lies in
    [floor(j K / L), floor((j + 1) K / L)), at a random place (x's U[0, 1) values, wrapped)."""
    lengths = torch.diff(row_ptr.long())
    if int(lengths.max()) > K:
        raise ValueError(
            f"a row of {int(lengths.max())} entries cannot have distinct columns among K={K}: check "
            "the case's sizes (long_row <= K, and about 1.5 nnz / M <= K)"
        )
    rows = torch.repeat_interleave(torch.arange(lengths.numel()), lengths)
    j = torch.arange(rows.numel()) - row_ptr.long()[rows]
    length = lengths[rows]
    low, high = j * K // length, (j + 1) * K // length
    return low + (x.flatten().remainder(1.0) * (high - low)).long()
