"""`kcourse env-check`: what this machine can do for the course, measured where it can be."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from typing import Any

from grader import cuda_cpu
from grader.toolchain import build, thunderkittens

_INTERPRETER_PROBE = """
import torch, triton, triton.language as tl
@triton.jit
def double(x, y, n, B: tl.constexpr):
    o = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(y + o, tl.load(x + o, mask=o < n) * 2, mask=o < n)
x = torch.arange(100, dtype=torch.float32); y = torch.empty_like(x)
double[(2,)](x, y, 100, B=64)
assert torch.equal(y, 2 * x)
"""


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def triton_interpreter_works() -> tuple[bool, str]:
    env = dict(os.environ, TRITON_INTERPRET="1")
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _INTERPRETER_PROBE], env=env, capture_output=True, text=True, timeout=120
        )
    except subprocess.TimeoutExpired:
        return False, "timed out"
    return proc.returncode == 0, (proc.stderr.strip().splitlines() or [""])[-1]


def driver_version() -> str | None:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True)
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def gpu_facts() -> dict[str, Any]:
    import torch

    from grader.child import timing
    from grader.child.worker import write_result
    from grader.core.paths import state_dir

    props = torch.cuda.get_device_properties(0)
    measured = timing.measure_ceilings()  # copy bandwidth, cuBLAS in float32, float16 and bfloat16
    copy_gbps, matmul = measured["copy_gbps"], measured["matmul_tflops"]
    ceilings = state_dir() / "device_ceilings.json"  # what grades compare against from now on
    known = json.loads(ceilings.read_text()) if ceilings.exists() else {}
    known[props.name] = measured
    write_result(str(ceilings), known)
    return {
        "name": props.name,
        "capability": f"{props.major}.{props.minor}",
        "memory_gb": round(props.total_memory / 1e9, 1),
        "multiprocessors": props.multi_processor_count,
        "copy_gbps": copy_gbps,
        "matmul_fp32_tflops": matmul,
    }


def check_environment(training: bool = True) -> dict[str, Any]:
    import torch

    from grader.run.grade import cuda_available

    nvcc = build.find_nvcc()
    interpreter_ok, interpreter_note = triton_interpreter_works()
    gpu = cuda_available() and torch.cuda.is_available()
    record: dict[str, Any] = {
        "kind": "env",
        "checked_at": time.time(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "triton": _version("triton"),
        "ninja": shutil.which("ninja") is not None or _version("ninja") is not None,
        "nvcc": build.nvcc_version(nvcc) if nvcc else None,
        "nvcc_path": nvcc,
        "driver": driver_version(),
        "triton_interpreter": interpreter_ok,
        "triton_interpreter_note": "" if interpreter_ok else interpreter_note,
        "gpu": gpu_facts() if gpu else None,
    }
    record["thunderkittens"] = thunderkittens.describe(build.gpu_arch() if gpu else None)
    record["cuda_cpu"] = None if gpu else dict(zip(("runs", "how"), cuda_cpu.mode()))
    record["training"] = training_comparison(gpu) if training else None
    record["ready"] = bool(record["triton"]) and (gpu or interpreter_ok)
    record["can_do"] = what_can_run(record)
    return record


def what_can_run(record: dict[str, Any]) -> list[str]:
    if record["gpu"]:
        can = ["Triton and CUDA exercises: build, numerics and timing on the GPU"]
    else:
        can = (
            ["Triton exercises: numerics under the Triton interpreter (no timing)"]
            if record["triton_interpreter"]
            else []
        )
        can.append(_cuda_without_gpu(record))
    return can + _thunderkittens_can_run(record)


def _cuda_without_gpu(record: dict[str, Any]) -> str:
    emulation = record.get("cuda_cpu") or {}
    compiled = "nvcc's compile check and resource report, then " if record["nvcc"] else "no nvcc compile check, "
    if emulation.get("runs"):
        return (
            f"CUDA exercises: {compiled}numerics on the CPU emulator ({emulation['how']}; no race check); "
            "files using Hopper's wgmma, cuBLAS or ThunderKittens: compile check only"
        )
    return (
        "CUDA exercises: compile check with nvcc's resource report (not run): " + emulation.get("how", "")
        if record["nvcc"]
        else "CUDA exercises: nothing — " + build.NVCC_HINT
    )


def _thunderkittens_can_run(record: dict[str, Any]) -> list[str]:
    tk = record.get("thunderkittens") or {}
    if not tk.get("found"):
        return ["ThunderKittens exercises: skipped (not found; see the tk line)"] if tk else []
    if tk["can_run"]:
        return ["ThunderKittens exercises: build, numerics and timing on the GPU"]
    if record["gpu"]:
        return ["ThunderKittens exercises: skipped (" + tk["note"].split(";")[0] + ")"]
    return [
        "ThunderKittens exercises: compile check for sm_90a (not run)"
        if record["nvcc"]
        else "ThunderKittens exercises: nothing — " + build.NVCC_HINT
    ]


def format_environment(record: dict[str, Any]) -> str:
    lines = [
        f"python   {record['python']}  ({record['platform']})",
        f"torch    {record['torch']}" + (f" (CUDA {record['torch_cuda']})" if record["torch_cuda"] else " (CPU build)"),
        f"triton   {record['triton'] or 'missing: pip install triton'}"
        + (
            " — interpreter usable"
            if record["triton_interpreter"]
            else f" — interpreter failed: {record['triton_interpreter_note']}"
        ),
        f"nvcc     {record['nvcc'] or 'missing — ' + build.NVCC_HINT}",
        f"ninja    {'yes' if record['ninja'] else 'missing: pip install ninja'}",
        f"driver   {record['driver'] or 'no NVIDIA driver found'}",
    ]
    gpu = record["gpu"]
    if gpu:
        lines.append(
            f"GPU      {gpu['name']} (compute capability {gpu['capability']}, {gpu['memory_gb']} GB, "
            f"{gpu['multiprocessors']} SMs)"
        )
        lines.append(
            f"         measured copy bandwidth {gpu['copy_gbps']:.0f} GB/s, float32 matmul {gpu['matmul_fp32_tflops']:.1f} TFLOP/s"
        )
    else:
        lines.append("GPU      none found")
    if record.get("training"):
        t = record["training"]
        timings = ", ".join(f"{r['device']} {r['seconds']:.2f} s" for r in t["runs"])
        speedup = f" — the GPU is {t['speedup']:.1f}× faster" if t["speedup"] else ""
        lines.append(f"training {t['epochs']} epochs of a small MLP: {timings}{speedup}")
    if record.get("thunderkittens"):
        lines.append(thunderkittens.format_line(record["thunderkittens"]))
    lines.append("can do:  " + "\n         ".join(record["can_do"]))
    lines.append("READY" if record["ready"] else "NOT READY: install what is missing above")
    return "\n".join(lines)


# The training run is part of the quick start, so it stays short: at most about BUDGET_S on the CPU, its data,
# model and warm-up included (docs/measurements.md: what it cost before it had a budget).
# The CPU runs until BUDGET_S is spent or EPOCHS are done; the GPU then runs as many steps, the same work.
SAMPLES, BATCH, EPOCHS, WARMUP_STEPS, BUDGET_S = 2048, 256, 5, 2, 2.0


def _mlp_and_data(device: str, samples: int):
    """Synthetic features and labels a linear map makes separable, and a seeded three-layer MLP with AdamW."""
    import torch
    from torch import nn

    gen = torch.Generator().manual_seed(0)
    features = torch.randn(samples, 256, generator=gen)
    labels = (features @ torch.randn(256, 10, generator=gen)).argmax(dim=1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)).to(device)
    return features.to(device), labels.to(device), model, torch.optim.AdamW(model.parameters(), lr=1e-3)


def time_training(
    device: str,
    epochs: int = EPOCHS,
    samples: int = SAMPLES,
    batch: int = BATCH,
    budget_s: float | None = None,
    steps: int | None = None,
) -> dict[str, Any]:
    """A small MLP on synthetic data made here (no downloads), for a CPU-vs-GPU comparison: `epochs` epochs
    after a few warm-up steps, stopped early (after one timed step at least) once `budget_s` is spent since the
    call began; `steps`: exactly this many timed steps."""
    import torch
    from torch import nn

    called = time.perf_counter()
    features, labels, model, optimizer = _mlp_and_data(device, samples)
    per_epoch = -(-samples // batch)

    def step(index: int):
        start = (index % per_epoch) * batch
        loss = nn.functional.cross_entropy(model(features[start : start + batch]), labels[start : start + batch])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.detach()

    for index in range(WARMUP_STEPS):  # kernel selection and allocation stay out of the timing
        step(index)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    wanted = steps if steps is not None else epochs * per_epoch
    started = time.perf_counter()
    done = 0
    while done < wanted:
        loss = step(done)
        done += 1
        if steps is None and budget_s is not None and time.perf_counter() - called >= budget_s:
            break
    sync()
    seconds = time.perf_counter() - started
    return {
        "device": device,
        "seconds": seconds,
        "per_epoch_s": seconds / done * per_epoch,
        "final_loss": float(loss),
        "steps": done,
        "epochs": round(done / per_epoch, 2),
    }


def training_comparison(gpu: bool, epochs: int = EPOCHS, budget_s: float | None = BUDGET_S) -> dict[str, Any]:
    """The CPU's run (stopped once `budget_s` is spent), then the GPU's of the same steps where there is one."""
    cpu = time_training("cpu", epochs, budget_s=budget_s)
    runs = [cpu] + ([time_training("cuda", steps=cpu["steps"])] if gpu else [])
    done = int(cpu["epochs"]) if cpu["epochs"] == int(cpu["epochs"]) else cpu["epochs"]
    stopped = f" (the CPU's run stopped at its {budget_s:g}-s budget)" if done < epochs else ""
    return {
        "description": f"A 3-layer MLP (256-512-512-10, AdamW) on {SAMPLES:,} synthetic samples, batch {BATCH}: "
        f"{done} epochs after {WARMUP_STEPS} warm-up steps{stopped}" + (", the same steps on the GPU." if gpu else "."),
        "epochs": done,
        "runs": runs,
        "speedup": runs[0]["seconds"] / runs[1]["seconds"] if len(runs) == 2 else None,
    }
