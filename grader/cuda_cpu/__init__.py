"""CUDA kernels on the CPU, with CUDA's semantics: the numerics of a CUDA exercise on a machine without an
NVIDIA GPU.

The learner's .cu file is compiled by the host C++ compiler with include/kcourse_cuda_cpu.h forced in (fibers
per thread, barriers, warps of 32, atomics, the runtime API) and AddressSanitizer, after a line-preserving
rewrite of its launches (`k<<<g, b>>>(args)` -> `::kcuda::site(...k...) | ::kcuda::Config(g, b)(args)`: through
k's function pointer, or a call where k is an overload set or a template to deduce) and of its dynamic shared
memory declarations. The grading child loads the library as it loads nvcc's on a GPU (the ASan runtime preloaded,
LD_PRELOAD) and the numerics are judged as on a GPU. This module runs in the trusted grader: it decides what can
be emulated, builds, and reads a stopped child's output (explain). docs/cuda-on-cpu.md says what is covered."""

from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import subprocess
import time
from functools import lru_cache
from pathlib import Path

from grader.core.vocabulary import Code

INCLUDE = Path(__file__).parent / "include"
SEED_ENV = "KCOURSE_CUDA_CPU_SEED"  # the fibers' schedule between barriers (read by the header)
MODE_ENV = "KCOURSE_CUDA_CPU"  # "off": CUDA files on a machine without a GPU are only compiled, as before
# What the header cannot run, found in the learner's text: (pattern, what it is). Matched outside comments.
UNSUPPORTED = [
    (r"\bwgmma\b", "Hopper's warpgroup tensor-core instructions (wgmma)"),
    (r"\bcublas\w*|#\s*include\s*<cublas", "cuBLAS"),
    (r"\bkittens::|#\s*include\s*[<\"]kittens", "ThunderKittens"),
    (r"#\s*include\s*<cuda_fp8\.h>|\b__nv_fp8\w*", "8-bit floats (__nv_fp8)"),
    (r"#\s*include\s*<cooperative_groups|\bcooperative_groups::", "cooperative groups"),
    (
        r"#\s*include\s*<cuda/(pipeline|barrier)>|\bcuda::(pipeline|memcpy_async|barrier)\b",
        "libcu++ pipelines and barriers",
    ),
    (
        r"\bcudaLaunch(Cooperative)?Kernel\w*\s*\(|\bcudaGraph\w*",
        "launch APIs other than <<<...>>> (cudaLaunchKernel, graphs)",
    ),
    (r"#\s*include\s*<(torch|ATen|c10)/", "a PyTorch extension"),
]
# The device an emulated grade names, as the header's cudaGetDeviceProperties describes it (an H100's 132 SMs, %smid
# drawn among them per block): property checks that read the SM count (sm_id's) judge against it.
DEVICE = {"type": "cpu", "name": "CPU (kcourse's CUDA emulator)", "multiprocessors": 132, "emulated": True}
ASAN_OPTIONS = (
    "detect_leaks=0:halt_on_error=1:abort_on_error=0:allow_user_segv_handler=0:handle_segv=1:"
    "handle_sigfpe=1:handle_abort=1:symbolize=1:print_summary=0:detect_odr_violation=0:exitcode=86"
)


def enabled() -> bool:
    return os.environ.get(MODE_ENV, "").lower() != "off"


@lru_cache(maxsize=1)
def host_compiler() -> str | None:
    """The C++ compiler the emulation builds with: $CXX, else g++, else clang++."""
    for name in (os.environ.get("CXX"), "g++", "clang++", "c++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


@lru_cache(maxsize=1)
def asan_runtime() -> str | None:
    """The AddressSanitizer runtime the child preloads (ASan must come first in a process that is not built with it)."""
    compiler = host_compiler()
    if compiler is None:
        return None
    for name in ("libasan.so", "libclang_rt.asan-x86_64.so", "libclang_rt.asan-aarch64.so"):
        try:
            found = subprocess.run(
                [compiler, f"-print-file-name={name}"], capture_output=True, text=True, timeout=30
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None
        if found and os.path.isabs(found) and Path(found).exists():
            return str(Path(found).resolve())
    return None


def mode() -> tuple[bool, str]:
    """(CUDA numerics run on this CPU, one line that says how): env-check and the grade header print it."""
    if not enabled():
        return False, f"compile only ({MODE_ENV}=off)"
    if host_compiler() is None:
        return False, "compile only: no host C++ compiler (g++ or clang++) to build the CPU emulation; install one"
    checked = (
        "out-of-bounds accesses checked (AddressSanitizer)"
        if asan_runtime()
        else "no AddressSanitizer runtime: out-of-bounds accesses unchecked"
    )
    return True, f"CPU emulation with {Path(host_compiler()).name}: numerics, no timing; {checked}"


def strip_comments(text: str) -> str:
    """The source without comments and string literals (an #include's file name kept), every newline kept (so
    positions keep their line)."""

    def blank(match: re.Match) -> str:
        if match.group(1):
            return match.group(0)
        return re.sub(r"[^\n]", " ", match.group(0))

    return re.sub(r'(#[ \t]*include[ \t]*"[^"\n]*")|//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"', blank, text, flags=re.S)


def unsupported(text: str) -> str | None:
    """Why this file cannot run on the CPU ("inline PTX (asm) at line 12"), or None."""
    code = strip_comments(text)
    for pattern, what in UNSUPPORTED:
        found = re.search(pattern, code)
        if found:
            return f"{what} at line {_line(code, found.start())}"
    for start, end in _asm_statements(code):
        if _translate_asm(text[start:end]) is None:
            return (
                f"inline PTX the emulator does not translate at line {_line(code, start)} (it translates: "
                f"{', '.join(dict.fromkeys(name for _, _, name in PTX))})"
            )
    return None


def _line(code: str, position: int) -> int:
    return code.count("\n", 0, position) + 1


# ---- inline PTX: the few one-instruction asm statements the kit's kernels use, as C++ ------------------------
# (template, fully matched after `;` and whitespace are trimmed; C++ with {N} for operand N; a name for messages)
PTX = [
    (r"mov\.u32 %0, %%smid", "{0} = __smid();", "mov %smid"),
    (r"mov\.u32 %0, %%nsmid", "{0} = 132u;", "mov %nsmid"),
    (r"mov\.u32 %0, %%warpid", "{0} = kcuda_linear_thread() / 32u;", "mov %warpid"),
    (r"mov\.u32 %0, %%laneid", "{0} = kcuda_linear_thread() % 32u;", "mov %laneid"),
    (r"ex2\.approx(?:\.ftz)?\.f32 %0, %1", "{0} = exp2f({1});", "ex2.approx.f32"),
    (
        r"cp\.async\.c[ag]\.shared\.global(?:\.L2::\d+B)? \[%0\], \[%1\], (\d+), %2",
        "kcuda_cp_async({0}, {1}, \\1, {2});",
        "cp.async",
    ),
    (
        r"cp\.async\.c[ag]\.shared\.global(?:\.L2::\d+B)? \[%0\], \[%1\], (\d+)",
        "kcuda_cp_async({0}, {1}, \\1, \\1);",
        "cp.async",
    ),
    (r"cp\.async\.commit_group", ";", "cp.async.commit_group"),
    (r"cp\.async\.wait_(?:group %?\d+|all)", ";", "cp.async.wait_group"),
    (
        r"st\.shared(?:::cta)?\.v4\.b32 \[%0\], \{%1, %2, %3, %4\}",
        "kcuda_st_shared_v4({0}, {1}, {2}, {3}, {4});",
        "st.shared.v4",
    ),
]


def _ldmatrix(tiles: int, trans: bool) -> tuple[str, str, str]:
    """ldmatrix .x1/.x2/.x4 (.trans): the registers are groups 1 .. tiles, the shared address group tiles + 1."""
    registers = ", ".join(r"%(\d+)" for _ in range(tiles))
    transposed = r"\.trans" if trans else ""
    pattern = rf"ldmatrix\.sync\.aligned\.m8n8\.x{tiles}{transposed}\.shared(?:::cta)?\.b16 "
    outputs = ", ".join(rf"{{\g<{i}>}}" for i in range(1, tiles + 1))
    cpp = rf"kcuda_ldmatrix({tiles}, {'true' if trans else 'false'}, {{\g<{tiles + 1}>}}, {outputs});"
    return pattern + rf"\{{{registers}\}}, \[%(\d+)\]", cpp, "ldmatrix"


def _mma(kind: str) -> tuple[str, str, str]:
    """mma.sync m16n8k16 with float32 accumulators: groups 1-4 d, 5-8 a, 9-10 b, 11-14 c."""
    group = lambda n: ", ".join(r"%(\d+)" for _ in range(n))  # noqa: E731
    pattern = (
        rf"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.{kind}\.{kind}\.f32 "
        rf"\{{{group(4)}\}}, \{{{group(4)}\}}, \{{{group(2)}\}}, \{{{group(4)}\}}"
    )
    operands = ", ".join(rf"{{\g<{i}>}}" for i in range(1, 15))
    return pattern, f"kcuda_mma_16816({'true' if kind == 'bf16' else 'false'}, {operands});", "mma.sync m16n8k16"


PTX += [_ldmatrix(tiles, trans) for tiles in (1, 2, 4) for trans in (False, True)] + [_mma("f16"), _mma("bf16")]


def _asm_statements(code: str) -> list[tuple[int, int]]:
    """[start, end) of each `asm (...)` statement in comment-free code (its closing `;` included if there)."""
    spans = []
    for found in re.finditer(r"\b(?:asm|__asm__)\s*(?:volatile\s*|__volatile__\s*)?\(", code):
        depth, i = 0, found.end() - 1
        while i < len(code):
            depth += {"(": 1, ")": -1}.get(code[i], 0)
            i += 1
            if depth == 0:
                break
        end = re.match(r"\s*;", code[i:])
        spans.append((found.start(), i + (end.end() if end else 0)))
    return spans


def _translate_asm(statement: str) -> str | None:
    """The C++ for one asm statement, or None where it is not one the emulator knows."""
    inner = statement[statement.index("(") + 1 : statement.rindex(")")]
    literals = re.match(r'\s*((?:"(?:\\.|[^"\\])*"\s*)+)', inner)
    if not literals:
        return None
    template = "".join(re.findall(r'"((?:\\.|[^"\\])*)"', literals.group(1)))
    template = re.sub(r"\\[nt]|\s+", " ", template).strip().rstrip(";").strip()
    # one spelling of the lists: "{%0, %1}", "[%2]" however the learner spaced them
    template = re.sub(r"([{\[]) | ([}\]])", r"\1\2", re.sub(r" ?, ?", ", ", template))
    operands = [o for part in _split_top(inner[literals.end() :], ":")[1:3] for o in _split_top(part, ",") if o.strip()]
    exprs = [re.sub(r'^\s*"[^"]*"\s*', "", o).strip() for o in operands]
    for pattern, cpp, _ in PTX:
        match = re.fullmatch(pattern, template)
        if match:
            return match.expand(cpp).format(*exprs) if exprs else match.expand(cpp)
    return None


def _split_top(text: str, separator: str) -> list[str]:
    """`text` split at `separator` outside brackets and strings (a scoped name sits inside an operand's brackets)."""
    parts, depth, start, i, quoted = [], 0, 0, 0, False
    while i < len(text):
        c = text[i]
        if c == '"' and (i == 0 or text[i - 1] != "\\"):
            quoted = not quoted
        elif not quoted and c in "([{":
            depth += 1
        elif not quoted and c in ")]}":
            depth -= 1
        elif not quoted and depth == 0 and c == separator:  # `asm("..." :: "r"(x))`: both are separators
            parts.append(text[start:i])
            start = i + 1
        i += 1
    return parts + [text[start:]]


_SHARED = re.compile(
    r"extern\s+(volatile\s+)?__shared__\s+(volatile\s+)?((?:__align__|alignas)\s*\((?:[^()]|\([^()]*\))*\)\s*)?"
    r"([A-Za-z_][\w:<>,\s]*?)\s+(\w+)\s*\[\s*\]\s*;"
)


def rewrite(text: str) -> str:
    """Launches, dynamic shared memory and the known inline PTX in plain C++, each line where it was."""
    text = _rewrite_asm(text)
    code = strip_comments(text)
    out, last, open_launch = [], 0, False
    for match in re.finditer(r"<<<|>>>", code):
        if (match.group(0) == "<<<") == open_launch:  # a `>>>` closing nested templates, not a launch
            continue
        start = match.start() if open_launch else _kernel_start(code, match.start())
        out.append(text[last:start])
        out.append(_launch_site(text[start : match.start()].strip()) if not open_launch else ")")
        open_launch = not open_launch
        last = match.end()
    out.append(text[last:])
    return _SHARED.sub(_shared_pointer, "".join(out))


_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_:")


def _kernel_start(code: str, end: int) -> int:
    """Where the kernel expression before a `<<<` at `end` begins: a name, qualified (`ns::k`) and with template
    arguments (`k<float, 4>`); `end` itself where there is none (`(*fp)<<<`: launched as written)."""
    i = end
    while i > 0 and code[i - 1].isspace():
        i -= 1
    if i > 0 and code[i - 1] == ">":  # template arguments: back to their `<`
        depth = 0
        while i > 0:
            i -= 1
            depth += {">": 1, "<": -1}.get(code[i], 0)
            if depth == 0:
                break
        while i > 0 and code[i - 1].isspace():
            i -= 1
    start = i
    while start > 0 and code[start - 1] in _NAME_CHARS:
        start -= 1
    member = start > 0 and code[start - 1] in ".>"  # `ops.fwd<<<`, `p->fwd<<<`: a pointer member, as written
    return start if start < i and not code[start].isdigit() and not member else end


def _launch_site(kernel: str) -> str:
    """The C++ a launch of `kernel` becomes, up to its configuration (kcourse_cuda_cpu.h's Site): through the kernel's
    function pointer where it names one function, else through a call, which resolves an overload set or deduces a
    template's arguments as nvcc's launch does. On one line: the line numbers stay the learner's."""
    if not kernel:
        return " | ::kcuda::Config("
    pointer = f"::kcuda::single<decltype(kcuda_t)>({kernel})"
    return (
        f"::kcuda::site([&](auto kcuda_t) -> decltype({pointer}) {{ return {pointer}; }}, "
        f"[&](auto&&... kcuda_a) {{ {kernel}(static_cast<decltype(kcuda_a)&&>(kcuda_a)...); }}, "
        f'"{kernel}") | ::kcuda::Config('
    )


def _rewrite_asm(text: str) -> str:
    code, out, last = strip_comments(text), [], 0
    for start, end in _asm_statements(code):
        cpp = _translate_asm(text[start:end])
        if cpp is None:
            continue
        out += [text[last:start], cpp, "\n" * text.count("\n", start, end)]
        last = end
    return "".join(out) + text[last:]


def _shared_pointer(match: re.Match) -> str:
    volatile = "volatile " if match.group(1) or match.group(2) else ""
    kind, name = match.group(4).strip(), match.group(5)
    return f"{volatile}{kind}* {name} = reinterpret_cast<{volatile}{kind}*>(::kcuda::dynamic_shared());"


def flags(asan: bool) -> list[str]:
    # every access a call (the header's preemption hooks); misaligned vector loads stop as a GPU's do. Not checked:
    # a local array used after its scope ended (compute-sanitizer does not check it either): checking it puts a call
    # on every access to a local array at a constant index, which otherwise needs none (docs/measurements.md)
    sanitize = (
        [
            "-fsanitize=address,alignment",
            "-fno-sanitize-recover=alignment",
            "-fno-omit-frame-pointer",
            "--param=asan-instrumentation-with-call-threshold=0",
            "-fno-sanitize-address-use-after-scope",
        ]
        if asan
        else []
    )
    return [
        "-x",
        "c++",
        "-std=c++17",
        "-O2",
        *_cpu_flags(),
        "-g1",  # line tables (ASan's report names the learner's line), not full debug info: builds 16% faster
        "-fPIC",
        "-shared",
        "-U_FORTIFY_SOURCE",
        "-fno-strict-aliasing",
        *sanitize,
        f"-I{INCLUDE}",
        "-include",
        "kcourse_cuda_cpu.h",
    ]


@lru_cache(maxsize=1)
def _cpu_flags() -> tuple[str, ...]:
    """fmaf() as one instruction where this CPU has one (else each is a call into libm). -ffp-contract=off: g++ would
    otherwise fuse every a * b + c once FMA is on, in C++ even under -std=c++17; only the explicit fmaf is fused, so
    the numerics are those of the build without -mfma."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace") if platform.machine() in ("x86_64", "AMD64") else ""
    except OSError:
        cpuinfo = ""
    has_fma = any(line.startswith("flags") and " fma " in f"{line} " for line in cpuinfo.splitlines())
    return ("-mfma", "-ffp-contract=off") if has_fma else ("-ffp-contract=off",)


def build(source: Path, defines: dict[str, object] | None = None):
    """The learner's file as a CPU library (build.BuildResult; `arch` "cpu-emulation"), cached by content."""
    from grader.core.paths import build_cache_dir
    from grader.toolchain.build import BuildResult, _locked, format_compiler_errors

    started, compiler = time.perf_counter(), host_compiler()
    if compiler is None:
        return BuildResult(
            ok=False,
            seconds=0.0,
            arch="cpu-emulation",
            skipped=True,
            skip_code=Code.NO_HOST_COMPILER,
            log="no host C++ compiler (g++ or clang++): install one to run CUDA kernels on the CPU",
        )
    options = flags(asan_runtime() is not None) + [f"-D{k}={v}" for k, v in sorted((defines or {}).items())]
    out_dir = build_cache_dir() / ("cpu-" + _key(source, options, compiler))
    library = out_dir / "lib.so"
    result = BuildResult(ok=True, seconds=0.0, cached=True, library=str(library), arch="cpu-emulation")
    if not library.exists():
        out_dir.mkdir(parents=True, exist_ok=True)
        with _locked(out_dir):
            if not library.exists():
                result = _compile(source, out_dir, compiler, options)
    result.seconds = time.perf_counter() - started
    if not result.ok:
        result.log = format_compiler_errors(result.log, source, fallback=True) or result.log
    return result


def _key(source: Path, options: list[str], compiler: str) -> str:
    text = source.read_text(errors="replace")
    # the rewritten text too: a change to rewrite() (the launch syntax, the PTX table) builds anew
    digest = hashlib.sha256(
        source.read_bytes()
        + rewrite(text).encode()
        + " ".join(options).encode()
        + compiler.encode()
        + str(source.resolve()).encode()
    )  # `#line` puts the path in messages
    ours = sorted(p for p in INCLUDE.rglob("*") if p.is_file())
    for header in ours + sorted(source.parent.glob("*.cuh")) + sorted(source.parent.glob("*.h")):
        digest.update(header.name.encode() + header.read_bytes())
    return digest.hexdigest()[:20]


def _compile(source: Path, out_dir: Path, compiler: str, options: list[str]):
    from grader.toolchain.build import BuildResult

    rewritten = out_dir / "kernel.cpp"
    rewritten.write_text(f'#line 1 "{source.resolve()}"\n' + rewrite(source.read_text(errors="replace")))
    partial = out_dir / "lib.partial.so"
    pch = precompiled_header(compiler, options)
    first = [f"-I{pch}"] if pch else []  # g++ takes kcourse_cuda_cpu.h.gch there before the header itself
    command = [compiler, *first, *options, f"-I{source.resolve().parent}", str(rewritten), "-o", str(partial)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        return BuildResult(ok=False, seconds=0.0, arch="cpu-emulation", log=done.stderr[-6000:])
    os.replace(partial, out_dir / "lib.so")
    return BuildResult(ok=True, seconds=0.0, library=str(out_dir / "lib.so"), arch="cpu-emulation")


def precompiled_header(compiler: str, options: list[str]) -> Path | None:
    """A folder holding the emulator's header precompiled by g++ with these options (a third of a small file's
    build is parsing it), built once per cache; None for another compiler, with -D defines (`kcourse tune`'s, which
    the header must see), or when it fails to build. g++ checks a .gch against the build's options and reads the
    header itself instead where it does not fit, so a stale one slows a build, never changes it."""
    from grader.core.paths import build_cache_dir
    from grader.toolchain.build import _locked

    if "g++" not in Path(compiler).name or any(o.startswith("-D") for o in options):
        return None
    kept = [o for o in options if o not in ("-x", "c++", "-shared", "-include", "kcourse_cuda_cpu.h")]
    folder = build_cache_dir() / ("cpu-pch-" + _key(INCLUDE / "kcourse_cuda_cpu.h", kept, compiler))
    header = folder / "kcourse_cuda_cpu.h.gch"
    if not header.exists():
        folder.mkdir(parents=True, exist_ok=True)
        with _locked(folder):
            if not header.exists():
                partial = folder / "partial.gch"
                command = [compiler, *kept, "-x", "c++-header", str(INCLUDE / "kcourse_cuda_cpu.h"), "-o", str(partial)]
                if subprocess.run(command, capture_output=True, timeout=300).returncode != 0:
                    return None
                os.replace(partial, header)
    return folder


def child_env() -> dict[str, str]:
    """What the grading child needs to load an emulated library: the ASan runtime first, and ASan's settings."""
    runtime = asan_runtime()
    return {"LD_PRELOAD": runtime, "ASAN_OPTIONS": ASAN_OPTIONS} if runtime else {}


# ---- reading a stopped child --------------------------------------------------------------------------------
_ASAN_KINDS = {
    "heap-buffer-overflow": "read or wrote past the end (or before the start) of an array",
    "global-buffer-overflow": "indexed past the end of a __shared__, __constant__ or __device__ array",
    "stack-buffer-overflow": "indexed past the end of a local array",
    "heap-use-after-free": "used memory after cudaFree",
    "double-free": "freed the same memory twice",
    "attempting free on address which was not malloc()-ed": "freed memory that cudaMalloc did not give",
    "SEGV on unknown address": "touched an address that is no memory of yours (a null or wild pointer, or a "
    "device pointer read on the host)",
    "stack-overflow": "overflowed a thread's stack (unbounded recursion, or a huge local array)",
    "FPE": "divided an integer by zero",
}


def explain(output: str) -> tuple[str, str] | None:
    """(code, message) for a child stopped by the emulator, AddressSanitizer or UBSan, from its output; None otherwise."""
    lines = [line[len("kcourse-emu: ") :] for line in output.splitlines() if line.startswith("kcourse-emu: ")]
    where = next((line for line in lines if line.startswith("in kernel")), "")
    # "access: ..." is the death callback's note on an AddressSanitizer report (_access), not a fault of its own
    said = [line for line in lines if not line.startswith(("in kernel", "access: "))]
    if said:  # the emulator's own words come first: they say what CUDA would have done
        return Code.EMULATED_FAULT, "your kernel stopped on the CPU emulator: " + "; ".join(
            said + ([where] if where else [])
        )
    misaligned = re.search(
        r"(\S+?):(\d+):\d+: runtime error: .*?misaligned address \S+ for type '([^']+)', "
        r"which requires (\d+) byte alignment",
        output,
    )
    if misaligned:
        kind = misaligned.group(3).replace("const ", "").replace("struct ", "")
        return Code.MISALIGNED, (
            f"your code reads or writes a {kind} at an address that is not a multiple of "
            f"{misaligned.group(4)} bytes, at {Path(misaligned.group(1)).name}:{misaligned.group(2)}"
            f"{'; ' + where if where else ''}: on a GPU that is a 'misaligned address' error. Use the "
            "vector type only where the row's start (pointer and stride) and length allow it"
        )
    failed = re.search(r"(\S+?\.(?:cu|cuh|h|cpp)):(\d+): .*?Assertion `(.+?)' failed", output)
    if failed:
        return Code.EMULATED_FAULT, (
            f"an assert() failed at {Path(failed.group(1)).name}:{failed.group(2)}: "
            f"`{failed.group(3)}`" + (f"; {where}" if where else "")
        )
    if "ERROR: AddressSanitizer" in output:
        return Code.MEMORY_ERROR, _asan_message(output, where, lines)
    return None


def _asan_message(output: str, where: str, notes: list[str]) -> str:
    report = output[output.index("ERROR: AddressSanitizer") :]
    what = next((text for key, text in _ASAN_KINDS.items() if key in report.split("\n", 1)[0]), None)
    frames = re.findall(r"#\d+ 0x[0-9a-f]+ in (.+?) (/\S+?\.(?:cu|cuh|h|cpp)):(\d+)", report)
    line = next(
        (f for f in frames if "/cuda_cpu/include/" not in f[1]), None
    )  # the learner's frame, not the emulator's
    parts = [f"your code {what or 'made an invalid memory access'}"]
    access = _access(report, frames, notes)
    if access:
        parts.append(access)
    if line:
        parts.append(f"at {Path(line[1]).name}:{line[2]} in {line[0].split('(')[0]}")
    text = " ".join(parts) + (f"; {where}" if where else "")
    return (
        text + ". AddressSanitizer checked it on the CPU emulator, as compute-sanitizer's memcheck does on a GPU: "
        "check the index against the array's length (and the bounds check of the last block)"
    )


def _access(report: str, frames: list[tuple[str, str, str]], notes: list[str]) -> str | None:
    """The kernel's access, "(read of 4 bytes)" or "(a write)", or None where it is unknown. A fault in the
    emulator's chance() (the preemption hook noting the bytes the kernel is about to touch) is the emulator's own
    read, which AddressSanitizer calls a READ whatever the kernel's access was: the emulator's note says which."""
    noted = next(
        (re.match(r"access: (read|write) of (\d+) bytes", line) for line in notes if line.startswith("access: ")), None
    )
    if noted:
        return f"({noted.group(1)} of {noted.group(2)} bytes)"
    if frames and frames[0][0] == "chance":  # the note is missing (a cut report): the kind is not the kernel's
        return None
    sized = re.search(r"\b(READ|WRITE) of size (\d+)", report)
    if sized:
        return f"({sized.group(1).lower()} of {sized.group(2)} bytes)"
    caused = re.search(r"caused by a (READ|WRITE)", report)
    return f"(a {caused.group(1).lower()})" if caused else None
