"""Theoretical occupancy from the compiler's resource report: how many blocks of a kernel fit on one SM at
once, how many of the SM's warp slots they fill, and which resource runs out first — the arithmetic of
NVIDIA's occupancy calculator (cuda_occupancy.h).

Registers per thread and static shared memory per block come from ptxas (`-Xptxas -v`); threads per block
from the kernel's `__launch_bounds__` (the most it is launched with; a kernel without one gets no figure
rather than a guess); the SM's limits from its compute capability (CUDA C++ Programming Guide, "Technical
Specifications per Compute Capability": the maximum blocks per SM is in no device property torch reads).
The grader opens no CUDA context, so the limits are looked up by the architecture nvcc compiled for — the
GPU's, or sm_90 without one — and the figure says whose they are."""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass

from grader.core import exprs


@dataclass(frozen=True)
class SmLimits:
    max_warps: int  # resident warps per SM
    max_blocks: int  # resident blocks per SM
    shared_bytes: int  # shared memory per SM with the largest carveout
    reserved_shared: int = 1024  # taken by the system from each block's share (sm_80 on)
    registers: int = 65536  # 32-bit registers per SM, in 4 sub-partitions
    register_unit: int = 256  # registers are given to a warp in multiples of this
    shared_unit: int = 128  # shared memory is given to a block in multiples of this


LIMITS = {
    "sm_70": SmLimits(64, 32, 96 * 1024, reserved_shared=0),
    "sm_75": SmLimits(32, 16, 64 * 1024, reserved_shared=0),
    "sm_80": SmLimits(64, 32, 164 * 1024),
    "sm_86": SmLimits(48, 16, 100 * 1024),
    "sm_87": SmLimits(48, 16, 164 * 1024),
    "sm_89": SmLimits(48, 24, 100 * 1024),
    "sm_90": SmLimits(64, 32, 228 * 1024),
    "sm_100": SmLimits(64, 32, 228 * 1024),
    "sm_120": SmLimits(48, 32, 100 * 1024),
}
FALLBACK = "sm_90"  # the course's reference GPU (H100/H200)
WARP = 32
SUB_PARTITIONS = 4
UNLIMITED = 1 << 30  # a resource the kernel does not use limits nothing


@dataclass
class Occupancy:
    kernel: str
    threads: int  # per block
    blocks: int  # resident per SM
    warps: int  # resident per SM
    max_warps: int
    percent: float
    limited_by: list[str]  # registers, shared memory, threads, blocks (every limit that binds)
    arch: str  # whose limits: the GPU's architecture, or sm_90's

    def to_dict(self) -> dict:
        return asdict(self)


def limits_for(arch: str) -> tuple[str, SmLimits]:
    """The table's entry for `arch` (sm_90a reads as sm_90), or sm_90's for an architecture it lacks."""
    base = re.sub(r"[a-z]$", "", arch or "")
    return (base, LIMITS[base]) if base in LIMITS else (FALLBACK, LIMITS[FALLBACK])


def theoretical(registers: int, shared_bytes: int, threads: int, limits: SmLimits) -> tuple[int, list[str]]:
    """Resident blocks per SM for a kernel of `registers` per thread and `shared_bytes` of shared memory per
    block launched with `threads` per block, and the limits that bind (ties all named)."""
    warps_per_block = math.ceil(threads / WARP)
    per_warp = math.ceil(max(registers, 1) * WARP / limits.register_unit) * limits.register_unit
    warps_by_registers = SUB_PARTITIONS * (limits.registers // SUB_PARTITIONS // per_warp)
    shared = math.ceil((shared_bytes + limits.reserved_shared) / limits.shared_unit) * limits.shared_unit
    by = {
        "registers": warps_by_registers // warps_per_block,
        "shared memory": limits.shared_bytes // shared if shared_bytes else UNLIMITED,
        "threads": limits.max_warps // warps_per_block,
        "blocks": limits.max_blocks,
    }
    blocks = min(by.values())
    return blocks, [name for name, count in by.items() if count == blocks]


def of_kernel(resource: dict, threads: int, arch: str) -> Occupancy:
    """The occupancy of one kernel of build.parse_resources' report, launched with `threads` per block."""
    whose, limits = limits_for(arch)
    blocks, limited_by = theoretical(resource["registers"], resource["smem_bytes"], threads, limits)
    warps = blocks * math.ceil(threads / WARP)
    return Occupancy(
        kernel=resource["kernel"],
        threads=threads,
        blocks=blocks,
        warps=warps,
        max_warps=limits.max_warps,
        percent=round(100 * warps / limits.max_warps, 1),
        limited_by=limited_by,
        arch=whose,
    )


# --- threads per block from the source -------------------------------------------------------------

_BOUNDS = re.compile(
    r"__global__[^;{}()]*?__launch_bounds__\s*\((?P<threads>[^,()]+)[^()]*\)[^;{}()]*?\b(?P<name>\w+)\s*\("
)
_BOUNDS_FIRST = re.compile(
    r"__launch_bounds__\s*\((?P<threads>[^,()]+)[^()]*\)[^;{}()]*?__global__[^;{}()]*?\b(?P<name>\w+)\s*\("
)
_DEFINE = re.compile(r"^\s*#define\s+(?P<name>\w+)\s+(?P<value>[^\n]+?)\s*(?://.*)?$", re.M)
_CONSTEXPR = re.compile(r"\b(?:constexpr|const)\b[\w\s]*?\b(?P<name>\w+)\s*=\s*(?P<value>[^;{}\n]+);")


def _number(text: str, names: dict[str, float]) -> int | None:
    """A whole number from a constant's text (128, (4 * 32), 256u, THREADS), or None."""
    try:
        return exprs.evaluate_int(re.sub(r"\b(\d+)[uUlL]+\b", r"\1", text.strip()), names)
    except (ValueError, SyntaxError, TypeError, ZeroDivisionError):
        return None


def launch_bounds(source_text: str) -> dict[str, int]:
    """Kernel name -> the threads of its __launch_bounds__, where the source states a number (or a #define or
    constexpr of one); a template parameter cannot be read and is left out."""
    names: dict[str, float] = {}
    for match in sorted([*_DEFINE.finditer(source_text), *_CONSTEXPR.finditer(source_text)], key=lambda m: m.start()):
        value = _number(match["value"], names)
        if value is not None:
            names[match["name"]] = value
    found = {}
    for pattern in (_BOUNDS, _BOUNDS_FIRST):
        for match in pattern.finditer(source_text):
            threads = _number(match["threads"], names)
            if threads is not None and 1 <= threads <= 1024:
                found[match["name"]] = threads
    return found


def kernel_name(demangled: str) -> str:
    """`void flip<4>(float const*, int)` -> `flip`: the identifier a source declares."""
    head = re.sub(r"<[^()]*>", "", demangled.split("(")[0])
    words = re.findall(r"\w+", head)
    return words[-1] if words else demangled


def describe(resources: list[dict], source_text: str, arch: str, gpu: bool) -> tuple[str, list[dict]]:
    """Lines for the build check, one per kernel whose __launch_bounds__ states its block size (no guess for
    the others), and the figures as data."""
    bounds = launch_bounds(source_text)
    lines, figures = [], []
    for resource in resources:
        threads = bounds.get(kernel_name(resource["kernel"]))
        if threads is None:
            continue
        figure = of_kernel(resource, threads, arch)
        figures.append(figure.to_dict())
        lines.append(_line(figure, resource, arch, gpu))
    if lines and "extern __shared__" in source_text:
        lines.append(
            "(occupancy counts static shared memory only: the dynamic amount is set at launch, unknown to the compiler)"
        )
    return ("\n" + "\n".join(lines) if lines else ""), figures


def _line(figure: Occupancy, resource: dict, arch: str, gpu: bool) -> str:
    whose = (
        f"this GPU's {arch} limits"
        if gpu and figure.arch == arch
        else f"{figure.arch}'s limits" + ("" if figure.arch == arch else f": {arch} is not in the table")
    )
    name = kernel_name(resource["kernel"])
    if figure.blocks == 0:
        return (
            f"occupancy of {name}: a block of {figure.threads} threads (its __launch_bounds__) does not fit on an SM with "
            f"{resource['registers']} registers per thread and {resource['smem_bytes']} B shared memory ({whose}): "
            "the launch fails"
        )
    why = {
        "registers": f"registers ({resource['registers']} per thread)",
        "shared memory": f"shared memory ({resource['smem_bytes']} B per block)",
        "threads": f"threads ({figure.max_warps} warps per SM)",
        "blocks": f"blocks ({figure.blocks} per SM)",
    }
    return (
        f"occupancy of {name}: {figure.blocks} blocks of {figure.threads} threads (its __launch_bounds__) per SM → "
        f"{figure.warps} of {figure.max_warps} warps = {figure.percent:g}% (limited by "
        f"{' and '.join(why[limit] for limit in figure.limited_by)}; {whose})"
    )
