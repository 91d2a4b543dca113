"""The model's operations, PyTorch's or the learner's, behind one interface (`Ops`).

A learner's forward kernel runs inside a torch.autograd.Function (`KernelFunction`); its backward is the
learner's backward kernel where they have one, else PyTorch's gradient of PyTorch's operation, recomputed
from the saved inputs. Dtypes follow autocast's choices (kernels.operation_dtypes), identically in every run,
so the PyTorch run is the learner's run with PyTorch in every slot.

With `check` on (the NaN trace-back run), every kernel's outputs are checked as they come: the first
operation whose output holds a NaN or inf from finite inputs is named (`KernelFailed`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F

from grader.capstone.row_stats import row_stats

EPS = 1e-5  # layer norm's (the layer_norm exercise fixes eps = 1e-5)


class KernelFailed(Exception):
    """A learner kernel raised, or produced NaN/inf from finite inputs; names the operation and role."""

    def __init__(self, operation: str, role: str, source: str, message: str):
        super().__init__(f"{operation} {role} ({source}): {message}")
        self.operation, self.role, self.source = operation, role, source


class KernelOp:
    """One operation with the learner's kernels: `forward(*inputs) -> (out, saved)`; `backward(inputs, saved,
    grad) -> grads` or None (PyTorch's gradient of `reference`, recomputed)."""

    def __init__(self, name: str, reference: Callable, forward: Callable, backward: Callable | None):
        self.name, self.reference, self.forward, self.backward = name, reference, forward, backward


class KernelFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, op: KernelOp, *inputs):
        out, saved = op.forward(*inputs)
        ctx.op, ctx.count = op, len(inputs)
        ctx.save_for_backward(*inputs, *saved)
        return out

    @staticmethod
    def backward(ctx, grad):
        tensors = ctx.saved_tensors
        inputs, saved = tensors[: ctx.count], tensors[ctx.count :]
        if ctx.op.backward is not None:
            return (None, *ctx.op.backward(inputs, saved, grad))
        return (None, *recomputed_gradients(ctx.op.reference, inputs, grad))


def recomputed_gradients(reference: Callable, inputs: tuple, grad: torch.Tensor) -> list:
    """PyTorch's gradient of `reference` at the saved inputs (None for inputs that need none)."""
    leaves = [t.detach().requires_grad_(t.is_floating_point()) for t in inputs]
    with torch.enable_grad():
        out = reference(*leaves)
        wanted = [t for t in leaves if t.requires_grad]
        found = iter(torch.autograd.grad(out, wanted, grad))
    return [next(found) if t.requires_grad else None for t in leaves]


class Ops:
    """The operations of gpt.py. `kernels`: (operation, role) -> a loaded kernels.ExerciseKernel (with
    `.source`, "exercise (lang)"); an absent pair is PyTorch's. `act`: the residual stream's dtype; `low`:
    the matmuls', attention's, the activation's and the logits'."""

    def __init__(
        self,
        act: torch.dtype = torch.float32,
        low: torch.dtype = torch.float32,
        kernels: dict[tuple[str, str], Any] | None = None,
        check: bool = False,
    ):
        self.act, self.low, self.kernels, self.check = act, low, kernels or {}, check
        self.lr, self.weight_decay = 1e-3, 0.0

    def has(self, operation: str, role: str = "forward") -> bool:
        return (operation, role) in self.kernels

    def call(self, operation: str, role: str, **tensors) -> dict[str, torch.Tensor]:
        """The learner's kernel for this role, its failure turned into a KernelFailed naming the operation."""
        kernel = self.kernels[(operation, role)]
        try:
            outputs = kernel(**tensors)
        except KernelFailed:
            raise
        except Exception as exc:
            from grader.child.learner_errors import learner_error

            raise KernelFailed(
                operation, role, kernel.source, "raised " + learner_error(exc, Path(kernel.file))
            ) from None
        if self.check:
            self._check_finite(operation, role, kernel.source, tensors, outputs)
        return outputs

    def _check_finite(self, operation: str, role: str, source: str, inputs: dict, outputs: dict) -> None:
        finite_in = all(
            bool(torch.isfinite(t).all())
            for t in inputs.values()
            if isinstance(t, torch.Tensor) and t.is_floating_point()
        )
        for name, out in outputs.items():
            if finite_in and out.is_floating_point() and not bool(torch.isfinite(out).all()):
                bad = int((~torch.isfinite(out)).sum())
                raise KernelFailed(
                    operation,
                    role,
                    source,
                    f"output `{name}` holds {bad} NaN/inf value(s) of {out.numel()} from finite inputs",
                )

    def _apply(self, name: str, reference: Callable, forward: Callable, backward: Callable | None, *inputs):
        return KernelFunction.apply(KernelOp(name, reference, forward, backward), *inputs)

    # --- embedding ---------------------------------------------------------------------------------
    def embedding(self, ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        if not self.has("embedding"):
            return F.embedding(ids, weight)
        forward = lambda i, w: (self.call("embedding", "forward", ids=i, weight=w)["out"], ())  # noqa: E731
        backward = None
        if self.has("embedding", "backward"):

            def backward(inputs, saved, grad):
                # V (the table's rows) is the one size no input of the backward carries: it is the weight's
                dweight = self.call(
                    "embedding", "backward", ids=inputs[0], dout=grad.contiguous(), V=inputs[1].shape[0]
                )["dweight"]
                return None, dweight

        return self._apply("embedding", F.embedding, forward, backward, ids.contiguous(), weight)

    # --- layer norm (rows of x2d) ---------------------------------------------------------------------
    def layer_norm(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        reference = lambda x_, w, b: F.layer_norm(x_, (x_.shape[-1],), w, b, EPS)  # noqa: E731
        if not self.has("layer_norm"):
            return reference(x, weight, bias)
        forward = lambda x_, w, b: (self.call("layer_norm", "forward", x=x_, weight=w, bias=b)["out"], ())  # noqa: E731
        backward = self._layer_norm_backward if self.has("layer_norm", "backward") else None
        return self._apply("layer_norm", reference, forward, backward, x.contiguous(), weight, bias)

    def _layer_norm_backward(self, inputs, saved, grad):
        x, weight, bias = inputs
        mean, rstd = row_stats(x, EPS)  # the statistics the forward kept (the layer_norm exercise writes none)
        got = self.call("layer_norm", "backward", x=x, weight=weight, dy=grad.contiguous(), mean=mean, rstd=rstd)
        return got["dx"], got["dw"].to(weight.dtype), got["db"].to(bias.dtype)

    # --- linear: x @ W^T, bias-free ------------------------------------------------------------------
    def linear(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        x, weight = x.to(self.low), weight.to(self.low)
        if not self.has("linear"):
            return F.linear(x, weight)
        forward = lambda x_, w: (self.call("linear", "forward", A=x_, B=w.t())["C"], ())  # noqa: E731
        backward = None
        if self.has("linear", "backward"):

            def backward(inputs, saved, grad):
                x_, w = inputs
                dx = self.call("linear", "backward", A=grad, B=w)["C"]
                dw = self.call("linear", "backward", A=grad.t(), B=x_)["C"]
                return dx, dw

        return self._apply("linear", F.linear, forward, backward, x, weight)

    # --- causal attention of the fused projection qkv (B, T, 3, H, d) ---------------------------------
    # The learner's kernels read q, k and v where the projection wrote them, as (B, H, T, d) views whose row
    # stride is 3*H*d (the graded `interleaved` layout), write `out` as (B, T, H, d) so the heads come out
    # side by side for the output projection, and write dq, dk, dv into one (B, T, 3, H, d) gradient: no copy
    # a step (the `.contiguous()` copies this replaced: docs/measurements.md).
    def attention(self, qkv: torch.Tensor) -> torch.Tensor:
        if self.has("attention"):
            return self._apply(
                "attention", _attention_reference, self._attention_forward, self._attention_backward(), qkv
            )
        if self.has("softmax"):
            return _merge_heads(self._attention_by_softmax(*_split_heads(qkv)))
        return _attention_reference(qkv)

    def _attention_forward(self, qkv):
        q, k, v = _split_heads(qkv)
        b, heads, t, d = q.shape
        out = torch.empty(b, t, heads, d, dtype=qkv.dtype, device=qkv.device).transpose(1, 2)
        got = self.call("attention", "forward", q=q, k=k, v=v, out=out, causal=True)
        return _merge_heads(got["out"]), tuple(t for name, t in got.items() if name in ("out", "lse"))

    def _attention_backward(self) -> Callable | None:
        if (
            not self.has("attention", "backward")
            or "flash_attention_v2" not in self.kernels[("attention", "forward")].source
        ):
            return None  # the backward reads the forward's log-sum-exp: only after a flash_attention_v2 forward

        def backward(inputs, saved, grad):
            (qkv,) = inputs
            out, lse = saved
            b, t, _, heads, d = qkv.shape
            dqkv = torch.empty_like(qkv)
            (q, k, v), (dq, dk, dv) = _split_heads(qkv), _split_heads(dqkv)
            dout = grad.reshape(b, t, heads, d).transpose(1, 2)
            got = self.call(
                "attention", "backward", q=q, k=k, v=v, out=out, lse=lse, dout=dout, dq=dq, dk=dk, dv=dv, causal=True
            )
            if got["dq"] is not dq:  # a kernel that returns its outputs (a torch operator) gave tensors of its own
                dqkv = torch.stack([got[name].transpose(1, 2) for name in ("dq", "dk", "dv")], dim=2)
            return (dqkv,)

        return backward

    def _attention_by_softmax(self, q, k, v):
        """Attention written out, the softmax of the scores (float32 rows, -inf above the diagonal) yours."""
        n = q.shape[-2]
        scores = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
        mask = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
        probs = self.softmax(scores.reshape(-1, n)).reshape(scores.shape)
        return probs.to(v.dtype) @ v

    def softmax(self, x: torch.Tensor) -> torch.Tensor:
        reference = lambda x_: torch.softmax(x_, dim=-1)  # noqa: E731
        forward = lambda x_: (lambda y: (y, (y,)))(self.call("softmax", "forward", x=x_)["out"])  # noqa: E731
        backward = None
        if self.has("softmax", "backward"):
            backward = lambda inputs, saved, grad: (  # noqa: E731
                self.call("softmax", "backward", y=saved[0], dy=grad.contiguous())["dx"],
            )
        return self._apply("softmax", reference, forward, backward, x.contiguous())

    # --- GELU (tanh), cross-entropy ----------------------------------------------------------------------
    def gelu(self, x: torch.Tensor) -> torch.Tensor:
        reference = lambda x_: F.gelu(x_, approximate="tanh")  # noqa: E731
        if not self.has("gelu"):
            return reference(x)
        forward = lambda x_: (self.call("gelu", "forward", x=x_)["out"], ())  # noqa: E731
        # No exercise writes GELU's backward: PyTorch's gradient kernel, called as eager's autograd calls it.
        # The generic recompute (the forward again under autograd) cost an extra pass over the activations
        # and ~0.1 ms of Python a call.
        backward = lambda inputs, saved, grad: (  # noqa: E731
            torch.ops.aten.gelu_backward(grad, inputs[0], approximate="tanh"),
        )
        return self._apply("gelu", reference, forward, backward, x.contiguous())

    def cross_entropy(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The mean loss over the rows, in float32 (float64 in the reference block)."""
        loss_dtype = torch.float64 if self.act == torch.float64 else torch.float32
        reference = lambda z, t: F.cross_entropy(z.to(loss_dtype), t)  # noqa: E731
        if not self.has("cross_entropy"):
            return reference(logits, targets)

        def forward(z, t):  # one call gives each row's loss and the gradient of their mean
            got = self.call("cross_entropy", "forward", logits=z, targets=t)
            return got["losses"].sum() / z.shape[0], (got["dlogits"],)

        backward = lambda inputs, saved, grad: ((saved[0] * grad).to(inputs[0].dtype), None)  # noqa: E731
        return self._apply("cross_entropy", reference, forward, backward, logits.contiguous(), targets.contiguous())


def _split_heads(qkv: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """q, k, v of a (B, T, 3, H, d) projection, as (B, H, T, d) views."""
    return tuple(qkv[:, :, i].transpose(1, 2) for i in range(3))


def _merge_heads(y: torch.Tensor) -> torch.Tensor:
    """(B, H, T, d) -> (B*T, H*d): a view where y lies as (B, T, H, d), a copy otherwise."""
    b, heads, t, d = y.shape
    return y.transpose(1, 2).reshape(b * t, heads * d)


def _attention_reference(qkv: torch.Tensor) -> torch.Tensor:
    return _merge_heads(F.scaled_dot_product_attention(*_split_heads(qkv), is_causal=True))


class FlatAdamW:
    """The learner's AdamW kernel stepping every parameter in one launch: the parameters and their gradients
    become views of one flat float32 buffer each (as llm.c keeps them), so one call updates them all."""

    def __init__(
        self,
        params: list[torch.nn.Parameter],
        ops: Ops,
        lr: float,
        weight_decay: float,
        betas=(0.9, 0.95),
        eps: float = 1e-8,
    ):
        self.ops, self.lr, self.weight_decay, self.betas, self.eps, self.step_count = (
            ops,
            lr,
            weight_decay,
            betas,
            eps,
            0,
        )
        total = sum(p.numel() for p in params)
        device = params[0].device
        self.flat = torch.empty(total, dtype=torch.float32, device=device)
        self.grad = torch.zeros_like(self.flat)
        self.m, self.v = torch.zeros_like(self.flat), torch.zeros_like(self.flat)
        offset = 0
        for p in params:
            n = p.numel()
            self.flat[offset : offset + n].copy_(p.data.flatten())
            p.data = self.flat[offset : offset + n].view_as(p)
            p.grad = self.grad[offset : offset + n].view_as(p)  # autograd adds into it in place
            offset += n

    def zero_grad(self) -> None:
        self.grad.zero_()

    def step(self) -> None:
        self.step_count += 1
        self.ops.call(
            "adamw",
            "step",
            p=self.flat,
            g=self.grad,
            m=self.m,
            v=self.v,
            lr=self.lr,
            beta1=self.betas[0],
            beta2=self.betas[1],
            eps=self.eps,
            weight_decay=self.weight_decay,
            step=self.step_count,
        )


def optimizer(model: torch.nn.Module, ops: Ops, lr: float, weight_decay: float):
    """The learner's AdamW where they have one, else torch's, with the same hyperparameters."""
    params = list(model.parameters())
    if ops.has("adamw", "step"):
        return FlatAdamW(params, ops, lr, weight_decay)
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, betas=(0.9, 0.95), eps=1e-8)
