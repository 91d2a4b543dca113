"""Reference: the cross-entropy loss of each row of logits and the gradient of their mean.

    lse_i     = log(sum_j exp(logits[i, j]))                      (the log-sum-exp of row i)
    losses[i] = lse_i - logits[i, targets[i]]                     (= -log softmax(logits[i])[targets[i]])
    loss      = sum_i losses[i] / n_valid                         (the mean over rows whose target is not -100)
    dlogits[i, j] = (softmax(logits[i])[j] - [j == targets[i]]) / n_valid      (= d loss / d logits[i, j])

A row whose target is ignore_index (-100, PyTorch's convention for padding) has loss 0 and gradient 0, and is
not counted in n_valid. This is torch.nn.functional.cross_entropy(logits, targets) (reduction "mean",
ignore_index -100) and its backward; `losses` is its reduction="none" output.

The verdict is these formulas in float64 on the CPU (the grader's copies of the bfloat16 logits, upcast). In
bfloat16 (the GPU, where it is timed as the "torch" figure) it is what a PyTorch training step runs:
F.cross_entropy forward and, through autograd, backward (log_softmax, nll_loss and their backward kernels)."""

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100


def cross_entropy_and_gradient(logits: torch.Tensor, targets: torch.Tensor):
    """(losses, dlogits) by the formulas above, in the logits' precision."""
    valid = targets != IGNORE_INDEX
    classes = torch.where(valid, targets, 0)  # any class for an ignored row: its results are zeroed below
    lse = torch.logsumexp(logits, dim=-1)
    losses = torch.where(valid, lse - logits.gather(1, classes[:, None])[:, 0], 0.0)
    dlogits = logits - lse[:, None]  # a new tensor: the inputs stay untouched
    dlogits.exp_()
    rows = torch.arange(logits.shape[0], device=logits.device)
    dlogits[rows, classes] -= 1.0
    dlogits *= (valid.to(logits.dtype) / valid.sum())[:, None]
    return losses, dlogits


def torch_training_step(logits: torch.Tensor, targets: torch.Tensor):
    """PyTorch's forward and backward of the mean cross-entropy (the "torch" figure)."""
    with torch.enable_grad():
        leaf = logits.detach().requires_grad_()
        losses = F.cross_entropy(leaf, targets, ignore_index=IGNORE_INDEX, reduction="none")
        (losses.sum() / (targets != IGNORE_INDEX).sum()).backward()
    return losses.detach().float(), leaf.grad


def reference(logits: torch.Tensor, targets: torch.Tensor):
    if logits.dtype != torch.float64:  # the "torch" time beside yours
        return torch_training_step(logits, targets)
    return cross_entropy_and_gradient(logits, targets)


# --- how the grader draws the targets (spec.toml: `transform`) ------------------------------------------


def all_valid(x: torch.Tensor, *, V: int) -> torch.Tensor:
    """A class in 0..V-1 for every row, from the U[0,1) draws (a second trial's [0, 1.5) wraps around)."""
    return torch.floor(x * V).remainder_(V)


def some_ignored(x: torch.Tensor, *, V: int) -> torch.Tensor:
    """The same with every third row (2, 5, 8, ...) ignored: -100, as padding is. Row 0 always counts, so
    the mean has at least one row."""
    targets = all_valid(x, V=V)
    targets[2::3] = IGNORE_INDEX
    return targets
