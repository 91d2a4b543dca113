"""Plain-text renderings of results for the terminal (the CLI prints these; it computes nothing)."""

from __future__ import annotations

import itertools
import textwrap

from grader.core.records import GradeResult

MARKS = {"passed": "PASS", "failed": "FAIL", "error": "ERROR", "skipped": "SKIP"}


def format_grade(result: GradeResult) -> str:
    where = f"{result.unit} " if result.unit else ""
    if result.unit and result.plan and result.plan != _default_plan_id():  # `grade day12 softmax` found its plan
        where = f"{result.unit} ({result.plan}) "
    picked = f"; {result.lang_choice}" if getattr(result, "lang_choice", "") else ""  # why this version, without --lang
    lines = [f"{where}{result.exercise} ({result.lang}{picked}) — source: {result.source}, seed {result.seed}"]
    if result.device.get("name"):
        lines.append(f"device: {result.device['name']}")
    if result.emulation:
        lines.append(f"CUDA without a GPU: {result.emulation}")
    if result.isolation.startswith("none"):
        lines.append(f"isolation: {result.isolation}")
    if result.kit_changes:
        shown = ", ".join(result.kit_changes[:3]) + (", ..." if len(result.kit_changes) > 3 else "")
        lines.append(f"kit: {len(result.kit_changes)} file(s) differ from git ({shown}): this grade judged with them; "
                     "`git diff` shows them, `git checkout -- FILE` restores one")
    lines.extend(format_check(check) for check in result.checks)
    for t in result.timings:
        lines.append("  " + format_timing(t))
    if result.output.strip() and result.status != "passed":
        lines.append("  your program's output:")
        lines.extend(f"    | {line}" for line in result.output.strip().splitlines()[-30:])
    lines.append(f"=> {result.status.upper()}: {result.verdict}")
    if result.status == "failed" and any(c.name == "numerics" for c in result.checks):
        lines.append(f"   reproduce with: {reproduce_command(result)}")
    return "\n".join(lines)


def _default_plan_id() -> str | None:
    from grader.core.plans import default_plan, load_plans

    plans = load_plans()
    return default_plan(plans).id if plans else None


def format_check(check) -> str:
    first, *rest = check.message.splitlines() or [""]
    lines = [f"  [{MARKS.get(check.status, check.status)}] {check.name}: {first}"]
    lines.extend(f"         {line}" for line in rest)
    failed = check.status in ("failed", "error")
    lines.extend(f"         {line}" for line in (check.details.get("map") or []) if failed)
    hint = check.details.get("hint") if failed else None
    if hint:
        first_hint, *more = str(hint).splitlines()
        lines.append(f"         hint: {first_hint}")
        lines.extend(f"               {line}" for line in more)
    return "\n".join(lines)


def format_timing(t) -> str:
    def rate(value):
        return f" ({value:.4g} {t.unit})" if value else ""

    parts = [f"timed {t.case}: you {t.learner_ms:.4g} ms{rate(t.learner_rate)}"]
    if t.roofline_pct:
        parts.append(f"{t.roofline_pct:.0f}% of roofline")
    if t.solution_ms:
        parts.append(f"solution {t.solution_ms:.4g} ms{rate(t.solution_rate)}")
    if t.torch_ms:
        parts.append(f"torch {t.torch_ms:.4g} ms{rate(t.torch_rate)}")
    parts.append(f"{t.runs} runs, spread {100 * (t.learner_spread or 0):.1f}%")
    if getattr(t, "learner_extra_bytes", None) is not None:  # peak GPU memory beyond inputs and outputs
        from grader.checks.memory import size_text

        limit = f" (limit {size_text(t.extra_bytes_limit)})" if t.extra_bytes_limit is not None else ""
        torch_extra = f", torch {size_text(t.torch_extra_bytes)}" if t.torch_extra_bytes is not None else ""
        parts.append(f"extra memory: you {size_text(t.learner_extra_bytes)}{limit}{torch_extra}")
    return ", ".join(parts)


def num(value, fmt: str = "{:.4g}") -> str:
    return "—" if value is None else fmt.format(value)


def table(rows: list[list[str]], header: list[str], width: int | None = None, wrap: tuple[int, ...] = ()) -> str:
    """Columns padded to their longest cell. `width`: the columns numbered in `wrap` are wrapped onto more lines
    so that a row fits in that many characters (a terminal's), where the table would be wider."""
    cells = [[str(c) for c in r] for r in rows]
    widths = _fit([max(len(r[i]) for r in cells + [header]) for i in range(len(header))], width, wrap)
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*header).rstrip(), fmt.format(*("-" * w for w in widths))]
    for row in cells:
        parts = [textwrap.wrap(c, w, break_long_words=False, break_on_hyphens=False) or [""] if i in wrap else [c]
                 for i, (c, w) in enumerate(zip(row, widths))]
        lines += [fmt.format(*line).rstrip() for line in itertools.zip_longest(*parts, fillvalue="")]
    return "\n".join(lines)


def _fit(widths: list[int], width: int | None, wrap: tuple[int, ...]) -> list[int]:
    """Column widths that fit `width`: the wrapped columns share what the others leave, in proportion to their
    natural widths, never narrower than MIN_WRAPPED (a narrow terminal gets a wider table, not one word a line)."""
    gaps = 2 * (len(widths) - 1)
    if width is None or not wrap or sum(widths) + gaps <= width:
        return widths
    left = width - gaps - sum(w for i, w in enumerate(widths) if i not in wrap)
    natural = sum(widths[i] for i in wrap)
    return [max(MIN_WRAPPED, min(w, left * w // natural)) if i in wrap else w for i, w in enumerate(widths)]


MIN_WRAPPED = 24


# Phases that run beside the others, not after them: `start` is the grading child's launch until the grade used
# it (its torch import and CUDA context), which overlaps the grader's own imports and build.
ALONGSIDE = ("start",)
OTHER_MIN_S = 0.005


def format_phases(result: GradeResult, total_s: float | None = None, warm: bool = False) -> str:
    """Seconds per phase of a grade, so that they add up: the phases that ran one after another, then "other"
    (the time between them: waiting for the child, the kit's checks, hints), sum to the total, the wall time
    of the command (`total_s`; the grade's own wall time, result.duration_s, where not given). The phases
    that ran beside them (ALONGSIDE) are shown apart, as overlapping. `warm`: the child was started before
    this grade (kcourse watch starts the next one while the learner edits), so its start-up is not this grade's."""
    total = result.duration_s if total_s is None else total_s
    serial = {name: seconds for name, seconds in result.phases.items() if name not in ALONGSIDE}
    parts = [f"{name} {seconds:.2f} s" for name, seconds in serial.items()]
    other = total - sum(serial.values())
    if other >= OTHER_MIN_S:
        parts.append(f"other {other:.2f} s (between phases)")
    line = f"phases: {' + '.join(parts) or 'none recorded'} = total {total:.2f} s"
    line += " (this grade's wall time)" if total_s is None else " (the command's wall time)"
    if other <= -OTHER_MIN_S:  # a phase measured on another clock, or that overlaps another: said, not hidden
        line += f"; the phases overlap by {-other:.2f} s"
    for name in ALONGSIDE:
        if name not in result.phases:
            continue
        seconds = result.phases[name]
        if warm:
            line += (f"; {name}: the grading child was launched {seconds:.2f} s before this grade used it (watch "
                     "starts it ahead, while you edit): not part of the total, where any wait for it is in other")
        else:
            line += (f"; alongside them: {name} {seconds:.2f} s (the grading child's start-up, from its launch until "
                     "the grade used it: it overlaps the phases above, and is not added to the total)")
    return line


def reproduce_command(result: GradeResult) -> str:
    """The exact command that grades the same file on the same inputs (the one seed a failure names)."""
    from grader.core.discovery import discover_exercises

    words = ["kcourse", "grade", result.exercise]
    spec = discover_exercises().get(result.exercise)
    if spec is None or len(spec.variants) > 1:  # an id in both languages needs --lang
        words += ["--lang", result.lang]
    if result.source not in ("learner", "stubs", "solutions"):
        words += ["--file", result.source]
    elif result.source == "solutions":
        words += ["--source", "solutions"]
    return " ".join(words + ["--seed", str(result.seed)])


# --- while a grade waits on the learner's code --------------------------------------------------------
