"""What compute-sanitizer runs: the learner's entry point, once, on one small case (see sanitize.py).

`python -m grader.child.sanitize_run job.json`. A raw CUDA library (kinds cuda and cuda_host) is called
through ctypes with buffers made by the CUDA driver API, without torch: no kernel but the learner's runs,
so every hazard reported is theirs, and a run takes a fraction of a second. Triton and torch_op need
torch; PYTORCH_NO_CUDA_MEMORY_CACHING (set by the parent) gives each tensor its own allocation so that
memcheck sees an access past a tensor's end. Verdicts are not decided here: the tool's log is."""

from __future__ import annotations

import ctypes
import json
import os
import sys
from pathlib import Path

_SCALARS = {"int32": ctypes.c_int, "int64": ctypes.c_int64, "float32": ctypes.c_float, "float64": ctypes.c_double}


class Driver:
    """The few CUDA driver calls a raw run needs, on the device's primary context (the one the
    learner's statically linked CUDA runtime uses too)."""

    def __init__(self):
        self.cuda = ctypes.CDLL("libcuda.so.1")
        self._ok(self.cuda.cuInit(0), "cuInit")
        self.device, self.context = ctypes.c_int(), ctypes.c_void_p()
        self._ok(self.cuda.cuDeviceGet(ctypes.byref(self.device), 0), "cuDeviceGet")
        self._ok(
            self.cuda.cuDevicePrimaryCtxRetain(ctypes.byref(self.context), self.device), "cuDevicePrimaryCtxRetain"
        )
        self._ok(self.cuda.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    def _ok(self, status: int, call: str) -> None:
        if status != 0:
            raise RuntimeError(f"{call} failed with CUDA driver error {status}")

    def upload(self, data: bytes) -> ctypes.c_void_p:
        pointer = ctypes.c_uint64()
        self._ok(self.cuda.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(max(len(data), 1))), "cuMemAlloc")
        self._ok(self.cuda.cuMemcpyHtoD_v2(pointer, data, ctypes.c_size_t(len(data))), "cuMemcpyHtoD")
        return ctypes.c_void_p(pointer.value)

    def synchronize(self) -> None:
        self._ok(self.cuda.cuCtxSynchronize(), "cuCtxSynchronize")

    def free(self, pointer: ctypes.c_void_p) -> None:
        self.cuda.cuMemFree_v2(ctypes.c_uint64(pointer.value))

    def reset(self) -> None:
        """Destroys the primary context: memcheck's leak check runs when a context ends."""
        self.cuda.cuDevicePrimaryCtxReset_v2(self.device)


def run_raw(job: dict, driver: Driver) -> None:
    library = ctypes.CDLL(job["library"])
    entry = getattr(library, job["entry"])
    entry.restype = None
    from grader.kinds import kind_named

    host = kind_named(job["kind"]).host_side
    args, device_buffers, keep = [], [], []
    for arg in job["args"]:
        if arg["kind"] == "scalar":
            args.append(_SCALARS[arg["ctype"]](arg["value"]))
            continue
        data = Path(arg["path"]).read_bytes()
        if host:  # the learner's host code allocates and copies; it gets host memory
            buffer = ctypes.create_string_buffer(data, len(data))
            keep.append(buffer)
            args.append(ctypes.cast(buffer, ctypes.c_void_p))
        else:
            pointer = driver.upload(data)
            device_buffers.append(pointer)
            args.append(pointer)
    entry(*args)
    driver.synchronize()
    for pointer in device_buffers:
        driver.free(pointer)
    driver.reset()


def run_torch(job: dict) -> None:
    import torch

    from grader.checks.inputs import load_tensor, make_outputs
    from grader.child.loading import load
    from grader.core.spec import Case, load_spec

    spec = load_spec(Path(job["spec_folder"]))
    variant = spec.variant(job["lang"])
    case = Case(params=job["params"])
    tensors = {name: load_tensor(meta).cuda() for name, meta in job["inputs"].items()}
    tensors.update(make_outputs(spec, case, "cuda", tensors))
    if job["kind"] == "triton":
        autotune_once()
    caller = load(variant, Path(job["source"]), None, "learner")
    caller(tensors, case.params)
    torch.cuda.synchronize()


def autotune_once() -> None:
    """Under the sanitizer, Triton's autotuner runs each config once instead of benchmarking it: every config
    still runs under the tool (the grade's own autotuning runs each of them too), but once, not the dozens of
    times `do_bench` takes to time it, and without `do_bench` zeroing its 256 MB cache-flush buffer before each.
    With no timings the first config is kept; nothing is written to (or read from) the on-disk autotune
    cache that the grade itself uses."""
    from triton.runtime.autotuner import Autotuner

    def run_once(kernel_call, quantiles=None):
        kernel_call()
        return [1.0, 1.0, 1.0] if quantiles else 1.0

    # a property that ignores sets: older Tritons assign self.do_bench in __init__, newer ones cache it
    Autotuner.do_bench = property(lambda self: run_once, lambda self, value: None)
    Autotuner.check_disk_cache = lambda self, tuning_key, configs, bench_fn: bench_fn() or False


def main() -> int:
    job = json.loads(Path(sys.argv[1]).read_text())
    from grader.kinds import kind_named

    raw = kind_named(job["kind"]).nvcc
    driver = Driver() if raw else _torch_on_the_gpu()
    enter_box(job)
    run_raw(job, driver) if raw else run_torch(job)
    return 0


def _torch_on_the_gpu() -> None:
    import torch

    torch.zeros(1, device="cuda")


def enter_box(job: dict) -> None:
    """The grade's box (box.py), once CUDA is up: under compute-sanitizer, cuInit fails inside it (error 304, its
    tools' connection being made then); learner code loads only after this."""
    if not job.get("box"):
        return
    from grader.child import box

    box.enter(box.Policy(**job["box"]))
    if job.get("box_home"):
        os.environ.update(TRITON_CACHE_DIR=os.path.join(job["box_home"], "triton"), TRITON_HOME=job["box_home"])


if __name__ == "__main__":
    sys.exit(main())
