"""Reference: out = where(x > threshold, x * scale[col] + bias[row], leaky * x), in eager PyTorch.

On the GPU this is what the grader times beside yours: five kernels (compare, multiply, add, multiply,
select), each a pass over the matrix. The grader's truth is the same expression in float64 on the CPU.
The transforms make the inputs that break the classic mistakes (values exactly at the threshold, infinities)."""

import torch


def reference(
    x: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor, *, threshold: float, leaky: float
) -> torch.Tensor:
    return torch.where(x > threshold, x * scale + bias[:, None], leaky * x)


def at_threshold(x: torch.Tensor, *, threshold: float) -> torch.Tensor:
    """Every third value exactly the threshold (the case's threshold is exact in every dtype): strictly
    greater sends them to leaky * x, so `>=` is wrong on each of them. With threshold 0 they are +0.0."""
    x = x.clone()
    x.view(-1)[::3] = threshold
    return x


def with_infinities(x: torch.Tensor) -> torch.Tensor:
    """+inf every 7th value, -inf every 11th: where() passes them through (inf * scale + bias, leaky * -inf);
    a blend m * a + (1 - m) * b computes 0 * inf = NaN for the branch not taken."""
    x = x.clone()
    flat = x.view(-1)
    flat[::7] = float("inf")
    flat[5::11] = float("-inf")
    return x
