"""Reference: the embedding lookup out[b][t] = weight[ids[b][t]] (torch.nn.functional.embedding), and the
transforms that draw the token ids (whole numbers the grader casts to int64)."""

import torch


def reference(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.embedding(ids, weight)


def token_ids(x: torch.Tensor, *, V: int) -> torch.Tensor:
    """Ids spread over [0, V) (a new set each trial), with 0 first and V - 1 last: the first and last rows."""
    ids = torch.floor(x.abs() * 1e6).remainder_(V)
    ids.view(-1)[0] = 0
    ids.view(-1)[-1] = V - 1
    return ids


def one_token(x: torch.Tensor, *, V: int) -> torch.Tensor:
    """Every id V - 1: one row gathered by every token (scattered into by every token, backward)."""
    return torch.full(x.shape, V - 1, dtype=torch.float64)
