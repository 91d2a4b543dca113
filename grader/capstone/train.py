"""The child's side: load the chosen kernels, train the eager, torch.compile and kernel runs from the same
seed on the same batches, or check one block against float64. It decides no verdict; it reports figures.

Each run is sent to the parent as soon as it ends (the baselines first, before any learner code is even
imported), so a kernel that crashes the process cannot take the PyTorch figures with it."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Callable

import torch

from grader.capstone import data, kernels
from grader.capstone.gpt import GPT, Block, ModelConfig, parameter_count
from grader.capstone.ops import KernelFailed, Ops, optimizer
from grader.core.vocabulary import Event

Send = Callable[..., None]


def dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def load_kernels(choices: list[kernels.Choice], send: Send) -> dict[tuple[str, str], Any]:
    """(operation, role) -> the learner's kernel; one load per file (a matmul serving forward and backward
    is one module, autotuned once). A file that does not load ends the run with the operation named."""
    from grader.child import loading

    loaded: dict[tuple[str, str], Any] = {}
    by_file: dict[tuple[str, str], Any] = {}
    for choice in (c for c in choices if c.yours):
        key = (choice.exercise + ":" + choice.lang, choice.file)
        if key not in by_file:
            send(Event.STEP, text=f"loading {Path(choice.file).name} ({choice.exercise}, {choice.lang})")
            try:
                by_file[key] = kernels.load_kernel(choice)
            except loading.EntryError as exc:
                raise KernelFailed(
                    choice.operation, choice.role, f"{choice.exercise}, {choice.lang}", str(exc)
                ) from None
            except Exception as exc:  # the learner's module raised at import
                from grader.child.learner_errors import learner_error

                raise KernelFailed(
                    choice.operation,
                    choice.role,
                    f"{choice.exercise}, {choice.lang}",
                    "importing it raised " + learner_error(exc, Path(choice.file)),
                ) from None
            by_file[key].source, by_file[key].file = f"{choice.exercise}, {choice.lang}", choice.file
        loaded[(choice.operation, choice.role)] = by_file[key]
    return loaded


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


# --- training ----------------------------------------------------------------------------------------


def train(name: str, job: dict[str, Any], ops: Ops, send: Send, stop_at: int | None = None) -> dict[str, Any]:
    """One run: `steps` steps of AdamW on the job's batches; the loss of each step, tokens/s over the steps
    after the warm-up ones, peak memory. Stops at the first NaN loss (read every `log_every` steps)."""
    cfg, device, seed = job["config"], job["device"], job["seed"]
    model_config = ModelConfig(cfg["layers"], cfg["heads"], cfg["d_model"], cfg["context"])
    torch.manual_seed(seed)
    model = GPT(model_config, ops).to(device)
    opt = optimizer(model, ops, cfg["lr"], cfg["weight_decay"])
    forward = torch.compile(model) if name == "compile" else model
    text = data.load_bytes(Path(job["data"]) if job.get("data") else None, cfg["text_bytes"])
    batches = data.Batches(text, cfg["batch"], cfg["context"], seed, device)
    steps = stop_at or cfg["steps"]
    losses = torch.zeros(steps, device=device)
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    tokens, started, timed_from = cfg["batch"] * cfg["context"], time.perf_counter(), None
    for step in range(steps):
        if step == min(cfg["warmup_steps"], steps - 1):
            sync(device)
            timed_from = (step, time.perf_counter())
        x, y = batches.get(step)
        loss = forward(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses[step] = loss.detach()
        if (step + 1) % cfg["log_every"] == 0 or step + 1 == steps:
            seen = losses[: step + 1].tolist()  # a sync: the figures below are the GPU's, not the queue's
            rate = (
                _rate(tokens, step + 1 - timed_from[0], timed_from[1]) if timed_from and step > timed_from[0] else None
            )
            send(Event.PROGRESS, run=name, step=step + 1, steps=steps, loss=seen[-1], tokens_per_s=rate)
            if not all(math.isfinite(v) for v in seen):
                return _result(
                    name,
                    model,
                    seen,
                    None,
                    device,
                    started,
                    nan_at=next(i for i, v in enumerate(seen) if not math.isfinite(v)),
                )
    sync(device)
    rate = _rate(tokens, steps - timed_from[0], timed_from[1])
    return _result(name, model, losses.tolist(), rate, device, started)


def _rate(tokens_per_step: int, steps: int, since: float) -> float:
    return tokens_per_step * steps / max(time.perf_counter() - since, 1e-9)


def _result(
    name: str, model, losses: list[float], rate: float | None, device: str, started: float, nan_at: int | None = None
) -> dict[str, Any]:
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else None
    return {
        "name": name,
        "losses": [v if math.isfinite(v) else None for v in losses],
        "tokens_per_s": rate,
        "peak_bytes": peak,
        "seconds": round(time.perf_counter() - started, 3),
        "nan_at": nan_at,
        "parameters": parameter_count(model),
    }


def trace_nan(job: dict[str, Any], ops: Ops, nan_at: int, send: Send) -> str:
    """The kernel run again up to the step whose loss was NaN, every kernel's outputs checked as they come:
    the first operation that turned finite inputs into NaN/inf. "" where none did (PyTorch's part diverged)."""
    send(Event.STEP, text=f"tracing the NaN at step {nan_at + 1} to its operation")
    ops.check = True
    try:
        train("trace", job, ops, lambda *a, **k: None, stop_at=nan_at + 1)
    except KernelFailed as exc:
        return str(exc)
    finally:
        ops.check = False
    return ""


def capstone(job: dict[str, Any], send: Send) -> None:
    """The baselines, then the learner's run; each sent as a "run" event when it ends."""
    cfg = job["config"]
    act, low = torch.float32, dtype(cfg["low_precision"])
    baselines = ["eager"] + (["compile"] if cfg["compile"] else [])
    for name in baselines:
        send(Event.STEP, text=f"training with PyTorch ({name})")
        send(Event.RUN, result=train(name, job, Ops(act, low), send))
    send(Event.STEP, text="loading your kernels")
    try:
        ops = Ops(act, low, load_kernels(kernels.from_dicts(job["choices"]), send))
        send(Event.STEP, text="training with your kernels")
        result = train("kernels", job, ops, send)
    except KernelFailed as exc:
        send(Event.RUN, result={"name": "kernels", "failed": str(exc), "operation": exc.operation, "role": exc.role})
        return
    if result["nan_at"] is not None:
        result["failed"] = trace_nan(job, ops, result["nan_at"], send) or (
            f"the loss became NaN at step {result['nan_at'] + 1}, and no kernel's output turned finite inputs into NaN "
            "when traced: the training diverged (look at the backward kernels' magnitudes)"
        )
    send(Event.RUN, result=result)


# --- one transformer block against float64 ---------------------------------------------------------------

PARTS = ("attention", "ffn", "block")


def _part(block: Block, part: str) -> Callable[[torch.Tensor], torch.Tensor]:
    return {"attention": block.attention_part, "ffn": block.ffn_part, "block": block.forward}[part]


def _block_run(block: Block, x: torch.Tensor, part: str, grad: torch.Tensor) -> dict[str, torch.Tensor]:
    """The part's output and the gradients of x and of every parameter it uses (float64 copies)."""
    block.zero_grad(set_to_none=True)
    leaf = x.detach().clone().requires_grad_()
    out = _part(block, part)(leaf)
    out.backward(grad.to(out.dtype))
    found = {"out": out.detach().double(), "dx": leaf.grad.double()}
    found.update({f"d{n}": p.grad.double() for n, p in block.named_parameters() if p.grad is not None})
    return found


def _relative_error(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> tuple[float, str]:
    """max |got - want| / max |want| over the part's tensors, and the tensor where it is worst (inf for NaN)."""
    worst, where = 0.0, ""
    for name, ref in want.items():
        diff = (got[name] - ref).abs().max().item() / max(ref.abs().max().item(), 1e-30)
        diff = diff if math.isfinite(diff) else math.inf
        if diff >= worst:
            worst, where = diff, name
    return worst, where


def _time(fn: Callable[[], Any], device: str, runs: int) -> float:
    fn()
    sync(device)
    started = time.perf_counter()
    for _ in range(runs):
        fn()
    sync(device)
    return (time.perf_counter() - started) / runs * 1000


def block_check(job: dict[str, Any], send: Send) -> None:
    """Each part (attention, feed-forward, the whole block with its residuals), forward and backward: yours and
    PyTorch's in the same dtypes, each against the float64 PyTorch block; then their times."""
    cfg, device, seed = job["config"], job["device"], job["seed"]
    config = ModelConfig(1, cfg["heads"], cfg["d_model"], cfg["context"])
    act, low = torch.float32, dtype(cfg["low_precision"])
    torch.manual_seed(seed)
    reference = Block(config, Ops(torch.float64, torch.float64)).to(device).double()
    x = torch.randn(cfg["batch"], cfg["context"], cfg["d_model"], device=device, dtype=torch.float64)
    grad = torch.randn_like(x)
    pytorch = _copy(reference, config, Ops(act, low), device)
    send(Event.STEP, text="loading your kernels")
    try:
        yours = _copy(reference, config, Ops(act, low, load_kernels(kernels.from_dicts(job["choices"]), send)), device)
        parts = {}
        for part in PARTS:
            send(Event.STEP, text=f"checking the {part} part")
            want = _block_run(reference, x, part, grad)
            mine, theirs = (_relative_error(_block_run(b, x.to(act), part, grad), want) for b in (yours, pytorch))
            parts[part] = {"error": mine[0], "worst": mine[1], "torch_error": theirs[0], "torch_worst": theirs[1]}
        runs = job.get("runs", 20 if device == "cuda" else 1)
        step = lambda b: lambda: _block_run(b, x.to(act), "block", grad)  # noqa: E731
        times = {"ms": _time(step(yours), device, runs), "torch_ms": _time(step(pytorch), device, runs)}
    except KernelFailed as exc:
        send(Event.BLOCK, result={"failed": str(exc), "operation": exc.operation, "role": exc.role})
        return
    send(Event.BLOCK, result={"parts": parts, **times})


def _copy(reference: Block, config: ModelConfig, ops: Ops, device: str) -> Block:
    block = Block(config, ops).to(device)
    block.load_state_dict({k: v.float() for k, v in reference.state_dict().items()})
    return block
