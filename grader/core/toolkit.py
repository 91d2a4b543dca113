"""Facts about the CUDA toolkit and C sources that the build, the loaders and the header libraries share:
where the toolkit's libraries lie, and how many parameters a C entry point declares. It imports nothing
of the grader, so every module that builds or loads CUDA can use it."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path


def cuda_library_dirs(nvcc: str) -> list[Path]:
    """Folders that may hold a CUDA library: the toolkit's (beside nvcc, CUDA_HOME, /usr/local/cuda), then
    NVIDIA's pip wheels on sys.path (nvidia/cu13/lib, nvidia/cublas/lib: the cuBLAS a CUDA torch installs)."""
    roots = (
        [Path(nvcc).resolve().parent.parent]
        + [Path(os.environ[e]) for e in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(e)]
        + [Path("/usr/local/cuda")]
    )
    dirs = [d for root in roots for d in (root / "lib64", root / "lib", *sorted(root.glob("targets/*/lib")))]
    dirs += [
        d for entry in sys.path if entry and Path(entry).is_dir() for d in sorted(Path(entry).glob("nvidia/*/lib"))
    ]
    return list(dict.fromkeys(d for d in dirs if d.is_dir()))


def c_parameter_count(source_text: str, entry: str) -> int | None:
    """Parameters of `extern "C" ... entry(...)` as written in the source (None when not found)."""
    match = re.search(r"extern\s+\"C\"[^;{(]*\b" + re.escape(entry) + r"\s*\(([^)]*)\)", source_text)
    if not match:
        return None
    params = match.group(1).strip()
    return 0 if params in ("", "void") else params.count(",") + 1
