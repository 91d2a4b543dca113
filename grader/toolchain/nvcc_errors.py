"""nvcc's errors inside a template library, brought back to the learner's file.

An error in a ThunderKittens (or CUTLASS, CUB) call is reported where the library's template fails — a
static_assert in one of its headers — followed by a chain of "instantiation of ... at line N of FILE" lines
down to the learner's call, repeated for every instantiation (each tile width, each kernel): hundreds of
lines. condense() shows the first error that reaches the learner's file as `file.cu:LINE: error: message`,
the library's line that failed, one line of the chain, and where the whole log is."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

_START = re.compile(
    r"^(?P<path>[^\s:()]+\.(?:cu|cuh|h|hpp|hxx|cpp|inl))\((?P<line>\d+)\): "
    r"(?P<kind>error|catastrophic error|warning|remark)(?:\s*#\S+)?: (?P<message>.*)$"
)
_FRAME = re.compile(r'instantiation of "(?P<what>.*)"\s+at line (?P<line>\d+)(?: of (?P<path>\S+?))?\s*$')
_NAME = re.compile(r"(?P<name>[\w:~]+(?:<[^()]*?>)?(?:::[\w~]+)*)\s*\(")


@dataclass
class Frame:
    what: str  # the instantiated function, as nvcc names it
    file: str
    line: int


@dataclass
class Error:
    file: str
    line: int
    message: str
    code: str = ""  # the source line nvcc quotes under the error
    frames: list[Frame] = field(default_factory=list)


def parse(log: str) -> list[Error]:
    """The log's errors (warnings and remarks end a block but are dropped), each with its instantiation chain."""
    errors: list[Error] = []
    current: Error | None = None
    for raw in log.splitlines():
        line = raw.rstrip()
        if start := _START.match(line):
            current = (
                Error(start["path"], int(start["line"]), start["message"].strip()) if "error" in start["kind"] else None
            )
            if current is not None:
                errors.append(current)
        elif current is not None and (frame := _FRAME.search(line)):
            current.frames.append(Frame(frame["what"], frame["path"] or current.file, int(frame["line"])))
        elif (
            current is not None
            and not current.code
            and not current.frames
            and line.strip() not in ("", "^", "detected during:")
        ):
            current.code = line.strip()  # the first line under the error: the source line nvcc quotes
    return errors


def condense(log: str, source: Path, full_log: Path | None) -> str | None:
    """The first error that reaches `source` (in it, or instantiated from it), summarised; None when the log has
    no instantiation chains (a plain error: the caller shows it as it is) or none reaches the learner's file."""
    errors = parse(log)
    if not any(e.frames for e in errors):
        return None
    located = [(e, line) for e in errors if (line := _line_in(e, source)) is not None]
    if not located:
        return None
    error, line = located[0]
    lines = [f"{source.name}:{line}: error: {error.message}"]
    if Path(error.file).name != source.name:
        quoted = f": {_clip(error.code, 160)}" if error.code else ""
        lines.append(f"    in {Path(error.file).name}:{error.line}{quoted}")
    if error.frames:
        lines.append("    instantiated from:")
        lines += [f"      {_frame_text(f)}" for f in error.frames[:4]] + (
            ["      ..."] if len(error.frames) > 4 else []
        )
    others = sorted({str(n) for _, n in located[1:] if n != line}, key=int)
    more = f"; other lines of {source.name} with errors: {', '.join(others[:8])}" if others else ""
    where = f"; the whole compiler output: {full_log}" if full_log else ""
    lines.append(f"({len(errors)} error(s) in all{more}{where})")
    return "\n".join(lines)


def _line_in(error: Error, source: Path) -> int | None:
    """Where the error touches the learner's file: its own location, else the innermost frame in that file."""
    if Path(error.file).name == source.name:
        return error.line
    return next((f.line for f in error.frames if Path(f.file).name == source.name), None)


def _frame_text(frame: Frame) -> str:
    """`row_max [V=rv<float, 64UL, align>, T=rt<float, 16, 64, row>] (x.cu:30)`: the name and its bindings, short."""
    head, _, bindings = frame.what.partition(" [with ")
    match = None
    for match in _NAME.finditer(head):
        pass  # the last name before a "(": the function, past its return type
    name = re.sub(r"<[^<>]*>", "", match["name"]) if match else head
    name = name.replace("kittens::", "").replace("group::", "")
    short = re.sub(r"\b(?:kittens|ducks|rt_layout|rv_layout|base_ops)::|_GROUP_WARPS=1, ", "", bindings.rstrip("]"))
    return f"{name}" + (f" [{_clip(short, 90)}]" if short else "") + f" ({Path(frame.file).name}:{frame.line})"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


# --- a missing token that nvcc reports on the line after it -------------------------------------------

_EXPECTED = re.compile(r'^(?P<file>[^\s:]+):(?P<line>\d+): error: expected an? "(?P<token>[;,)\]}])"\s*$')


def mark_line_before(text: str, source: Path) -> str:
    """nvcc reports a missing `;` (or `)`, `,`, `]`, `}`) where the next token is: when that is the first word of
    a line, the token is missing at the end of the line of code before, which the error's line then names."""
    lines = text.splitlines()
    try:
        code = source.read_text(errors="replace").splitlines()
    except OSError:
        return text
    for i, line in enumerate(lines):
        match = _EXPECTED.match(line)
        if not match or Path(match["file"]).name != source.name or not _caret_at_start(lines[i + 1 : i + 3]):
            continue
        before = _code_line_before(code, int(match["line"]), match["token"])
        if before is not None:
            lines[i] = (
                f"{line} (reported at the start of line {match['line']}: likely missing at the end of line "
                f"{before[0]}: `{_clip(before[1], 70)}`)"
            )
    return "\n".join(lines)


def _caret_at_start(quoted: list[str]) -> bool:
    """nvcc's quoted line and its caret: the caret under the line's first character."""
    if len(quoted) < 2 or quoted[1].strip() != "^" or not quoted[0].strip():
        return False
    return quoted[1].index("^") == len(quoted[0]) - len(quoted[0].lstrip())


def _code_line_before(code: list[str], number: int, token: str) -> tuple[int, str] | None:
    """(number, text) of the last line of code above line `number`, where it could lack `token`."""
    for index in range(min(number, len(code) + 1) - 2, -1, -1):
        text = code[index].split("//")[0].strip()
        if not text or text.startswith(("#", "/*", "*")):
            continue
        return None if text.endswith((token, ";", "{", "}")) else (index + 1, text)
    return None
