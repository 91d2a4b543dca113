"""What a learner's exception looks like to them: their own lines (launch, kernel, helper) with a caret,
the error Python raised inside a Triton kernel rather than Triton's wrapper around it, Python's
"Did you mean", and, inside the grading box, what the box allows. Used in every process that runs
learner code (the grading child, the capstone's child); it imports nothing of the grader."""

from __future__ import annotations

import linecache
import re
import traceback
from dataclasses import dataclass
from pathlib import Path

BOXED = False  # set by the process once it is in the grading box (box.py)
BOX_REFUSED = (
    "\n  the grading box refused this: learner code may read the Python and CUDA installation, the "
    "kit's specs and references and its own files, and write only its working folder; it has no network, "
    "and cannot read solutions/, your results or other learners' files. Compute the answer in your kernel"
)


def learner_error(exc: BaseException, learner_file: Path) -> str:
    """The exception with the learner's own frames only: no grader traceback at the learner. A Triton error is
    unwrapped (triton_chain) to the one Python raised in the kernel, shown at the kernel's own line, with Python's
    "Did you mean" and any notes."""
    chain = triton_chain(exc)
    spots = _dedupe([s for e in chain for s in _learner_spots(e, learner_file)])
    where = "".join("\n    " + _spot_text(s, last=i == len(spots[-3:]) - 1) for i, s in enumerate(spots[-3:]))
    root = chain[-1]
    text = exception_text(root)
    if len(text) > 2000:
        text = text[:2000] + " ..."
    refused = BOXED and isinstance(root, PermissionError)
    return f"{text}{where}" + (BOX_REFUSED if refused else "")


# Triton's wrappers around the error Python raised in a kernel: the interpreter's (TRITON_INTERPRET=1, raised
# `from` it) and the compiler's (raised `from None`: the error is its __context__; a helper's is its __cause__)
_TRITON_WRAPPERS = ("InterpreterError", "CompilationError", "CompileTimeAssertionFailure")


@dataclass
class Spot:
    """A line of the learner's file an error passed through."""

    file: str
    line: int
    function: str
    code: str
    col: int | None = None  # where on the stripped line the failing expression starts and ends, when known
    end: int | None = None


def triton_chain(exc: BaseException) -> list[BaseException]:
    """exc, then each error a Triton wrapper holds, down to the one Python raised (the last)."""
    chain = [exc]
    while type(chain[-1]).__name__ in _TRITON_WRAPPERS and len(chain) < 16:
        inner = chain[-1].__cause__ or chain[-1].__context__
        if inner is None or inner in chain:
            break
        chain.append(inner)
    return chain


def _learner_spots(exc: BaseException, learner_file: Path) -> list[Spot]:
    """The learner's lines in exc's own traceback, then (a compiler error) the kernel line it points at."""
    spots = [
        Spot(Path(f.filename).name, f.lineno or 0, f.name, (f.line or "").strip(), *_columns(f))
        for f in traceback.extract_tb(exc.__traceback__)
        if Path(f.filename).name == learner_file.name
    ]
    compiled = _compiled_spot(exc, learner_file)
    return spots + ([compiled] if compiled else [])


def _columns(frame: traceback.FrameSummary) -> tuple[int | None, int | None]:
    """Where on the stripped line the frame was (Python 3.11's frames know it), as (start, end)."""
    line = linecache.getline(frame.filename, frame.lineno or 0)  # frame.line is stripped
    return (
        _stripped_columns(line, getattr(frame, "colno", None), getattr(frame, "end_colno", None))
        if getattr(frame, "lineno", None) == getattr(frame, "end_lineno", None)
        else (None, None)
    )


def _stripped_columns(line: str, start: int | None, end: int | None) -> tuple[int | None, int | None]:
    indent = len(line) - len(line.lstrip())
    if start is None or start < indent:
        return None, None
    return start - indent, None if end is None else end - indent


def _compiled_spot(exc: BaseException, learner_file: Path) -> Spot | None:
    """A CompilationError's line in the learner's file: its node's line counts from the kernel's `def` line."""
    src, node = getattr(exc, "src", None), getattr(exc, "node", None)
    if not isinstance(src, str) or not hasattr(node, "lineno") or not src.strip():
        return None
    try:
        lines = learner_file.read_text(errors="replace").splitlines()
    except OSError:
        return None
    head = src.lstrip().splitlines()[0].strip()
    start = next((i for i, line in enumerate(lines) if line.strip() == head), None)
    if start is None:
        return None
    number = start + node.lineno
    code = lines[number - 1] if number <= len(lines) else ""
    name = re.match(r"def\s+(\w+)", head)
    shift = len(lines[start]) - len(lines[start].lstrip())  # the source Triton holds is dedented
    same_line = getattr(node, "end_lineno", None) == node.lineno
    end = node.end_col_offset + shift if same_line and getattr(node, "end_col_offset", None) is not None else None
    start_col = node.col_offset + shift if getattr(node, "col_offset", None) is not None else None
    return Spot(
        learner_file.name, number, name[1] if name else "kernel", code.strip(), *_stripped_columns(code, start_col, end)
    )


def _dedupe(spots: list[Spot]) -> list[Spot]:
    kept: list[Spot] = []
    for spot in spots:
        if not kept or (kept[-1].file, kept[-1].line) != (spot.file, spot.line):
            kept.append(spot)
    return kept


def _spot_text(spot: Spot, last: bool) -> str:
    """`file:line in function: code`, and under the line that raised, a caret where on it."""
    head = f"{spot.file}:{spot.line} in {spot.function}: "
    if not last or spot.col is None or spot.col >= len(spot.code):
        return head + spot.code
    width = max(1, min(spot.end or spot.col + 1, len(spot.code)) - spot.col)
    return f"{head}{spot.code}\n    {' ' * (len(head) + spot.col)}{'^' * width}"


def exception_text(exc: BaseException) -> str:
    """`Type: message`, as Python prints it: with its "Did you mean: ...?" and the exception's notes."""
    if type(exc).__name__ in _TRITON_WRAPPERS and getattr(exc, "error_message", None) is not None:
        text = str(exc.error_message).strip()  # the compiler's own words, without its copy of the source
    else:
        text = str(exc).strip()
    suggestion = did_you_mean(exc)
    if suggestion and "Did you mean" not in text:
        text += f". Did you mean: '{suggestion}'?"
    notes = [str(n) for n in getattr(exc, "__notes__", None) or []]
    return "\n".join([f"{type(exc).__name__}: {text}", *notes])


def did_you_mean(exc: BaseException) -> str | None:
    """Python's suggestion for a misspelt attribute or name (its interpreter prints it, str(exc) lacks it)."""
    name = getattr(exc, "name", None)
    if not isinstance(name, str) or not isinstance(exc, (AttributeError, NameError)):
        return None
    if isinstance(exc, AttributeError):
        try:
            candidates = dir(exc.obj)
        except Exception:
            return None
    else:
        candidates = _names_in_scope(exc)
    if not name.startswith("_"):
        candidates = [c for c in candidates if not c.startswith("_")]
    import difflib

    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.7)
    return close[0] if close and close[0] != name else None


def _names_in_scope(exc: BaseException) -> list[str]:
    """The names the frame that raised a NameError could see."""
    import builtins

    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return dir(builtins)
    frame = tb.tb_frame
    return [*frame.f_locals, *frame.f_globals, *dir(builtins)]
