"""ThunderKittens (TK): a header-only C++ library a learner clones; the kit finds it through KCOURSE_TK_ROOT.

TK is on no package index and the kit never ships its headers. A variant that declares
`requires = ["thunderkittens"]` is built with the flags the library needs (C++20, its include folders, Hopper's
sm_90a); without a clone, or on a GPU that is not a Hopper, its build is reported skipped with what to do —
never failed, never passed (the same path as a missing cuBLAS, build.build_shared_library)."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

ENV_VAR = "KCOURSE_TK_ROOT"
REPOSITORY = "https://github.com/HazyResearch/ThunderKittens"
HOPPER_ARCH = "sm_90a"  # wgmma, TMA and setmaxnreg are sm_90a features: code built for them runs on sm_90 only
SETUP_HINT = (
    f"ThunderKittens was not found: `git clone {REPOSITORY}` and `export {ENV_VAR}=/path/to/ThunderKittens` "
    "(the folder holding include/kittens.cuh), then grade again; `kcourse env-check` says what it found"
)
# The flags of the repository's kernels/common.mk for Hopper, less -O3 and -arch (the kit's build sets those).
FLAGS = ["-std=c++20", "--expt-extended-lambda", "--expt-relaxed-constexpr", "-DKITTENS_HOPPER"]
_DRIVER_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib/wsl/lib")


@dataclass
class Installation:
    root: str | None  # None: KCOURSE_TK_ROOT is unset
    found: bool
    version: str = ""  # "2.x" (include/ops/thread, the 2.0 layout) or "1.x" (include/ops/warp)
    commit: str = ""  # the clone's HEAD, or the commit a copy's ORIGIN.md names
    problem: str = ""  # why it is not usable, with what to do

    def to_dict(self) -> dict:
        return asdict(self)


def configured_root() -> Path | None:
    """KCOURSE_TK_ROOT as given; a relative path is taken from the current folder, else from the course root
    (so `KCOURSE_TK_ROOT=.tk` names the course's .tk/ from anywhere)."""
    value = os.environ.get(ENV_VAR, "").strip()
    if not value:
        return None
    path = Path(value).expanduser()
    if path.is_absolute() or path.exists():
        return path.resolve()
    from grader.core.paths import course_root

    return (course_root() / path).resolve()


def find() -> Installation:
    root = configured_root()
    if root is None:
        return Installation(root=None, found=False, problem=f"{ENV_VAR} is not set. " + SETUP_HINT)
    if not (root / "include" / "kittens.cuh").is_file():
        return Installation(
            root=str(root),
            found=False,
            problem=f"{ENV_VAR}={root} holds no include/kittens.cuh: point it at the root of a "
            f"ThunderKittens clone (`git clone {REPOSITORY}`)",
        )
    version = "2.x" if (root / "include" / "ops" / "thread").is_dir() else "1.x"
    return Installation(root=str(root), found=True, version=version, commit=_commit(root))


def _commit(root: Path) -> str:
    if (root / ".git").exists():
        try:
            out = subprocess.run(
                ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, timeout=10
            )
            if out.returncode == 0:
                return out.stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            pass
    origin = root / "ORIGIN.md"  # a copy of the headers that says where it came from
    match = re.search(r"\b([0-9a-f]{40})\b", origin.read_text(errors="replace")) if origin.is_file() else None
    return match.group(1)[:12] if match else ""


def target_arch(gpu_arch: str | None) -> tuple[str | None, str]:
    """(the arch to build for, "" or why this GPU cannot run it). No GPU: a compile check for sm_90a."""
    if gpu_arch is None or gpu_arch in ("sm_90", HOPPER_ARCH):
        return HOPPER_ARCH, ""
    return None, (
        f"this GPU is {gpu_arch}; the ThunderKittens exercises are written for Hopper ({HOPPER_ARCH}: H100, "
        "H200), whose code runs on no other GPU: grade on an H100 or H200 (a machine without a GPU "
        "compile-checks them)"
    )


def build_options(gpu_arch: str | None, nvcc: str) -> tuple[list[str], str | None, str, str]:
    """(nvcc flags, arch, "" or why the build is skipped, a fingerprint of the headers for the build cache)."""
    found = find()
    if not found.found:
        return [], gpu_arch, found.problem, ""
    arch, problem = target_arch(gpu_arch)
    if problem:
        return [], gpu_arch, problem, ""
    root = Path(found.root)
    flags = FLAGS + [f"-I{root / 'include'}", f"-I{root / 'prototype'}"] + libcuda_flags(nvcc)
    return flags, arch, "", f"tk:{root}:{found.commit}:{_newest_header(root)}"


def _newest_header(root: Path) -> int:
    """Headers edited in place (a `git pull`, a local patch) must not reuse an old build."""
    return max((p.stat().st_mtime_ns for p in (root / "include").rglob("*.cuh")), default=0)


def libcuda_flags(nvcc: str) -> list[str]:
    """Link the driver API (TK's TMA descriptors call cuTensorMapEncodeTiled) where the linker can find it: the
    toolkit's stub, else the driver's own library. A toolkit without either still compiles kernels that make
    no driver call; no rpath: at run time the driver's libcuda.so.1 must be the one loaded, never a stub."""
    from grader.core.toolkit import cuda_library_dirs

    dirs = [d / "stubs" for d in cuda_library_dirs(nvcc)] + [Path(d) for d in _DRIVER_DIRS]
    for folder in dirs:
        if (folder / "libcuda.so").exists():
            return [f"-L{folder}", "-lcuda"]
        if (folder / "libcuda.so.1").exists():
            return [f"-L{folder}", "-l:libcuda.so.1"]
    return []


def describe(gpu_arch: str | None) -> dict:
    """For `kcourse env-check`: what was found, and whether this machine can build and run TK exercises."""
    found = find()
    record = found.to_dict()
    if not found.found:
        record["can_run"] = False
        record["note"] = found.problem
        return record
    arch, problem = target_arch(gpu_arch)
    record["can_run"] = gpu_arch is not None and not problem
    record["note"] = problem or (
        f"this GPU ({gpu_arch}) runs them: built for {arch}" if gpu_arch else f"no GPU: compile checks for {arch} only"
    )
    return record


def format_line(record: dict) -> str:
    if not record["found"]:
        return f"tk       not found — {record['note']}"
    commit = f", commit {record['commit']}" if record["commit"] else ""
    return f"tk       ThunderKittens {record['version']}{commit} at {record['root']} — {record['note']}"
