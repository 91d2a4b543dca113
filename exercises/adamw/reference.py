"""Reference: one step of AdamW (torch.optim.AdamW), updating the parameters p and the moments m and v.

    m' = beta1 m + (1 - beta1) g                      first moment: a running mean of the gradient
    v' = beta2 v + (1 - beta2) g^2                    second moment: a running mean of its square
    m_hat = m' / (1 - beta1^step)                     bias correction: m and v start at 0, so early
    v_hat = v' / (1 - beta2^step)                     means are too small by these factors
    p' = p - lr (m_hat / (sqrt(v_hat) + eps) + weight_decay p)

The weight decay is decoupled (Loshchilov & Hutter): it shrinks p directly instead of being added to the
gradient as an L2 term (g + weight_decay p, which is Adam with L2 regularisation, not AdamW). This is
torch.optim.AdamW's update, written the way its single-tensor code writes it, in float64.

The hyperparameters reach a CUDA kernel as float32 (the spec's `lr:float32`, ...), so the reference rounds
them to float32 first and then computes exactly: the comparison measures the kernel's arithmetic, not the
rounding of 0.999 that every float32 kernel shares.

In float32 (the GPU, where it is timed as the "torch" figure) it is torch's fused AdamW kernel,
torch._fused_adamw_, what torch.optim.AdamW(fused=True) runs: it updates the tensors it is given in place,
here the grading process's own copies of the inputs (your kernel updates copies of its own)."""

import torch


def as_float32(value: float) -> float:
    """The value a float32 kernel parameter holds."""
    return float(torch.tensor(value, dtype=torch.float32))


def adamw_step(p, g, m, v, *, lr, beta1, beta2, eps, weight_decay, step):
    """(p', m', v') by the formula above, in the inputs' precision, without touching the inputs."""
    lr, beta1, beta2, eps, weight_decay = (as_float32(x) for x in (lr, beta1, beta2, eps, weight_decay))
    m_new = beta1 * m + (1 - beta1) * g
    v_new = beta2 * v + (1 - beta2) * g * g
    bias_correction1 = 1 - beta1**step
    bias_correction2 = 1 - beta2**step
    denom = (v_new / bias_correction2).sqrt() + eps
    p_new = p * (1 - lr * weight_decay) - lr * (m_new / bias_correction1) / denom
    return p_new, m_new, v_new


_steps: dict = {}  # the fused kernel's step counters (float32 tensors on the GPU), one per (device, step)


def fused_adamw(p, g, m, v, *, lr, beta1, beta2, eps, weight_decay, step):
    """torch's fused AdamW step, in place on p, m and v (the "torch" figure)."""
    key = (str(p.device), int(step))
    if key not in _steps:
        _steps[key] = torch.tensor(float(step), dtype=torch.float32, device=p.device)
    torch._fused_adamw_(
        [p],
        [g],
        [m],
        [v],
        [],
        [_steps[key]],
        lr=lr,
        beta1=beta1,
        beta2=beta2,
        weight_decay=weight_decay,
        eps=eps,
        amsgrad=False,
        maximize=False,
    )
    return p, m, v


def reference(p, g, m, v, *, lr, beta1, beta2, eps, weight_decay, step):
    hyper = dict(lr=lr, beta1=beta1, beta2=beta2, eps=eps, weight_decay=weight_decay, step=step)
    if p.dtype != torch.float64:  # the "torch" time beside yours
        return fused_adamw(p, g, m, v, **hyper)
    return adamw_step(p, g, m, v, **hyper)
