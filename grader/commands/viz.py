"""`kcourse viz`: pictures of what each program of the learner's Triton kernel loaded and stored.

The kernel runs once, under Triton's interpreter, in the sandboxed grading child (grader/child/viz.py
records every access there; learner code never runs in this process), on a small case of the exercise.
Here the findings become a short summary (per tensor: elements loaded and stored, never written, stored
by two programs or more, lanes out of range with and without a mask) and a PNG per tensor: its elements
as a grid, each coloured by the program that touched it last, one panel per kind of access."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from grader.commands.tools import CaseError, ToolError, failure_message
from grader.core.discovery import Target
from grader.core.spec import Case, ExerciseSpec, Variant, shape_of

MIN_ELEMENTS = 100  # the default case: the smallest with at least this many input elements (one element shows nothing)
PANELS = {"load": "loaded by", "store": "stored by", "atomic": "updated atomically by"}
OUTSIDE = {  # what an access outside its tensor does on a GPU, and the fix
    "load": "pass mask= (e.g. offsets < n) to tl.load; on a GPU it reads memory that is not this tensor's, or crashes",
    "store": "pass mask= (e.g. offsets < n) to tl.store; on a GPU it overwrites memory that is not this tensor's, or crashes",
    "atomic": "pass mask= to the tl.atomic_* call; on a GPU it changes memory that is not this tensor's, or crashes",
}
RACE = (0.85, 0.0, 0.0, 1.0)  # an element stored by two programs or more
NO_ELEMENT = (0.8, 0.8, 0.8, 1.0)  # the end of a wrapped row, past the last element
SHARED = 0.55  # an element loaded by two programs or more: its colour this much darker
LEGEND_PROGRAMS = 12  # programs named in a legend; beyond that the colours repeat unnamed


def run_viz(
    target: Target,
    out_dir: Path,
    submission: Path | None = None,
    source: str = "learner",
    case_index: int | None = None,
    timeout_s: float | None = None,
) -> dict[str, Any]:
    """Record the learner's kernel in the child, then summarise and draw what it touched. `timeout_s`: the
    child's time limit (default: the interpreter's, as profile and tune allow)."""
    from grader.run.grade import INTERPRETER_TIMEOUT_FACTOR, grade

    if target.variant.language != "triton":
        raise ToolError(cuda_message(target))
    index = choose_case(target.spec, target.variant, case_index)
    result = grade(
        target,
        source=source,
        submission=submission,
        mode="viz",
        record=False,
        job_extra={"viz_case": index},
        child_env={"TRITON_INTERPRET": "1"},
        timeout_s=timeout_s or target.variant.timeout_s * INTERPRETER_TIMEOUT_FACTOR,
    )
    if "viz" not in result.extra:
        raise ToolError(failure_message(result))
    findings = result.extra["viz"]
    if not findings["launches"]:
        raise ToolError(
            f"your {target.variant.entry}() launched no Triton kernel at {findings['case']}: there is "
            "nothing to draw. Launch your kernel with kernel[grid](...) from the entry point"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"viz_{target.spec.id}_{target.variant.lang}"
    return {
        "exercise": target.spec.id,
        "lang": target.variant.lang,
        "source": str(submission or source),
        "case": findings["case"],
        "case_index": index,
        "device": result.device.get("name", "CPU"),
        "launches": findings["launches"],
        "tensors": summarise(findings),
        "stray": findings["stray"],
        "switched_off": findings["switched_off"],
        "pictures": [str(p) for p in draw_all(findings, out_dir, stem)],
    }


def cuda_message(target: Target) -> str:
    """What to do instead on a CUDA version: viz draws Triton kernels only."""
    spec, lang = target.spec, target.variant.lang
    triton = [v.lang for v in spec.variants.values() if v.language == "triton"]
    other = f" `kcourse viz {spec.id} --lang {triton[0]}` draws its Triton version." if triton else ""
    return (
        f"kcourse viz draws Triton kernels only for now, and {spec.id} ({lang}) is CUDA code.{other} For your "
        f"CUDA kernel, `kcourse grade {spec.id} --lang {lang}` prints a map of the output's wrong and never-written "
        "elements, and on a GPU its compute-sanitizer run finds out-of-range accesses and races"
    )


# --- the case ----------------------------------------------------------------------------------------
def case_elements(spec: ExerciseSpec, case: Case) -> int:
    """The case's input elements (its outputs' where it has none): what decides how much a picture shows."""
    return sum(math.prod(shape_of(t, case)) for t in spec.inputs or spec.outputs)


def choose_case(spec: ExerciseSpec, variant: Variant, index: int | None = None) -> int:
    """`index` (an index into the spec's [[cases]]) checked; by default the smallest case with at least
    MIN_ELEMENTS input elements that every machine runs (the largest such case where none is that big)."""
    runnable = [i for i, c in enumerate(spec.cases) if not c.gpu_only and variant.accepts(c)]
    choices = ", ".join(f"{i} ({spec.cases[i].label()})" for i in runnable)
    if index is not None and not 0 <= index < len(spec.cases):
        raise CaseError(
            f"--case {index}: {spec.id} has cases 0 to {len(spec.cases) - 1} (its spec.toml's [[cases]], "
            f"in order); pick one of: {choices}"
        )
    if index is not None and index not in runnable:
        why = (
            "GPU-only: too large for the interpreter"
            if spec.cases[index].gpu_only
            else "of a dtype this version does not take"
        )
        raise CaseError(f"--case {index} ({spec.cases[index].label()}) is {why}; pick one of: {choices}")
    if index is not None:
        return index
    sizes = {i: case_elements(spec, spec.cases[i]) for i in runnable}
    big_enough = [i for i in runnable if sizes[i] >= MIN_ELEMENTS]
    return min(big_enough, key=sizes.get) if big_enough else max(runnable, key=sizes.get)


# --- the summary -------------------------------------------------------------------------------------
def _array(tensor: dict, kind: str, key: str) -> np.ndarray | None:
    accesses = tensor["kinds"].get(kind)
    return np.asarray(accesses[key], dtype=np.int64) if accesses else None


def where(shape: list[int], flat: int) -> str:
    """An element's place as the learner indexes it: `index 7`, `row 2, column 5`, or `index (1, 2, 3)`."""
    if len(shape) == 2:
        return f"row {flat // shape[1]}, column {flat % shape[1]}"
    return f"index {flat}" if len(shape) <= 1 else f"index {tuple(int(i) for i in np.unravel_index(flat, shape))}"


def summarise(findings: dict[str, Any]) -> list[dict[str, Any]]:
    """Per tensor: elements, how many each kind of access touched, never written (outputs), stored by two
    programs or more, and the lanes that fell outside its elements (masked off, or not)."""
    rows = []
    for tensor in findings["tensors"]:
        n = math.prod(tensor["shape"])
        row = {
            "name": tensor["name"],
            "role": tensor["role"],
            "shape": tensor["shape"],
            "dtype": tensor["dtype"],
            "elements": n,
            "touched": {},
            "shared": {},
            "out_of_range": {},
        }
        for kind, accesses in tensor["kinds"].items():
            row["touched"][kind] = int((np.asarray(accesses["program"]) >= 0).sum())
            row["shared"][kind] = int((np.asarray(accesses["programs"]) > 1).sum())
            row["out_of_range"][kind] = [accesses["masked_out"], accesses["unmasked_out"]]
        written = np.zeros(n, dtype=bool)
        for program in (_array(tensor, "store", "program"), _array(tensor, "atomic", "program")):
            if program is not None:
                written |= program >= 0
        row["never_written"] = _first(~written, tensor["shape"]) if tensor["role"] == "output" else [0, ""]
        programs = _array(tensor, "store", "programs")
        row["written_twice"] = _first(programs > 1 if programs is not None else np.zeros(n, bool), tensor["shape"])
        rows.append(row)
    return rows


def _first(flags: np.ndarray, shape: list[int]) -> list:
    """[how many flags are set, where the first one is]."""
    count = int(flags.sum())
    return [count, where(shape, int(np.argmax(flags))) if count else ""]


def problems(record: dict[str, Any]) -> list[str]:
    """Each mistake the accesses show, with what to try next."""
    found = []
    for row in record["tensors"]:
        name, n = row["name"], row["elements"]
        count, first = row["never_written"]
        if count and "atomic" not in row["touched"]:  # atomics add into a tensor the wrapper set: some may stay
            found.append(
                f"{name}: {count} of {n} elements never written (first at {first}) — launch enough programs "
                "to cover every element (triton.cdiv(n, BLOCK)) and check each program's offsets"
            )
        count, first = row["written_twice"]
        if count:
            found.append(
                f"{name}: {count} elements stored by two programs or more (first at {first}) — a race: on a GPU "
                "they write in no fixed order; give each program its own elements (pid * BLOCK + tl.arange(0, BLOCK))"
            )
        for kind, (_, unmasked) in row["out_of_range"].items():
            if unmasked:
                found.append(f"{name}: {unmasked} {kind}s fell outside its elements without a mask — " + OUTSIDE[kind])
        if row["role"] == "input" and row["touched"].get("store"):
            found.append(
                f"{name}: {row['touched']['store']} elements of this input were stored to — a grade fails a "
                "kernel that changes its inputs: write only into the outputs"
            )
    for kind, lanes in record["stray"].items():
        if lanes:
            found.append(
                f"{lanes} {kind}s were nowhere near any tensor argument (kcourse viz switched them off so the "
                "run could finish) — check the pointer arithmetic: a wrong stride, or a row index past the end?"
            )
    return found


# --- the terminal ------------------------------------------------------------------------------------
def _launch_line(launch: dict[str, Any]) -> str:
    grid = launch["grid"]
    while len(grid) > 1 and grid[-1] == 1:
        grid = grid[:-1]
    count = math.prod(launch["grid"])
    return f"{launch['kernel']}, grid ({', '.join(map(str, grid))}{',' if len(grid) == 1 else ''}) = {_count(count, 'program')}"


def _tensor_line(row: dict[str, Any], width: int) -> str:
    shared = row["shared"].get("load")
    parts = (
        [f"{row['touched']['load']} loaded" + (f" ({shared} by 2+ programs)" if shared else "")]
        if "load" in row["touched"]
        else []
    )
    parts += [f"{row['touched']['store']} stored"] if "store" in row["touched"] else []
    parts += [f"{row['touched']['atomic']} updated atomically"] if "atomic" in row["touched"] else []
    if row["role"] == "output":
        never = row["never_written"][0]
        parts.append(
            "every element written"
            if not never
            else f"{never} never updated (they keep the value they started with)"
            if "atomic" in row["touched"]
            else f"{never} NEVER WRITTEN"
        )
    if row["written_twice"][0]:
        parts.append(f"{row['written_twice'][0]} STORED BY 2+ PROGRAMS")
    elif row["touched"].get("store"):
        parts.append("each by one program")
    masked = sum(m for m, _ in row["out_of_range"].values())
    unmasked = sum(u for _, u in row["out_of_range"].values())
    lanes = f"; out of range: {_count(masked, 'lane')} masked off, {unmasked} NOT masked" if masked or unmasked else ""
    shape = "×".join(map(str, row["shape"])) or "scalar"
    return (
        f"  {row['name']:<{width}} {row['role']:<7} {shape} {row['dtype']}: "
        + ", ".join(parts or ["not touched"])
        + lanes
    )


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'s' * (number != 1)}"


def format_viz(record: dict[str, Any]) -> str:
    """The terminal summary: the launches, each tensor's accesses, the mistakes they show, the pictures."""
    programs = sum(math.prod(launch["grid"]) for launch in record["launches"])
    beside = "" if record["device"].startswith("CPU") else f" on the CPU ({record['device']} idle)"
    launches = len(record["launches"])
    lines = [
        f"{record['exercise']} ({record['lang']}), {record['source']}, at {record['case']}: run once under the "
        f"Triton interpreter{beside}, {_count(programs, 'program')} in {launches} launch{'es' * (launches != 1)}"
    ]
    lines += [f"  launch {i}: {_launch_line(launch)}" for i, launch in enumerate(record["launches"])]
    width = max(len(row["name"]) for row in record["tensors"]) if record["tensors"] else 0
    lines += [_tensor_line(row, width) for row in record["tensors"]]
    found = problems(record)
    lines += ["problems:"] + [f"  - {p}" for p in found] if found else ["no problem seen in these accesses"]
    if record["switched_off"]:
        lines.append(
            f"({record['switched_off']} lanes pointed outside every tensor argument: kcourse viz switched them "
            "off so the run could finish)"
        )
    lines.append(
        "pictures (colour: the program that touched an element last; hatched: never stored; red: stored by "
        "two programs or more):"
    )
    return "\n".join(lines + [f"  {path}" for path in record["pictures"]])


# --- the pictures ------------------------------------------------------------------------------------
def grid_shape(shape: list[int]) -> tuple[int, int]:
    """Rows × columns of the picture: a matrix as it is (leading dimensions stacked as rows), a vector
    wrapped onto rows of a power-of-two width near its square root (blocks then start at a row's start)."""
    n = max(math.prod(shape), 1)
    if len(shape) >= 2 and shape[-1] > 0:
        return n // shape[-1], shape[-1]
    width = min(n, 2 ** round(math.log2(math.sqrt(n))))
    return -(-n // width), width


def palette() -> np.ndarray:
    """Program colours: matplotlib's tab20 without its reds (red marks a race) and greys (padding)."""
    from matplotlib import colormaps

    colours = colormaps["tab20"].colors
    return np.array([(*c, 1.0) for i, c in enumerate(colours) if i not in (6, 7, 14, 15)])


def picture(program: np.ndarray, programs: np.ndarray, rows: int, cols: int, race: bool) -> np.ndarray:
    """RGBA cells: the colour of the program that touched an element last; where several programs did,
    red (`race`: stores) or that colour darker (loads: shared, or a neighbour's elements read); transparent
    where none did (the hatching behind shows); grey past the last element."""
    colours = palette()
    cells = np.zeros((rows * cols, 4))
    n = program.size
    touched = program >= 0
    cells[:n][touched] = colours[program[touched] % len(colours)]
    if race:
        cells[:n][programs > 1] = RACE
    else:
        cells[:n][programs > 1] *= (SHARED, SHARED, SHARED, 1.0)
    cells[n:] = NO_ELEMENT
    return cells.reshape(rows, cols, 4)


def _panel(ax, tensor: dict, kind: str, rows: int, cols: int) -> None:
    from matplotlib.patches import Rectangle

    empty = np.full(math.prod(tensor["shape"]), -1)
    program, programs = _array(tensor, kind, "program"), _array(tensor, kind, "programs")
    program, programs = (empty, empty) if program is None else (program, programs)
    ax.add_patch(
        Rectangle((-0.5, -0.5), cols, rows, facecolor="white", edgecolor="#b0b0b0", hatch="///", lw=0, zorder=0)
    )
    ax.imshow(
        picture(program, programs, rows, cols, kind == "store"),
        interpolation="nearest",
        aspect="auto",
        zorder=1,
        extent=(-0.5, cols - 0.5, rows - 0.5, -0.5),
    )
    if rows <= 64 and cols <= 64:  # cells large enough to see: outline each element
        ax.vlines(np.arange(0.5, cols - 1), -0.5, rows - 0.5, colors="white", lw=0.4, zorder=2)
        ax.hlines(np.arange(0.5, rows - 1), -0.5, cols - 0.5, colors="white", lw=0.4, zorder=2)
    touched = int((program >= 0).sum())
    ax.set_title(f"{PANELS[kind]} program ({touched} of {program.size} elements)", fontsize=9)
    ax.set_xlabel("column" if len(tensor["shape"]) >= 2 else f"index mod {cols}", fontsize=8)
    ax.set_ylabel("row" if len(tensor["shape"]) >= 2 else f"index ÷ {cols}", fontsize=8)


def program_label(program: int, grid: list[int]) -> str:
    """`pid 3` in a 1-D grid, `pid (1, 2)` in a 2-D one: tl.program_id(0), (1), ... of a linear program id."""
    pid = [int(i) for i in np.unravel_index(program, grid)]
    dims = max([i + 1 for i, size in enumerate(grid) if size > 1] or [1])
    return f"pid {pid[0]}" if dims == 1 else "pid (" + ", ".join(map(str, pid[:dims])) + ")"


def _legend(fig, tensor: dict, kinds: list[str], launches: list[dict], padded: bool) -> None:
    from matplotlib.patches import Patch

    never = " / ".join(PANELS[k].split()[0] for k in kinds)
    handles = [Patch(facecolor="white", edgecolor="#b0b0b0", hatch="///", label=f"never {never}")]
    several = {k for k in kinds if k in tensor["kinds"] and (_array(tensor, k, "programs") > 1).any()}  # as they show
    handles += [Patch(color=RACE, label="stored by 2+ programs (a race)")] if "store" in several else []
    handles += (
        [Patch(color=(SHARED * 0.12, SHARED * 0.47, SHARED * 0.71), label="darker: loaded by 2+ programs")]
        if "load" in several
        else []
    )
    shown = {p for kind in tensor["kinds"] for p in _array(tensor, kind, "program").tolist() if p >= 0}
    grid = launches[-1]["grid"] if len(launches) == 1 else None
    if grid and len(shown) <= LEGEND_PROGRAMS:
        colours = palette()
        handles += [Patch(color=colours[p % len(colours)], label=program_label(p, grid)) for p in sorted(shown)]
    if padded:
        handles.append(Patch(color=NO_ELEMENT, label="no element (past the end)"))
    if not grid or len(shown) > LEGEND_PROGRAMS:
        handles.append(Patch(color=palette()[0], label=f"colour: program id (repeating every {len(palette())})"))
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 5), fontsize=7, frameon=False)


def draw(tensor: dict, launches: list[dict], path: Path) -> Path:
    """One PNG for one tensor: a panel per kind of access it had (an output always shows its stores)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = [k for k in PANELS if k in tensor["kinds"] or (k == "store" and tensor["role"] == "output")]
    rows, cols = grid_shape(tensor["shape"])
    height = min(5.0, max(1.0, 9.0 * rows / cols))
    fig, axes = plt.subplots(len(kinds), 1, figsize=(9, 1.4 + (height + 0.7) * len(kinds)), dpi=110, squeeze=False)
    for ax, kind in zip(axes[:, 0], kinds):
        _panel(ax, tensor, kind, rows, cols)
    shape = "×".join(map(str, tensor["shape"]))
    fig.suptitle(f"{tensor['name']} ({tensor['role']}, {shape} {tensor['dtype']})", fontsize=10)
    _legend(fig, tensor, kinds, launches, rows * cols > math.prod(tensor["shape"]))
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path)
    plt.close(fig)
    return path


def draw_all(findings: dict[str, Any], out_dir: Path, stem: str) -> list[Path]:
    """A PNG per tensor the kernels touched (and per output, touched or not), written into `out_dir`."""
    import re

    return [
        draw(t, findings["launches"], out_dir / f"{stem}_{re.sub(r'[^A-Za-z0-9_.-]', '_', t['name'])}.png")
        for t in findings["tensors"]
        if t["kinds"] or t["role"] == "output"
    ]
