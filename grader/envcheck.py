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

from grader import build, thunderkittens

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
        proc = subprocess.run([sys.executable, "-c", _INTERPRETER_PROBE], env=env, capture_output=True, text=True, timeout=120)
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

    from grader import timing

    from grader.paths import state_dir
    from grader.worker import write_result

    props = torch.cuda.get_device_properties(0)
    measured = timing.measure_ceilings()  # copy bandwidth, cuBLAS in float32, float16 and bfloat16
    copy_gbps, matmul = measured["copy_gbps"], measured["matmul_tflops"]
    ceilings = state_dir() / "device_ceilings.json"  # what grades compare against from now on
    known = json.loads(ceilings.read_text()) if ceilings.exists() else {}
    known[props.name] = measured
    write_result(str(ceilings), known)
    return {
        "name": props.name, "capability": f"{props.major}.{props.minor}", "memory_gb": round(props.total_memory / 1e9, 1),
        "multiprocessors": props.multi_processor_count, "copy_gbps": copy_gbps, "matmul_fp32_tflops": matmul,
    }


def check_environment(training: bool = True) -> dict[str, Any]:
    import torch

    from grader.grade import cuda_available

    nvcc = build.find_nvcc()
    interpreter_ok, interpreter_note = triton_interpreter_works()
    gpu = cuda_available() and torch.cuda.is_available()
    record: dict[str, Any] = {
        "kind": "env", "checked_at": time.time(), "python": platform.python_version(), "platform": platform.platform(),
        "torch": torch.__version__, "torch_cuda": torch.version.cuda, "triton": _version("triton"),
        "ninja": shutil.which("ninja") is not None or _version("ninja") is not None,
        "nvcc": build.nvcc_version(nvcc) if nvcc else None, "nvcc_path": nvcc,
        "driver": driver_version(), "triton_interpreter": interpreter_ok,
        "triton_interpreter_note": "" if interpreter_ok else interpreter_note,
        "gpu": gpu_facts() if gpu else None,
    }
    record["thunderkittens"] = thunderkittens.describe(build.gpu_arch() if gpu else None)
    record["training"] = training_comparison(gpu) if training else None
    record["ready"] = bool(record["triton"]) and (gpu or interpreter_ok)
    record["can_do"] = what_can_run(record)
    return record


def what_can_run(record: dict[str, Any]) -> list[str]:
    if record["gpu"]:
        can = ["Triton and CUDA exercises: build, numerics and timing on the GPU"]
    else:
        can = ["Triton exercises: numerics under the Triton interpreter (no timing)"] if record["triton_interpreter"] else []
        can.append("CUDA exercises: compile check with nvcc's resource report (not run)" if record["nvcc"]
                   else "CUDA exercises: nothing — " + build.NVCC_HINT)
    return can + _thunderkittens_can_run(record)


def _thunderkittens_can_run(record: dict[str, Any]) -> list[str]:
    tk = record.get("thunderkittens") or {}
    if not tk.get("found"):
        return ["ThunderKittens exercises: skipped (not found; see the tk line)"] if tk else []
    if tk["can_run"]:
        return ["ThunderKittens exercises: build, numerics and timing on the GPU"]
    if record["gpu"]:
        return ["ThunderKittens exercises: skipped (" + tk["note"].split(";")[0] + ")"]
    return ["ThunderKittens exercises: compile check for sm_90a (not run)" if record["nvcc"]
            else "ThunderKittens exercises: nothing — " + build.NVCC_HINT]


def format_environment(record: dict[str, Any]) -> str:
    lines = [
        f"python   {record['python']}  ({record['platform']})",
        f"torch    {record['torch']}" + (f" (CUDA {record['torch_cuda']})" if record["torch_cuda"] else " (CPU build)"),
        f"triton   {record['triton'] or 'missing: pip install triton'}"
        + (" — interpreter usable" if record["triton_interpreter"] else f" — interpreter failed: {record['triton_interpreter_note']}"),
        f"nvcc     {record['nvcc'] or 'missing — ' + build.NVCC_HINT}",
        f"ninja    {'yes' if record['ninja'] else 'missing: pip install ninja'}",
        f"driver   {record['driver'] or 'no NVIDIA driver found'}",
    ]
    gpu = record["gpu"]
    if gpu:
        lines.append(f"GPU      {gpu['name']} (compute capability {gpu['capability']}, {gpu['memory_gb']} GB, "
                     f"{gpu['multiprocessors']} SMs)")
        lines.append(f"         measured copy bandwidth {gpu['copy_gbps']:.0f} GB/s, float32 matmul {gpu['matmul_fp32_tflops']:.1f} TFLOP/s")
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


def time_training(device: str, epochs: int = 5, samples: int = 8192, batch: int = 256) -> dict[str, Any]:
    """A few epochs of a small MLP on synthetic data made here (no downloads): a CPU-vs-GPU comparison."""
    import torch
    from torch import nn

    gen = torch.Generator().manual_seed(0)
    features = torch.randn(samples, 256, generator=gen)
    labels = (features @ torch.randn(256, 10, generator=gen)).argmax(dim=1)
    features, labels = features.to(device), labels.to(device)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def epoch() -> float:
        for start in range(0, samples, batch):
            loss = nn.functional.cross_entropy(model(features[start:start + batch]), labels[start:start + batch])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        return loss.detach()

    epoch()  # warm-up: kernel selection and allocation stay out of the timing
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    started = time.perf_counter()
    for _ in range(epochs):
        loss = epoch()
    sync()
    seconds = time.perf_counter() - started
    return {"device": device, "seconds": seconds, "per_epoch_s": seconds / epochs, "final_loss": float(loss)}


def training_comparison(gpu: bool, epochs: int = 5) -> dict[str, Any]:
    runs = [time_training("cpu", epochs)] + ([time_training("cuda", epochs)] if gpu else [])
    return {
        "description": f"A 3-layer MLP (256-512-512-10, AdamW) on 8,192 synthetic samples, batch 256, {epochs} epochs "
                       "after one warm-up epoch.",
        "epochs": epochs, "runs": runs,
        "speedup": runs[0]["seconds"] / runs[1]["seconds"] if len(runs) == 2 else None,
    }
