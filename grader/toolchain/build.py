"""Compiling the learner's CUDA: nvcc through ninja, cached by the hash of sources, flags and compiler.

A raw CUDA exercise becomes a shared library loaded with ctypes: a cold build is one nvcc call
(about a second for a small kernel), a cache hit in a new process is a file lookup. Without a GPU nothing
built here can run, so a grade compiles the kernels alone (-cubin, half the time): nvcc's errors and ptxas's
report, the learner's feedback there; the CPU emulator compiles the host code itself. Torch operator
exercises are built with torch's extension builder (also ninja) inside the sandboxed child, because
loading them runs the learner's static initialisers.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from grader.core import gpu_lock
from grader.core.paths import build_cache_dir
from grader.core.toolkit import c_parameter_count, cuda_library_dirs
from grader.core.vocabulary import Code

PTXAS_REPORT = "ptxas.txt"  # beside each cached build: ptxas's resource report, read again on a cache hit
DEFAULT_ARCH = "sm_90"  # compile checks without a GPU target the course's reference GPU (H100/H200)
BUILD_TIMEOUT_S = 300
NVCC_HINT = (
    "nvcc (the CUDA compiler) was not found: install the CUDA Toolkit "
    "(https://developer.nvidia.com/cuda-downloads, or `pip install nvidia-cuda-nvcc-cu12`) "
    "and put its bin/ on PATH or set CUDA_HOME."
)


@dataclass
class BuildResult:
    ok: bool
    seconds: float
    cached: bool = False
    library: str | None = None
    arch: str = ""
    log: str = ""  # compiler errors, rewritten as file:line
    resources: list[dict] = field(default_factory=list)  # per kernel: registers, spills, smem, stack
    skipped: bool = False  # the machine, not the learner's code, stopped the build
    skip_code: str = ""  # why it was skipped: library_missing (a spec's `link`), requirement_missing (`requires`)

    def to_dict(self) -> dict:
        return asdict(self)


def find_nvcc() -> str | None:
    candidates = [shutil.which("nvcc")]
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            candidates.append(str(Path(os.environ[env]) / "bin" / "nvcc"))
    candidates.append("/usr/local/cuda/bin/nvcc")
    return next((c for c in candidates if c and Path(c).exists()), None)


def nvcc_version(nvcc: str) -> str:
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=30).stdout
    match = re.search(r"release ([\d.]+)", out)
    return match.group(1) if match else out.strip().splitlines()[-1] if out.strip() else "unknown"


@functools.lru_cache(maxsize=None)  # asked several times a grade, a field or two; the GPU does not change under us
def _first_gpu(field: str) -> str:
    """nvidia-smi's `field` for the first visible GPU ("" without one), so the grader never opens CUDA."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return ""
    try:
        out = subprocess.run(
            [smi, f"--query-gpu={field}", "--format=csv,noheader"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip().splitlines()[0].strip() if out.returncode == 0 and out.stdout.strip() else ""


def gpu_arch() -> str | None:
    """The present GPU's sm_XY."""
    first = _first_gpu("compute_cap")
    return "sm_" + first.replace(".", "") if re.fullmatch(r"\d+\.\d+", first) else None


def gpu_name() -> str | None:
    """The present GPU's name as the driver gives it ("NVIDIA H100 80GB HBM3"): what torch reports and what
    calibration.json is keyed by."""
    return _first_gpu("name") or None


def _source_key(sources: list[Path], flags: list[str], compiler: str) -> str:
    digest = hashlib.sha256()
    for source in sources:
        digest.update(source.read_bytes())
        for header in sorted(source.parent.glob("*.cuh")) + sorted(source.parent.glob("*.h")):
            digest.update(header.name.encode() + header.read_bytes())
    digest.update(" ".join(flags).encode() + compiler.encode())
    return digest.hexdigest()[:20]


def build_shared_library(
    source: Path,
    arch: str | None = None,
    nvcc: str | None = None,
    defines: dict[str, object] | None = None,
    link: list[str] | None = None,
    requires: list[str] | None = None,
    device_only: bool = False,
) -> BuildResult:
    """Compile one .cu file to a shared library for `arch` (default: sm_90), reusing a cached build.
    `defines` become -DNAME=VALUE (how `kcourse tune` tries a CUDA exercise's compile-time block sizes);
    `link` names CUDA libraries to link (a spec's `link = ["cublas"]`, see link_flags); `requires` names
    libraries found through a setting (a spec's `requires = ["thunderkittens"]`, see requirement_options).
    `device_only`: the kernels alone, to a cubin (no library: `library` stays None), for a machine without a GPU,
    where no host library could run (the CPU emulator compiles the host code itself): nvcc's errors and ptxas's
    report in half the time (no host compile, no link)."""
    started = time.perf_counter()
    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        return BuildResult(ok=False, seconds=0.0, arch=arch or DEFAULT_ARCH, log=NVCC_HINT)
    extra, arch, unmet, fingerprint = requirement_options(requires or [], arch, nvcc)
    arch = arch or DEFAULT_ARCH
    library_flags, missing = link_flags(link or [], nvcc)
    if unmet or missing:
        return _unbuildable(arch, unmet, missing)
    flags = _nvcc_flags(arch, extra, defines, [] if device_only else library_flags, device_only)
    out_dir = build_cache_dir() / _source_key([source], flags, nvcc_version(nvcc) + nvcc + fingerprint)
    name = "kernels.cubin" if device_only else "lib.so"
    library = out_dir / name
    if library.exists():
        result = _cached(out_dir, arch, started)
        result.library = None if device_only else str(library)
        return result
    out_dir.mkdir(parents=True, exist_ok=True)
    with _locked(out_dir):  # several graders (grade-batch) may build the same source at once
        if library.exists():
            return build_shared_library(source, arch, nvcc, defines, link, requires, device_only)
        return _compile(out_dir, nvcc, flags, source, name, arch, started, keep_library=not device_only)


def _unbuildable(arch: str, unmet: str, missing: list[str]) -> BuildResult:
    """A build skipped before nvcc runs: a requirement (ThunderKittens) or a library (cuBLAS) is not here."""
    if unmet:
        return BuildResult(
            ok=False, seconds=0.0, arch=arch, skipped=True, skip_code=Code.REQUIREMENT_MISSING, log=unmet
        )
    log = missing_library_message(missing)
    return BuildResult(ok=False, seconds=0.0, arch=arch, skipped=True, skip_code=Code.LIBRARY_MISSING, log=log)


def _cached(out_dir: Path, arch: str, started: float) -> BuildResult:
    """A build found whole in the cache, with the ptxas report it was built with."""
    report = out_dir / PTXAS_REPORT
    resources = parse_resources(report.read_text() if report.exists() else "")
    return BuildResult(ok=True, seconds=time.perf_counter() - started, cached=True, arch=arch, resources=resources)


def _errors_or_hint(log: str, source: Path, out_dir: Path, by_hand: list[str]) -> str:
    """nvcc's errors at the learner's lines (its whole output kept beside the build), or, where it printed none
    the learner can read, the command to run the same compile by hand."""
    errors = format_compiler_errors(log, source, fallback=False, full_log=_keep_log(out_dir, log))
    return errors or silent_compiler_hint(by_hand)


def _nvcc_flags(
    arch: str, extra: list[str], defines: dict[str, object] | None, library_flags: list[str], device_only: bool
) -> list[str]:
    """nvcc's flags: optimised, C++17 (or a required library's own standard: `extra`), line info and ptxas's
    resource report, for `arch`; a cubin of the kernels alone, or a shared library linking `library_flags`."""
    output = ["-cubin"] if device_only else ["-shared", "-Xcompiler", "-fPIC"]
    flags = ["-O3", "-std=c++17", *arch_flags(arch), "-lineinfo", "-Xptxas", "-v", *output]
    if extra:  # the library's own language standard replaces the kit's
        flags = [f for f in flags if not f.startswith("-std=")] + extra
    flags += [f"-D{name}={value}" for name, value in sorted((defines or {}).items())]
    return flags + library_flags


def _compile(
    out_dir: Path, nvcc: str, flags: list[str], source: Path, name: str, arch: str, started: float, keep_library: bool
) -> BuildResult:
    """nvcc through ninja into out_dir (its lock held); the output lands under its final name only when whole."""
    ok, log = _run_ninja(out_dir, nvcc, flags, source, name)
    result = BuildResult(ok=ok, seconds=time.perf_counter() - started, arch=arch, resources=parse_resources(log))
    library = out_dir / name
    if ok:
        (out_dir / PTXAS_REPORT).write_text(log)
        os.replace(out_dir / f"partial.{name}", library)  # a build cut short never looks finished
        result.library = str(library) if keep_library else None
    else:
        by_hand = [nvcc, *flags, "-o", f"/tmp/{source.stem}{Path(name).suffix}", str(source.resolve())]
        result.log = _errors_or_hint(log, source, out_dir, by_hand)
    return result


def build_variant(
    source: Path, variant, arch: str | None, defines: dict[str, object] | None = None, device_only: bool = False
) -> BuildResult:
    """A CUDA exercise's file built as its spec says (the libraries it links, what it requires). The grade, the
    early build of `kcourse grade` and the capstone all build through here, so they share one cache key;
    `kcourse tune` adds the configuration's `defines`; a grade without a GPU builds the kernels alone."""
    return build_shared_library(
        source, arch, defines=defines, link=variant.link, requires=variant.requires, device_only=device_only
    )


def arch_flags(arch: str) -> list[str]:
    """nvcc's target flags. An arch-specific target (sm_90a: wgmma, TMA multicast, setmaxnreg, which ThunderKittens
    uses) is named as its virtual and real architecture together: nvcc 13 reads -arch=sm_90a as sm_90a code plus
    compute_90 PTX, and that generic PTX cannot hold those instructions (ptxas: "not supported on .target sm_90")."""
    if arch.startswith("sm_") and arch.endswith("a"):
        return [f"-gencode=arch=compute_{arch[3:]},code={arch}"]
    return [f"-arch={arch}"]


def _keep_log(out_dir: Path, log: str) -> Path:
    """The compiler's whole output beside the build, for the summary to point at."""
    path = out_dir / "nvcc.log"
    path.write_text(log)
    return path


def requirement_options(requires: list[str], arch: str | None, nvcc: str) -> tuple[list[str], str | None, str, str]:
    """For a spec's `requires` (header libraries a learner installs and points the kit at, spec.REQUIREMENTS):
    (extra nvcc flags, the arch to build for, "" or why the build is skipped and what to do, a fingerprint of
    the library for the cache key). `arch` None: no GPU here (a compile check)."""
    if "thunderkittens" not in requires:
        return [], arch, "", ""
    from grader.toolchain import thunderkittens

    return thunderkittens.build_options(arch, nvcc)


def link_flags(names: list[str], nvcc: str) -> tuple[list[str], list[str]]:
    """nvcc flags linking each library of `names` (-L, -l, an rpath so the grader's child finds it at load
    time, and the include/ beside it for the headers), and the names found nowhere. A pip wheel ships only
    the versioned file (libcublas.so.13): that one is linked by its file name."""
    flags, missing = [], []
    for name in names:
        found = next(
            (
                (d, f)
                for d in cuda_library_dirs(nvcc)
                for f in [d / f"lib{name}.so", *sorted(d.glob(f"lib{name}.so.*"))]
                if f.exists()
            ),
            None,
        )
        if found is None:
            missing.append(name)
            continue
        folder, file = found
        include = folder.parent / "include"
        flags += [f"-I{include}"] if include.is_dir() else []
        flags += [
            f"-L{folder}",
            "-Xlinker",
            f"-rpath={folder}",
            f"-l{name}" if file.name == f"lib{name}.so" else f"-l:{file.name}",
        ]
    return flags, missing


def missing_library_message(names: list[str]) -> str:
    """The machine, not the learner, lacks a library the exercise links: say what to install."""
    listed = ", ".join(f"lib{n}" for n in names)
    return (
        f"this machine has no {listed} (the exercise's spec links it): the CUDA Toolkit here lacks it. Install the "
        f"full CUDA Toolkit, or NVIDIA's wheel (`pip install nvidia-{names[0]}` for CUDA 13, nvidia-{names[0]}-cu12 for "
        "CUDA 12), then grade again"
    )


@contextlib.contextmanager
def _locked(folder: Path):
    """One build of `folder` at a time; a process holding the GPU alone lets it go while it builds (gpu_lock)."""
    with gpu_lock.set_aside(), open(folder / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run_ninja(out_dir: Path, nvcc: str, flags: list[str], source: Path, name: str) -> tuple[bool, str]:
    (out_dir / "build.ninja").write_text(
        "rule nvcc\n"
        f"  command = {nvcc} {' '.join(flags)} -o $out $in\n"
        "  description = nvcc $in\n"
        f"build partial.{name}: nvcc {source.resolve()}\n"
    )
    ninja = shutil.which("ninja") or str(Path(sys.executable).parent / "ninja")
    try:
        proc = subprocess.run([ninja, "-C", str(out_dir)], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return False, f"the compiler ran past {BUILD_TIMEOUT_S} s and was stopped"
    except FileNotFoundError:
        return False, "ninja was not found: pip install ninja"
    return proc.returncode == 0, proc.stdout + proc.stderr


_NVCC_COMMAND_MARKER = " -Xptxas -v "  # ninja echoes the failing command line: not for the learner
_NVCC_LOCATION = re.compile(r"^(?P<path>[^\s:()]+\.(?:cu|cuh|h|cpp))\((?P<line>\d+)\): ", re.M)


def format_compiler_errors(log: str, source: Path, fallback: bool = True, full_log: Path | None = None) -> str:
    """nvcc writes `/abs/x.cu(42): error: ...`; show `x.cu:42: error: ...` and drop ninja's noise. An error
    inside a template library (ThunderKittens) is summarised at the learner's line (nvcc_errors.condense), the
    whole output left at `full_log`. When the compiler itself said nothing (only ninja's lines, or no output at
    all): the raw log's end, or "" with fallback=False (the caller then says how to run nvcc by hand)."""
    from grader.toolchain import nvcc_errors

    condensed = nvcc_errors.condense(log, source, full_log)
    if condensed:
        return condensed
    text = _NVCC_LOCATION.sub(lambda m: f"{Path(m['path']).name}:{m['line']}: ", log)
    keep = [
        line
        for line in text.splitlines()
        if line.strip()
        and not line.startswith(("ninja:", "[", "FAILED:", "ptxas info", "    0 bytes stack"))
        and _NVCC_COMMAND_MARKER not in line
    ]
    more = [f"... {len(keep) - 60} more lines" + (f"; the whole compiler output: {full_log}" if full_log else "")]
    shown = "\n".join(keep[:60] + (more if len(keep) > 60 else []))
    return nvcc_errors.mark_line_before(shown, source) if shown else (text.strip()[-3000:] if fallback else "")


def silent_compiler_hint(command: list[str]) -> str:
    """What to do when nvcc failed without a word (killed for memory, say): run it by hand."""
    return (
        "nvcc stopped without printing an error (killed for lack of memory, or a broken toolkit?): "
        f"run it by hand to see why: {shlex.join(command)}"
    )


def first_error(log: str) -> str:
    """The compiler's first error line (fix that one first: later errors often follow from it)."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    return next((line for line in lines if re.search(r"\berror\b|\bfatal\b", line)), lines[0] if lines else "")


def failure_message(source: Path, log: str) -> str:
    """`x.cu did not compile: <first error>` then the whole log: the verdict's one line names the error."""
    head = first_error(log) or "the compiler printed nothing; compile it by hand to see why"
    return f"{source.name} did not compile: {head}\n{log}".rstrip()


_ENTRY = re.compile(r"Compiling entry function '(?P<name>[^']+)' for '(?P<arch>\w+)'")
_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")


def missing_toolkit_header(log: str, source: Path) -> str | None:
    """A header missing from the toolkit or torch (not from the learner's file) is the machine's fault."""
    for match in re.finditer(r"^(?P<file>[^\s:]+):\d+:\d+: fatal error: (?P<header>[\w./]+): No such file", log, re.M):
        if Path(match["file"]).name != source.name:
            return match["header"]
    return None


def parse_resources(ptxas_log: str) -> list[dict]:
    """Per kernel: registers, shared memory, stack frame and spills from `nvcc -Xptxas -v`."""
    kernels: list[dict] = []
    for line in ptxas_log.splitlines():
        if m := _ENTRY.search(line):
            kernels.append(
                {
                    "kernel": demangle(m["name"]),
                    "arch": m["arch"],
                    "registers": 0,
                    "smem_bytes": 0,
                    "stack_bytes": 0,
                    "spill_stores": 0,
                    "spill_loads": 0,
                }
            )
        elif kernels and (m := _STACK.search(line)):
            kernels[-1].update(stack_bytes=int(m[1]), spill_stores=int(m[2]), spill_loads=int(m[3]))
        elif kernels and (m := _USED.search(line)):
            kernels[-1].update(registers=int(m[1]), smem_bytes=int(m[2] or 0))
    return kernels


def demangle(name: str) -> str:
    cxxfilt = shutil.which("c++filt")
    if not cxxfilt or not name.startswith("_Z"):
        return name
    try:
        return subprocess.run([cxxfilt, name], capture_output=True, text=True, timeout=5).stdout.strip() or name
    except (OSError, subprocess.TimeoutExpired):
        return name


def format_resources(resources: list[dict]) -> str:
    if not resources:
        return "no kernels found in the compiler's report"
    lines = []
    for k in resources:
        spills = k["spill_stores"] + k["spill_loads"]
        lines.append(
            f"{k['kernel']} ({k['arch']}): {k['registers']} registers, {k['smem_bytes']} B shared memory, "
            f"{k['stack_bytes']} B stack" + (f", {spills} B spilled (slow local memory)" if spills else ", no spills")
        )
    return "\n".join(lines)


def torch_op_compile_flags() -> list[str]:
    """Include paths and defines to compile a torch operator source with plain nvcc (compile check)."""
    import sysconfig

    from torch.utils.cpp_extension import include_paths

    includes = include_paths() + [sysconfig.get_paths()["include"]]
    return [f"-I{p}" for p in includes] + ["-DTORCH_EXTENSION_NAME=kcourse_check", "-D_GLIBCXX_USE_CXX11_ABI=1"]


def compile_check_torch_op(source: Path, arch: str | None = None) -> BuildResult:
    """Without a GPU: compile an operator source against torch's headers, with ptxas's report. The device pass
    alone (-cubin): nvcc's CUDA front end reads the whole file, host code included (its errors are reported),
    and the kernels are compiled; the host compiler's own pass, half the time of a check, is left to the
    operator's build on a GPU."""
    started = time.perf_counter()
    nvcc = find_nvcc()
    arch = arch or DEFAULT_ARCH
    if nvcc is None:
        return BuildResult(ok=False, seconds=0.0, arch=arch, log=NVCC_HINT)
    flags = ["-O3", "-std=c++17", f"-arch={arch}", "-Xptxas", "-v", "-cubin"] + torch_op_compile_flags()
    out_dir = build_cache_dir() / ("check-" + _source_key([source], flags, nvcc))
    if (out_dir / PTXAS_REPORT).exists():
        return _cached(out_dir, arch, started)
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        proc = subprocess.run(
            [nvcc, *flags, "-o", str(out_dir / "op.cubin"), str(source.resolve())],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return BuildResult(ok=False, seconds=BUILD_TIMEOUT_S, arch=arch, log="the compiler ran past its time limit")
    log = proc.stdout + proc.stderr
    result = BuildResult(
        ok=proc.returncode == 0, seconds=time.perf_counter() - started, arch=arch, resources=parse_resources(log)
    )
    missing = missing_toolkit_header(log, source)
    if missing:
        result.log = (
            f"this machine's CUDA toolkit lacks {missing}, which torch's CUDA headers include: "
            "the operator cannot be compile-checked here (install the full CUDA Toolkit)"
        )
        result.skipped = True
    elif result.ok:
        (out_dir / PTXAS_REPORT).write_text(log)
    else:
        result.log = _errors_or_hint(
            log, source, out_dir, [nvcc, *flags, "-o", f"/tmp/{source.stem}.cubin", str(source.resolve())]
        )
    return result


def exported_symbols(library: Path) -> set[str] | None:
    """Names the shared library exports, read with nm (never by loading it: that would run the
    learner's static initialisers in the grader's process). None when nm is missing."""
    nm = shutil.which("nm")
    if nm is None:
        return None
    listed = subprocess.run([nm, "-D", "--defined-only", str(library)], capture_output=True, text=True)
    if listed.returncode != 0:
        return None
    return {line.split()[-1] for line in listed.stdout.splitlines() if line.split()}


def check_entry_point(library: Path | None, source: Path, entry: str, n_args: int) -> tuple[str, str] | None:
    """(code, message) when the compiled file lacks the `extern "C"` entry point or its parameter
    count is not the stub's; checked on any machine, GPU or not (from the source text where no library was
    built: a compile-only check without a GPU)."""
    text = source.read_text(errors="replace")
    symbols = exported_symbols(library) if library is not None else None
    if library is None and not (re.search(rf"\b{re.escape(entry)}\s*\(", text) and 'extern "C"' in text):
        return Code.MISSING_ENTRY, (
            f'{source.name} defines no `extern "C"` function `{entry}`: keep `extern "C"` and the '
            "stub's function name and signature"
        )
    if symbols is not None and entry not in symbols:
        mangled = sorted(s for s in symbols if entry in s)
        note = f' (found {mangled[0]}: a C++ name — is `extern "C"` missing?)' if mangled else ""
        return Code.MISSING_ENTRY, (
            f'{source.name} does not export `{entry}`{note}: keep `extern "C"` and the '
            "stub's function name and signature"
        )
    declared = c_parameter_count(text, entry)
    if declared is not None and declared != n_args:
        return Code.BAD_SIGNATURE, (
            f"{source.name}: `{entry}` takes {declared} parameters; the grader passes {n_args}: "
            "keep the stub's signature"
        )
    return None
