"""Hints keyed to the way a kernel failed: what to try next, shown under the failing check.

`annotate(result, spec)` reads each failed check's name, `details["code"]` and the other details the
grader recorded (the case, the first and last bad index, NaN counts, the speed ratio) and sets
`details["hint"]`. The console prints it under the check; --json and the results store carry it.

An exercise's own mistakes come first: `[[mistakes]]` in its spec.toml says how each shows (the check, the
failure code, the case that fails first, NaN or not, a pattern of the message) and the hint for it
(`exercise_hint`). Only when none matches do the generic rules below answer, so a generic hint about another
topic (softmax's exp overflow on layer_norm's NaN at N = 1) never stands in for the exercise's own.

A speed hint names the next step of the exercise README's ladder. The ladder is a section of
`exercises/<id>/README.md`:

    ## Ladder          (or "### Ladder (CUDA)" / "### Ladder (Triton)" when one README has both)

    1. **Naive**: the first kernel that passes ... (about 10% of roofline).
    2. **Shared-memory tiles**: ... (about 17% of roofline with TILE = 32).

Steps are numbered lines, continuation lines indented, up to the next heading; a paragraph after the
list is not part of a step. `**Title**` is optional; so is "about P% of roofline" anywhere in a step:
the share of the GPU's measured roofline the step reached on the course's GPU at the size the speed
verdict is taken on. With it the hint picks one next step from the learner's own figure; without it,
it lists the steps after step 1 (a correct but slow kernel is somewhere after the first step).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from grader.core import exprs
from grader.core.records import ERROR, FAILED, Check, GradeResult
from grader.core.spec import ExerciseSpec, Mistake, case_word
from grader.core.vocabulary import Code


@dataclass
class Step:
    number: int
    title: str
    text: str  # the whole step on one line, without Markdown emphasis
    roofline_pct: float | None = None


# --- the README ladder ---------------------------------------------------------------------------

_HEADING = re.compile(r"^#{2,3}\s+Ladder\b(?:\s*\((?P<lang>[^)]*)\))?\s*$", re.I)
_STEP = re.compile(r"^(?P<number>\d+)\.\s+(?P<text>.*)$")
_FIGURE = re.compile(r"\babout (?P<pct>\d+(?:\.\d+)?)\s*% of (?:the |this GPU's )?roofline\b", re.I)
_TITLE = re.compile(r"^\*\*(?P<title>[^*]+)\*\*[:.—-]?\s*")


def parse_ladder(text: str, lang: str | None = None) -> list[Step]:
    """The steps of the README's `## Ladder` section for `lang` (a section without "(lang)" serves every language)."""
    steps: list[list] = []
    inside = in_step = False
    for line in text.splitlines():
        heading = _HEADING.match(line.strip())
        if heading:
            section_lang = (heading["lang"] or "").strip().lower()
            inside = not section_lang or lang is None or section_lang == lang.lower()
            in_step = False
            continue
        if line.startswith("#"):  # any other heading ends the section
            inside = False
        if not inside or not line.strip():
            continue
        step = _STEP.match(line)
        if step:
            steps.append([int(step["number"]), step["text"].strip()])
            in_step = True
        elif in_step and line.startswith((" ", "\t")):
            steps[-1][1] += " " + line.strip()
        else:  # a paragraph after the list: the steps are over
            in_step = False
    return [_step(number, body) for number, body in steps]


def _step(number: int, body: str) -> Step:
    figure = _FIGURE.search(body)
    title = _TITLE.match(body)
    name = title["title"].strip() if title else re.split(r"[:;.—]", body, maxsplit=1)[0].strip()
    return Step(number, name, body.replace("**", ""), float(figure["pct"]) if figure else None)


def read_ladder(spec: ExerciseSpec, lang: str | None) -> list[Step]:
    try:
        return parse_ladder((spec.folder / "README.md").read_text(), lang)
    except OSError:
        return []


AHEAD = 1.1  # a step is ahead of the learner when its figure beats theirs by more than 10%


def next_steps(steps: list[Step], achieved_pct: float | None) -> list[Step]:
    """The step after where a correct-but-slow kernel stands: the first whose figure is clearly above
    what it reached. Past a step without a figure the learner cannot be placed: all later steps are returned."""
    later = steps[1:]
    if achieved_pct is None:
        return later
    for index, step in enumerate(later):
        if step.roofline_pct is None:
            return later[index:]
        if step.roofline_pct > achieved_pct * AHEAD:
            return [step]
    return later[-1:]


# --- annotating a result -------------------------------------------------------------------------


@dataclass
class Context:
    result: GradeResult
    spec: ExerciseSpec

    @property
    def cuda(self) -> bool:  # a version named for its build (add2's "setup") is CUDA too
        return self.result.lang == "cuda" or getattr(_variant(self), "language", None) == "cuda"

    @property
    def on_gpu(self) -> bool:
        """The grade ran on a GPU (not the interpreter or the CUDA emulator)."""
        return (self.result.device or {}).get("type") == "cuda"

    @property
    def readme(self) -> str:
        return f"exercises/{self.spec.id}/README.md"


def annotate(result: GradeResult, spec: ExerciseSpec) -> None:
    """Set `details["hint"]` on every failed check that has a hint (one already there is kept)."""
    context = Context(result, spec)
    for check in result.checks:
        if check.status not in (FAILED, ERROR) or check.details.get("hint"):
            continue
        try:
            hint = hint_for(check, context)
        except Exception:  # a hint is a courtesy: never let it break a grade
            hint = None
        if hint:
            check.details["hint"] = hint


def hint_for(check: Check, context: Context) -> str | None:
    own = None if _still_the_stub(check, context) else exercise_hint(check, context)
    if own:
        return own
    if check.name == "speed":
        return _speed(check, context)
    if check.name == "sanitizer":
        code = str(check.details.get("code", ""))
        return next((hint for key, hint in _SANITIZER.items() if key in code), None)
    handler = _BY_CODE.get(check.details.get("code", ""))
    return handler(check, context) if handler else None


def _still_the_stub(check: Check, context: Context) -> bool:
    """Nothing written by a file that still has its TODOs: the stub's failure, whose hint is the stub's (fill in the
    TODOs), never a classic mistake's that writes nothing too (embedding_backward's dweight never zeroed, on a CPU,
    keeps the poison NaN it adds into). A learner's file edits the stub in place, so its TODOs are what tell it apart."""
    return check.details.get("code") == Code.NOT_WRITTEN and bool(_todo_lines(context.result))


# --- the exercise's own mistakes ([[mistakes]] in spec.toml) ------------------------------------


def exercise_hint(check: Check, context: Context) -> str | None:
    """The hint of the exercise's mistake that this check shows. Mistakes that show exactly alike on the first
    failing case (layer_norm's N - 1 divisor and missing eps: both NaN at N = 1) each give theirs, in spec order."""
    hints = [m.hint for m in matching_mistakes(check, context) if m.hint]  # one without: the generic hint answers
    if len(hints) <= 1:
        return hints[0] if hints else None
    return f"{len(hints)} mistakes fail this way here; fix the one you made:\n" + "\n".join(
        f"{number}. {hint}" for number, hint in enumerate(hints, 1)
    )


def matching_mistakes(check: Check, context: Context) -> list[Mistake]:
    return [m for m in context.spec.mistakes if mistake_matches(m, check, context)]


def mistake_matches(mistake: Mistake, check: Check, context: Context) -> bool:
    """Every matcher the mistake gives holds for the check (see spec.Mistake)."""
    d = check.details
    if mistake.lang is not None and mistake.lang not in (context.result.lang, "cuda" if context.cuda else "triton"):
        return False
    if mistake.check is not None and check.name != mistake.check:
        return False
    codes = mistake.gpu_code if context.on_gpu and mistake.gpu_code else mistake.code
    if codes and d.get("code") not in codes:  # a GPU's code where the spec gives one (gpu_code)
        return False
    if mistake.first_case:
        label = case_label(check)
        if label is None or not any(case_word(text).search(label) for text in mistake.first_case):
            return False
    if mistake.nan is not None and _has_nan_or_inf(d) != mistake.nan:
        return False
    return mistake.message is None or re.search(mistake.message, check.message) is not None


_LABEL = re.compile(r"^(?:timed size )?(?P<label>[^:]+?)(?:, trial \d+)?:\s")


def case_label(check: Check) -> str | None:
    """The label of the case a failed check names ("M=64 N=781 (x offset=1000.0)"): its message starts with it.
    None for a check about no case (a load or build failure)."""
    if not isinstance(check.details.get("case"), dict):
        return None
    found = _LABEL.match(check.message)
    return found["label"] if found else None


# --- numerics ------------------------------------------------------------------------------------


def _wrong_values(check: Check, context: Context) -> str | None:
    d = check.details
    tail = _tail(check, context, d.get("wrong"), d.get("last_wrong"))
    if tail and tail.startswith("the last rows"):  # checked first: a row read from the wrong place may be NaN
        return _row_stride(tail, check, context)
    if _has_nan_or_inf(d):
        return _nan_or_inf(d, context)
    if _other_trial_passed(d):
        return _flaky(d, context)
    if tail:
        return (
            f"only {tail} are wrong: the end of the data is handled differently from the rest — check the last "
            f"block's bounds ({_bounds(context)}) and any separate tail loop (a float4 main loop leaves n % 4 "
            "elements to a scalar loop)"
        )
    return _plain_mismatch(d, context)


def _row_stride(tail: str, check: Check, context: Context) -> str:
    row = int(re.search(r"from row (\d+)", tail)[1])
    right = "row 0 is right" if row == 1 else f"rows 0 to {row - 1} are right"
    seen = f"{right} and every row from {row} on is wrong"
    layout = (
        " (this case passes x as a slice of a wider tensor: its row stride is not N)"
        if "row_slice" in check.message
        else ""
    )
    if context.cuda:
        return (
            f"{seen}: the step from one row to the next is off — element (row, col) of a row-major array is at "
            f"row * row_length + col, with each array's own row length{layout}"
        )
    return (
        f"{seen}: a row is found with N where it takes the row stride — x_ptr + row * x.stride(0) and "
        f"out_ptr + row * out.stride(0), passed separately since they can differ{layout}"
    )


def _has_nan_or_inf(d: dict[str, Any]) -> bool:
    got = d.get("got")
    return bool(d.get("nan") or d.get("inf")) or (isinstance(got, float) and not math.isfinite(got))


def _nan_or_inf(d: dict[str, Any], context: Context) -> str:
    counts = ", ".join(f"{d[k]} {name}" for k, name in (("nan", "NaN"), ("inf", "inf")) if d.get(k)) or "NaN or inf"
    if context.cuda:
        causes = (
            "expf of a large value overflows float32 above about 88 (subtract the maximum first), an accumulator "
            "or shared-memory slot never initialised, 0/0, or a read past the end of an array"
        )
    else:
        causes = (
            "tl.exp of a large value overflows float32 above about 88 (subtract the row max before tl.exp), "
            "float16 math (compute in float32 with .to(tl.float32)), or masked lanes that make inf - inf or 0/0 "
            "(other=-float('inf') is right for a max, and exp(-inf) = 0 adds nothing to a sum)"
        )
    return f"{counts} where the reference is finite: a numerical-stability problem. Usual causes: {causes}"


def _other_trial_passed(d: dict[str, Any]) -> bool:
    """An earlier trial of the same size passed and this one failed (`trial` counts from 1, as the judge
    records it); `flaky` is for a grader that saw the same inputs give two answers."""
    return bool(d.get("flaky")) or (isinstance(d.get("trial"), int) and d["trial"] > 1)


def _flaky(d: dict[str, Any], context: Context) -> str:
    seen = (
        f"trial {d['trial'] - 1} of this size passed and trial {d['trial']} failed"
        if isinstance(d.get("trial"), int)
        else "the same inputs gave two different answers"
    )
    if context.cuda:
        race = (
            "a race: a missing __syncthreads() between writing shared memory and reading another thread's slot "
            "(and before a loop's next round overwrites it), or `+=` on global memory from many threads instead of "
            "atomicAdd — find it with compute-sanitizer --tool racecheck"
        )
    else:
        race = (
            "a race: programs adding into the same output without tl.atomic_add, or a program reading what another "
            "writes (programs run in no fixed order)"
        )
    return (
        f"{seen}. Grade again with the same --seed: if the answer changes from run to run, it is {race}; if it "
        "fails the same way every time, the values matter (trials differ in scale): look for a hard-coded "
        "constant or an accumulator too narrow for them"
    )


def _plain_mismatch(d: dict[str, Any], context: Context) -> str | None:
    wrong, total = d.get("wrong"), d.get("total")
    got, expected = d.get("got"), d.get("expected")
    if total == 1 and isinstance(got, float) and isinstance(expected, float) and expected:
        off = abs(got - expected) / abs(expected)
        if off < 1e-3:
            return (
                f"off by {off:.1e} relative: rounding, not logic — float32 keeps about 7 digits, so sum in a tree "
                "(per thread, then per warp, then per block) rather than in one long chain"
            )
        return (
            f"got {got:.6g}, expected {expected:.6g}: is the output set to 0 before blocks add into it (it holds "
            "garbage when you are called), does every block's partial sum reach it (atomicAdd, not =), "
            "and does the grid cover all n elements?"
        )
    if wrong and total and wrong == total:
        two_d = any(len(t.shape) > 1 for t in context.spec.outputs)
        index = "row * row_stride + col" if two_d else "pid * BLOCK + offsets"
        return (
            f"every element is wrong: check the formula against exercises/{context.spec.id}/reference.py and the "
            f"index computation ({index}; strides, not sizes, to step between rows)"
        )
    return None


def _unwritten(check: Check, context: Context) -> str:
    d = check.details
    tail = _tail(check, context, d.get("unwritten"), d.get("last_unwritten"))
    if tail and tail.startswith("the last rows") and "row_slice" in check.message:  # NaN read from the gaps of a slice
        return _row_stride(tail, check, context)
    if tail and tail.startswith("the last columns"):
        mask = (
            "cols = tl.arange(0, BLOCK) with BLOCK = triton.next_power_of_2(n_cols), mask = cols < n_cols on "
            "the load and the store"
            if not context.cuda
            else "launch ceil(N / TILE) blocks along the columns and guard with if (col < N)"
        )
        return f"{tail} were never written: the columns past a whole block are not covered — {mask}"
    if tail and tail.startswith("the last rows"):
        grid = "one program per row: grid = (n_rows,)" if not context.cuda else "ceil(M / TILE) blocks along the rows"
        return f"{tail} were never written: the grid does not reach them — launch {grid}"
    if tail:
        return f"{tail} were never written: the last, partial block is missing or skips its work — {_bounds(context)}"
    return (
        "the unwritten elements are not only at the end: a program or block that returns early, a grid too "
        "small in one dimension, or an index that steps by a size where it should step by a stride"
    )


def _bounds(context: Context) -> str:
    if context.cuda:
        return (
            "launch (n + threads - 1) / threads blocks (n / threads rounds down) and guard each access with if (i < n)"
        )
    return (
        "offsets = pid * BLOCK + tl.arange(0, BLOCK); mask = offsets < n on every tl.load and tl.store; launch "
        "triton.cdiv(n, BLOCK) programs"
    )


def _tail(check: Check, context: Context, count: Any, last: Any) -> str | None:
    """ "the last K elements (from index I...)" or "the last columns ..." when the bad elements are exactly those."""
    d = check.details
    first = d.get("first_index")
    if not isinstance(count, int) or not isinstance(first, int) or count <= 0:
        return None
    shape = _output_shape(check, context)
    total = d.get("total") or (math.prod(shape) if shape else _total_from_message(check.message))
    if not total or (isinstance(last, int) and last != total - 1):
        return None
    if shape and len(shape) == 2:
        rows, cols = shape
        row, col = divmod(first, cols)
        if col == 0 and row > 0 and first + count == total:
            return f"the last rows (from row {row})"
        if col and count == (cols - col) * (rows - row):
            return f"the last columns (from column {col}{_aligned(col)}) of the rows from {row} on"
        return None
    if first > 0 and first + count == total:
        return f"the last {count} elements (from index {first}{_aligned(first)})"
    return None


def _aligned(index: int) -> str:
    power = index & -index  # the largest power of two dividing index
    return f" = {index // power} × {power}, where a block of {power} starts" if power >= 32 else ""


def _output_shape(check: Check, context: Context) -> list[int] | None:
    case = check.details.get("case")
    if not isinstance(case, dict):
        return None
    named = re.search(r"elements of (\w+)", check.message)
    outputs = context.spec.outputs
    tensor = next((t for t in outputs if named and t.name == named[1]), outputs[0] if outputs else None)
    try:
        return [int(exprs.evaluate(dim, case)) for dim in tensor.shape]
    except Exception:
        return None


def _total_from_message(message: str) -> int | None:
    found = re.search(r"\bof (\d+) elements\b", message)
    return int(found[1]) if found else None


def _not_written(check: Check, context: Context) -> str:
    todos = _todo_lines(context.result)
    if todos:
        return f"still the stub? Fill in the TODOs in {todos}; the task and the signature are in {context.readme}"
    if context.cuda:
        return (
            "is the kernel launched at all (blocks = (n + threads - 1) / threads, at most 1024 threads per block: "
            "check cudaGetLastError() after the launch) and does it write through the pointer it was given?"
        )
    return (
        "is the kernel launched at all (grid = (triton.cdiv(n, BLOCK),), not 0 programs), and does it store into "
        "the output tensor passed in? (`out = ...` in Python only rebinds the name: write with tl.store)"
    )


def _todo_lines(result: GradeResult) -> str:
    """ "softmax.py (lines 14, 22)" for the TODOs left in the graded file, or "" when none are left."""
    from grader.core.paths import course_root

    path = Path(result.file)
    path = path if path.is_absolute() else course_root() / path
    if path.suffix not in (".py", ".cu", ".cuh"):
        return ""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    found = [str(n) for n, line in enumerate(lines, 1) if "TODO" in line]
    return f"{path.name} (line{'s' if len(found) > 1 else ''} {', '.join(found[:8])})" if found else ""


def _not_implemented(check: Check, context: Context) -> str:
    todos = _todo_lines(context.result)
    where = f"the TODOs in {todos}" if todos else "your kernel and its launch"
    return f"write {where}, then delete the `raise NotImplementedError` line; the task is in {context.readme}"


def _exception(check: Check, context: Context) -> str:
    text = check.message
    if "CompilationError" in text or ("arange" in text and "power of 2" in text):
        return (
            "Triton could not compile your kernel: inside @triton.jit use tl.* operations on blocks; a block size "
            "is a tl.constexpr power of two (BLOCK = triton.next_power_of_2(n)); the line named above is where"
        )
    if "the grading box refused this" in text:
        return ""  # the message says what the box allows (learner_errors.BOX_REFUSED)
    if check.name == "load":
        return (
            "this happened while Python imported your file, before any kernel ran: code at the top level (outside "
            "functions) runs at import — a misspelt name or a missing import (import triton.language as tl)?"
        )
    return "the lines shown are yours and the last one raised: run your function on a small input to see the values"


def _cuda_error(check: Check, context: Context) -> str:
    return (
        "an illegal memory access is nearly always an index past the end of an array: guard with if (i < n), size "
        "the grid as (n + threads - 1) / threads, and never pass a host pointer to a kernel; run "
        "compute-sanitizer on it to get the kernel and the line"
    )


def _timeout(check: Check, context: Context) -> str:
    common = (
        "a loop whose bound or index never changes, or a wait for something another block does (blocks are "
        "not guaranteed to run at the same time)"
    )
    if context.cuda:
        return f"{common}; a __syncthreads() inside a branch that some threads skip can hang the block"
    return (
        f"{common}; under the Triton interpreter (no GPU) a Python loop over elements is very slow: work on "
        "whole blocks with tl.arange instead"
    )


def _crash(check: Check, context: Context) -> str:
    if context.cuda:
        return (
            "a host function that dereferences a device pointer (or a kernel given a host pointer), or a write "
            "past an array: run compute-sanitizer on it"
        )
    return (
        "a tl.load or tl.store without a mask reads or writes past the tensor (under the Triton interpreter "
        "that is a segfault): mask every access with offsets < n"
    )


# --- load and build ------------------------------------------------------------------------------


def _variant(context: Context):
    variants = list(context.spec.variants.values())
    return next((v for v in variants if v.lang == context.result.lang), variants[0] if variants else None)


def _entry_signature(context: Context) -> str:
    variant = _variant(context)
    return f"{variant.entry}({', '.join(a.name for a in variant.args)})" if variant else "the stub's function"


def _missing_entry(check: Check, context: Context) -> str:
    signature = _entry_signature(context)
    variant = _variant(context)
    if variant is not None and variant.kind_of.op_library:
        return (
            f"the grader calls torch.ops.<extension>.{variant.entry}: m.def the schema in TORCH_LIBRARY and "
            f"m.impl it for CUDA in TORCH_LIBRARY_IMPL, both under TORCH_EXTENSION_NAME ({context.readme})"
        )
    if context.cuda:
        return (
            f'the grader calls {signature}: keep that name with extern "C" before it — without it C++ mangles '
            "the name (e.g. _Z9reductionPKfPfi) and the grader cannot find it; the signature is in " + context.readme
        )
    return f"the grader calls {signature}: keep that function name at the top level of the file ({context.readme})"


def _bad_signature(check: Check, context: Context) -> str:
    if context.cuda:
        return (
            f"the grader passes exactly these, in this order: {_entry_signature(context)} — C cannot check them "
            f"for you (a missing parameter reads garbage); copy the declaration back from the stub or {context.readme}"
        )
    return (
        f"the grader calls {_entry_signature(context)} with these arguments in this order; more parameters need "
        "defaults (e.g. BLOCK: int = 1024) — copy the signature back from the stub or " + context.readme
    )


def _syntax_error(check: Check, context: Context) -> str:
    return (
        "Python stopped at that line before running anything; an unclosed bracket or a missing colon is often "
        "reported on the line after the mistake — check the line before it too"
    )


def _build_error(check: Check, context: Context) -> str | None:
    from grader.toolchain.build import first_error

    lines = check.message.splitlines()
    error = first_error("\n".join(lines[1:])) if len(lines) > 1 else ""
    if "Don't know what to do with" in check.message:
        return (
            "nvcc compiles .cu files: this exercise's CUDA version expects a .cu file (a .py file is for --lang triton)"
        )
    if not error or "by hand" in check.message:  # nvcc said nothing: the message already gives the command
        return None
    advice = ""
    if "is undefined" in error:
        advice = " (a misspelt name, a missing #include, or a function used before it is declared)"
    if error in lines[0]:  # the first line already names it
        return f"fix that first error, then grade again: later errors often follow from it{advice}"
    return f"fix the first error first, later ones often follow from it: {error}{advice}"


_BY_CODE: dict[str, Callable[[Check, Context], str | None]] = {
    Code.MISMATCH: _wrong_values,
    Code.PARTIAL_WRITE: _unwritten,
    Code.NOT_WRITTEN: _not_written,
    Code.NOT_IMPLEMENTED: _not_implemented,
    Code.EXCEPTION: _exception,
    Code.CUDA_ERROR: _cuda_error,
    Code.TIMEOUT: _timeout,
    Code.CRASH: _crash,
    Code.MISSING_ENTRY: _missing_entry,
    Code.BAD_SIGNATURE: _bad_signature,
    Code.SYNTAX_ERROR: _syntax_error,
    Code.BUILD_ERROR: _build_error,
    Code.BAD_RETURN: lambda check, context: (
        "return the tensor(s) your operator allocated, e.g. `return y;` after the launch"
    ),
    Code.TORCH_COMPUTE: lambda check, context: (
        "compute in your own kernel (tl.* or CUDA); torch may only allocate (torch.empty_like), view, reshape or copy"
    ),
    Code.INPUT_MODIFIED: lambda check, context: (
        "write only to the output tensor(s); keep temporaries in registers "
        "or in a buffer you allocate (torch.empty_like)"
    ),
    Code.CACHED_RESULT: lambda check, context: (
        "compute from the inputs on every call: no results kept in global "
        "variables, caches or dictionaries between calls"
    ),
    Code.SOLUTION_LOADED: lambda check, context: "remove whatever reads solutions/: the kernel must be your own work",
}

_SANITIZER = {
    Code.RACE: (
        "two threads touched the same shared-memory address with no barrier between: put __syncthreads() "
        "between writing shared memory and reading another thread's slot, and at the end of each loop round "
        "before the buffer is written again"
    ),
    Code.SYNC: (
        "a __syncthreads() that not every thread of the block reaches (inside an if, or a loop whose trip "
        "count differs per thread): move the barrier out of the branch and keep the condition inside it"
    ),
    Code.MEMCHECK: (
        "an access outside an allocation: guard global loads and stores with the bounds check (i < n) and "
        "keep shared-memory indices below the array's size; the line named above is where it happened"
    ),
    Code.LEAK: (
        "device memory your host code allocated and never freed: every cudaMalloc needs its cudaFree "
        "before the function returns, on every path"
    ),
    Code.INITCHECK: (
        "a read of device memory nothing wrote: the output holds garbage when you are called, so set "
        "accumulators to 0 first (cudaMemsetAsync, or a first kernel), and read nothing past n"
    ),
}


# --- speed ---------------------------------------------------------------------------------------


def _speed(check: Check, context: Context) -> str | None:
    ratio, threshold = check.details.get("ratio"), check.details.get("threshold")
    if not isinstance(ratio, (int, float)) or not isinstance(threshold, (int, float)):
        return None
    achieved = check.details.get("roofline_pct") or _verdict_roofline(check, context.result)
    where = f"{achieved:.0f}% of this GPU's roofline, " if achieved else ""
    standing = f"correct, at {where}{ratio:.2f}× the solution's speed (needed: {threshold:.2f}×)"
    steps = next_steps(read_ladder(context.spec, context.result.lang), achieved)
    if len(steps) == 1:
        step = steps[0]
        advice = f"next on the README's ladder ({context.readme}), step {step.number}: {step.text.rstrip('.')}"
    elif steps:
        listed = "; ".join(f"{s.number}. {s.title}" for s in steps)
        advice = f"the README's ladder after a correct kernel: {listed} — take the first you have not done yet ({context.readme})"
    else:
        advice = f"see {context.readme} for what makes it faster"
    tune = ""
    if context.spec.tuning.get(context.result.lang) and ratio >= 0.8 * threshold:
        tune = (
            f"; close to the bar: `kcourse tune {context.spec.id}` times your kernel over the exercise's configurations"
        )
    return f"{standing}; {advice}{tune}"


def _verdict_roofline(check: Check, result: GradeResult) -> float | None:
    """The % of roofline at the size the speed verdict was taken on (the message starts with that size)."""
    for timing in reversed(result.timings):
        if check.message.startswith(f"{timing.case}:"):
            return timing.roofline_pct
    return result.timings[-1].roofline_pct if result.timings else None
