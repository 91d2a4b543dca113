"""Reference: per-row sum, max and first index of the max — torch's x.sum(1), x.amax(1), x.argmax(1).

The grader calls it on float64 copies of the inputs, so the sums are exact enough to judge a float32
sum by; maxes and argmaxes are judged exactly by first_max_index / exact_max below (spec.toml `check`),
with a message that names the mistake (a later equal maximum, an index in the padding past the row)."""

import torch


def reference(x: torch.Tensor):
    return x.sum(1), x.amax(1), x.argmax(1)  # argmax: the first index of the maximum, as torch documents


def exact_max(got: torch.Tensor, *, expected: torch.Tensor) -> str | None:
    """A max is one of the row's values: exact, no tolerance."""
    got, want = got.double().flatten(), expected.double().cpu().flatten()
    wrong = (got != want).nonzero().flatten()
    if wrong.numel() == 0:
        return None
    row = int(wrong[0])
    padding = (
        " — 0 is not in that row: do masked lanes load 0? For the max they must load -inf"
        if float(got[row]) == 0.0 and float(want[row]) < 0
        else ""
    )
    return (
        f"{wrong.numel()} of {want.numel()} rows wrong; first row {row}: got {float(got[row]):.8g}, the row's "
        f"max is {float(want[row]):.8g}{padding}"
    )


def first_max_index(got: torch.Tensor, *, expected: torch.Tensor, inputs: dict) -> str | None:
    """The index of the FIRST maximum of each row (torch.argmax), exactly."""
    x = inputs["x"].double().cpu()
    got, want = got.long().flatten(), expected.long().cpu().flatten()
    wrong = (got != want).nonzero().flatten()
    if wrong.numel() == 0:
        return None
    row = int(wrong[0])
    i, j, n = int(got[row]), int(want[row]), x.shape[1]
    head = f"{wrong.numel()} of {want.numel()} rows wrong; first row {row}: got index {i}, expected {j}"
    if not 0 <= i < n:
        return (
            f"{head}, outside the row [0, {n}): masked lanes past the row's end must load -inf (and never win "
            "the argmax)"
        )
    if x[row, i] == x[row, j]:
        return (
            f"{head}, which holds the same maximum ({float(x[row, j]):.8g}) later in the row: the first index "
            "must win, as in torch.argmax — update only on a strictly greater value, and when lanes or "
            "programs hold equal maxima keep the smallest index"
        )
    return f"{head}: x[{row}, {i}] = {float(x[row, i]):.8g} is not the row's max {float(x[row, j]):.8g}"
