"""The memory-safety check: NVIDIA's compute-sanitizer on one small case of the learner's kernel.

A race that happens to give the right answer, a barrier not every thread reaches, a load one past
the end that lands in someone else's memory, a read of memory nothing wrote: numerics cannot see
these on the run it checks, the sanitizer sees every one. Raw CUDA gets racecheck, synccheck, memcheck
(with the leak check for host code, which must free what it allocates) and initcheck; a torch operator
racecheck, synccheck and memcheck; Triton memcheck. The tools run side by side in their own processes
(sanitize_run.py), started as soon as the code is built, so they overlap the grade's numerics and end
before its timing starts. A verdict is cached by what it depends on (the source, the library, the
case), so re-grading an unchanged file does not pay for it again."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from grader.checks.inputs import dtype_of, generate, poison, save_tensor, shape_of, torch_dtype
from grader.core.paths import build_cache_dir, course_root
from grader.core.records import FAILED, PASSED, SKIPPED, Check
from grader.core.spec import Case, ExerciseSpec, Variant
from grader.core.vocabulary import CheckName, Code
from grader.kinds import kind_named

VERSION = 1  # part of the cache key: bump when what is checked changes
SMALL_ELEMENTS = 1 << 18  # the largest case (input elements) sanitized by default: racecheck is ~100x slower
SEED = 20_260_101  # fixed: hazards depend on sizes, not values, and a fixed seed keeps the cache valid
LIMIT_S = 60.0
HAZARD_EXIT = 86
CODES = {"racecheck": Code.RACE, "synccheck": Code.SYNC, "memcheck": Code.MEMCHECK, "initcheck": Code.INITCHECK}


def executable() -> str | None:
    """compute-sanitizer on PATH, next to nvcc, or under CUDA_HOME (None when this machine has none)."""
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    nvcc = shutil.which("nvcc")
    homes = [os.environ.get("CUDA_HOME"), str(Path(nvcc).parent.parent) if nvcc else None, "/usr/local/cuda"]
    for home in filter(None, homes):
        candidate = Path(home) / "bin" / "compute-sanitizer"
        if candidate.exists():
            return str(candidate)
    return None


def small_case(spec: ExerciseSpec, variant: Variant | None = None) -> Case | None:
    """The case a spec marks `sanitize = true`, else its largest plain case under SMALL_ELEMENTS
    (plain: contiguous tensors, values of any kind); only cases `variant` takes (its dtypes)."""
    cases = [c for c in spec.cases if variant is None or variant.accepts(c)]
    marked = [c for c in cases if c.sanitize]
    if marked:
        return marked[0]

    def size(case: Case) -> int:
        return sum(math.prod(shape_of(t, case)) for t in spec.inputs + spec.outputs)

    plain = [c for c in cases if not c.gpu_only and not _has_layout(c) and size(c) <= SMALL_ELEMENTS]
    return max(plain, key=size, default=None)


def _has_layout(case: Case) -> bool:
    return any("layout" in options for options in {**case.inputs, **case.outputs}.values())


@dataclass
class Sanitizer:
    """The tools' processes for one grade; `collect` turns their logs into one check."""

    tools: list[str]
    case: Case
    key: str
    folder: Path
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    skipped: dict[str, str] = field(default_factory=dict)  # tools the spec does not run, and why (sanitizer_skip)

    def finished(self) -> bool:
        return all(p.poll() is not None for p in self.processes.values()) or time.monotonic() > self.started + LIMIT_S

    def stop(self) -> None:
        for process in self.processes.values():
            _kill(process)
        shutil.rmtree(self.folder, ignore_errors=True)

    def collect(self, limit_s: float = LIMIT_S) -> Check:
        findings, unfinished = [], []
        deadline = self.started + limit_s
        for tool, process in self.processes.items():
            try:
                code = process.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                _kill(process)
                unfinished.append(f"{tool} ran past {limit_s:.0f} s")
                continue
            log = (self.folder / f"{tool}.log").read_text(errors="replace")
            if code == HAZARD_EXIT:
                findings.append((tool, log))
            elif code != 0:
                unfinished.append(
                    f"{tool} could not run the kernel (exit {code}): {_last_line(self.folder / f'{tool}.out')}"
                )
        check = self._verdict(findings, unfinished)
        if check.status in (PASSED, FAILED):
            _store(self.key, check)
        shutil.rmtree(self.folder, ignore_errors=True)
        return check

    def _verdict(self, findings: list[tuple[str, str]], unfinished: list[str]) -> Check:
        where = self.case.label()
        seconds = round(time.monotonic() - self.started, 2)
        if findings:
            tool, log = findings[0]
            reports = [summarize(t, text) for t, text in findings]
            lines = [r["message"].strip() for r in reports]
            code = Code.LEAK if lines[0].startswith(f"{tool}: Leaked") else CODES[tool]
            message = "\n".join([f"{lines[0]} (compute-sanitizer on {where})", *lines[1:]])
            return Check(
                CheckName.SANITIZER,
                FAILED,
                message,
                {"code": code, "tools": [t for t, _ in findings], "reports": reports, "seconds": seconds},
            )
        if unfinished:
            return Check(
                CheckName.SANITIZER,
                SKIPPED,
                f"compute-sanitizer did not finish on {where}: {'; '.join(unfinished)}. "
                "Numerics still judge this run; `--no-sanitize` skips this check",
                {"code": Code.SANITIZER_INCOMPLETE, "seconds": seconds},
            )
        not_run = "".join(f"; {tool} not run: {why}" for tool, why in self.skipped.items())
        return Check(
            CheckName.SANITIZER,
            PASSED,
            f"{', '.join(self.tools)}: no hazards on {where} ({seconds:.1f} s){not_run}",
            {"tools": self.tools, "seconds": seconds, "not_run": list(self.skipped)},
        )


def start(
    spec: ExerciseSpec,
    variant: Variant,
    source: Path,
    library: str | None,
    visible_devices: str | None = None,
    boxed: bool = False,
    box_home: str | None = None,
) -> Sanitizer | Check:
    """Starts the tools on the learner's code, or returns the check at once (cached, or skipped and why).
    `visible_devices`: the grading child's CUDA_VISIBLE_DEVICES, where a batch gave it one GPU. `boxed`: the
    learner's code runs in the grade's box (box.py) here too, with `box_home` for its caches."""
    tool_path = executable()
    case = small_case(spec, variant)
    if tool_path is None:
        return Check(
            CheckName.SANITIZER,
            SKIPPED,
            "compute-sanitizer not found (it comes with the CUDA toolkit: put its bin/ "
            "on PATH or set CUDA_HOME); memory safety was not checked",
            {"code": Code.NO_SANITIZER},
        )
    if case is None:
        return Check(
            CheckName.SANITIZER,
            SKIPPED,
            f"{spec.id} has no case small enough to sanitize: mark one `sanitize = true` in spec.toml",
            {"code": Code.NO_SMALL_CASE},
        )
    tools = [t for t in variant.kind_of.sanitizer_tools if t not in variant.sanitizer_skip]
    key = _cache_key(spec, variant, source, library, case, tools)
    cached = _load(key)
    if cached is not None:
        return cached
    folder = Path(tempfile.mkdtemp(prefix="kcourse-sanitize-"))
    sanitizer = Sanitizer(tools, case, key, folder, skipped=dict(variant.sanitizer_skip))
    policy = _box(variant, source, library, folder, box_home) if boxed else None
    job = _write_job(spec, variant, source, library, case, folder, policy, box_home)
    for tool in tools:
        sanitizer.processes[tool] = _launch(tool_path, tool, variant.kind, job, folder, visible_devices)
    return sanitizer


def _launch(
    tool_path: str, tool: str, kind: str, job: Path, folder: Path, visible_devices: str | None = None
) -> subprocess.Popen:
    command = [
        tool_path,
        "--tool",
        tool,
        "--error-exitcode",
        str(HAZARD_EXIT),
        "--print-limit",
        "10",
        "--show-backtrace",
        "no",
        "--log-file",
        str(folder / f"{tool}.log"),
    ]
    if tool == "memcheck" and kind_named(kind).host_side:
        command += ["--leak-check", "full"]
    if tool == "racecheck":
        command += ["--racecheck-report", "hazard"]
    env = dict(os.environ, PYTORCH_NO_CUDA_MEMORY_CACHING="1", PYTHONUNBUFFERED="1", TMPDIR=str(folder))
    if visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible_devices
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(course_root()), env.get("PYTHONPATH")]))
    out = open(folder / f"{tool}.out", "wb")
    command += [_python(), "-m", "grader.child.sanitize_run", str(job)]
    return subprocess.Popen(
        command,
        stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=folder,
        start_new_session=True,
    )


def _python() -> str:
    import sys

    return sys.executable


def _box(variant: Variant, source: Path, library: str | None, folder: Path, box_home: str | None) -> dict:
    """The box sanitize_run enters before it imports anything: it writes only its folder and its caches."""
    from grader.child import box
    from grader.toolchain import op_build

    writes = [Path(box_home)] if box_home else []
    writes += op_build.box_build_dirs(variant, source)
    reads = [Path(library)] if library else []
    return box.policy(folder, source, course_root(), reads, writes).to_dict()


def _write_job(
    spec, variant, source, library, case, folder, box_policy: dict | None = None, box_home: str | None = None
) -> Path:
    values = generate(spec, case, SEED)
    tensors = {}
    for name, tensor in values.items():
        tensors[name] = save_tensor(tensor, folder / f"{name}.in")
    job = {
        "kind": variant.kind,
        "entry": variant.entry,
        "library": library,
        "source": str(source),
        "spec_folder": str(spec.folder),
        "lang": variant.lang,
        "params": case.params,
        "inputs": tensors,
        "args": _raw_arguments(spec, variant, case, tensors, folder),
        "box": box_policy,
        "box_home": box_home,
    }
    path = folder / "job.json"
    path.write_text(json.dumps(job))
    return path


def _raw_arguments(spec, variant, case, tensors, folder) -> list[dict]:
    """The entry point's arguments for a ctypes call: input files, poisoned outputs of their exact size
    (no guard as in a grade: here a store one past the end is memcheck's finding, with its line), and
    scalars from the case."""
    import torch

    args = []
    outputs = {t.name: t for t in spec.outputs}
    for arg in variant.args:
        if arg.stride_of is not None:  # the sanitized case is contiguous: the stride follows from the shape
            shape = shape_of(next(t for t in spec.inputs + spec.outputs if t.name == arg.stride_of), case)
            args.append(
                {"kind": "scalar", "ctype": arg.ctype or "int32", "value": math.prod(shape[arg.stride_dim :][1:])}
            )
        elif arg.name in tensors:
            args.append({"kind": "tensor", "path": tensors[arg.name]["path"]})
        elif arg.name in outputs:
            t = outputs[arg.name]
            blank = poison(torch.empty(math.prod(shape_of(t, case)), dtype=torch_dtype(dtype_of(t, case))))
            args.append({"kind": "tensor", "path": save_tensor(blank, folder / f"{arg.name}.out.bin")["path"]})
        else:
            value = case.params.get(arg.name)
            ctype = arg.ctype or ("float32" if isinstance(value, float) else "int32")
            args.append({"kind": "scalar", "ctype": ctype, "value": value})
    return args


# --- reading the tools' logs ---------------------------------------------------------------------
_BLOCK_START = re.compile(r"^========= (?! )(?!.*SUMMARY|COMPUTE-SANITIZER|Target application)(.+)$")
_AT = re.compile(r" at \S.*$")
_LOCATION = re.compile(r"([\w./-]+\.(?:cu|cuh|cpp|h|py)):(\d+)")
_KERNEL = re.compile(r"\bat (?:0x[0-9a-f]+ in )?(?:void )?([A-Za-z_][\w:<>]*)(?:<[^(]*>)?\(")
_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error")


def summarize(tool: str, log: str) -> dict:
    """The first hazard of a tool's log: what, in which kernel, at which file:line; and how many."""
    blocks, current = [], None
    for line in log.splitlines():
        start = _BLOCK_START.match(line)
        if start:
            current = [start.group(1).strip()]
            blocks.append(current)
        elif current is not None and line.startswith("=========     "):
            current.append(line[10:].strip())
    total = _SUMMARY.search(log)
    count = int(total.group(1)) if total else len(blocks)
    if not blocks:
        return {"tool": tool, "message": f"  {tool}: {count} error(s) reported", "excerpt": log[-1500:]}
    first = blocks[0]
    text = "\n".join(first)
    kernel = _KERNEL.search(text)
    places = list(dict.fromkeys(f"{Path(f).name}:{n}" for f, n in _LOCATION.findall(text)))
    what = _AT.sub("", first[0].removeprefix("Error: "))
    if len(first) > 1 and first[1].startswith("and "):  # racecheck: the other access of the pair
        what += " " + _AT.sub("", first[1])
    where = (f" in kernel `{kernel.group(1)}`" if kernel else "") + (f" at {' and '.join(places)}" if places else "")
    more = f" ({count} reports in all)" if count > 1 else ""
    return {
        "tool": tool,
        "kernel": kernel.group(1) if kernel else None,
        "places": places,
        "count": count,
        "message": f"  {tool}: {what}{where}{more}",
        "excerpt": "\n".join(first[:6]),
    }


# --- the cache -----------------------------------------------------------------------------------
def _cache_key(spec, variant, source, library, case, tools) -> str:
    digest = hashlib.sha256()
    for part in (str(VERSION), spec.id, variant.lang, case.label(), ",".join(tools)):
        digest.update(part.encode() + b"\0")
    digest.update(source.read_bytes())
    if library:
        digest.update(Path(library).read_bytes())
    return digest.hexdigest()[:24]


def _cache_file(key: str) -> Path:
    return build_cache_dir() / "sanitize" / f"{key}.json"


def _load(key: str) -> Check | None:
    try:
        data = json.loads(_cache_file(key).read_text())
        check = Check(**data)
    except (OSError, ValueError, TypeError):
        return None
    check.message += " (cached: this file was sanitized before)" if check.status == PASSED else ""
    check.details["cached"] = True
    return check


def _store(key: str, check: Check) -> None:
    path = _cache_file(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps({"name": check.name, "status": check.status, "message": check.message, "details": check.details})
    )


def _kill(process: subprocess.Popen) -> None:
    import signal

    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


def _last_line(path: Path) -> str:
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()] if path.exists() else []
    return lines[-1][:300] if lines else "no output"
