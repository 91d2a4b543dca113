"""How fast a learner hears back, on this machine (issue 7): the import floor, one-shot grades, and
`kcourse watch` re-grades (save -> verdict, the next worker already warm). Not a test: run it on a GPU
machine and read the figures.   Usage: python scripts/feedback_bench.py [EXERCISE ...]
`--one-shot`: the floor and one-shot grades only, twice each.
`--steps EXERCISE [LANG]`: instead, grade the solution twice in this process (cold, then warm) and print the
longest waits between the grading child's events: where a slow grade's seconds go, case by case.
`--table [--shard=K/N] [--no-edit] [EXERCISE[:LANG] ...]`: every exercise's version (or those named; slice K of N
of them, so that the catalog can be measured over several calls or GPUs: scripts/device_table.sh), as markdown
rows: the one-shot grade of the solution cold and warm (`kcourse grade <id> --lang <lang> --file <solution>`, the
second with every cache warm), the one-shot grade after a kernel edit (the learner's loop: every kernel's source
changed, so its compiles, autotuning and sanitizer run again; the solution's own stay cached; not with --no-edit)
and `kcourse watch`'s save -> verdict (the second of two saves). The table issue 42 asks docs/measurements.md to
publish.
`--edits [EXERCISE[:LANG] ...]`: the grade after a kernel edit with the compile pass on its threads, on one thread,
and with no pass, in turn: what compiling first and side by side saves the learner's loop; then warm grades of the
unchanged file with the pass and without: what it costs when nothing needs compiling."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader.child.compile_steps import COMPILE_FIRST_ENV, COMPILE_THREADS_ENV  # noqa: E402

EXERCISES = [
    (("reduction",), None, "reduction/reduction.cu"),
    (("softmax",), None, "softmax/softmax.py"),
    (("vector_add",), "triton", "vector_add/vector_add.py"),
    (("matmul",), None, "matmul/matmul.cu"),
]


def seconds(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, capture_output=True, cwd=ROOT)
    return time.perf_counter() - started


def import_floor() -> float:
    return seconds([sys.executable, "-c", "import torch; torch.zeros(1, device='cuda')"])


def one_shot(words, lang, solution: str, env: dict[str, str] | None = None) -> tuple[float, str]:
    """Seconds from the command to its exit, and the grade's own phases line (-v prints it); `env`: variables set
    for the grade."""
    lang_args = ["--lang", lang] if lang else []
    started = time.perf_counter()
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "grader",
            "grade",
            *words,
            *lang_args,
            "-v",
            "--file",
            str(ROOT / "solutions" / solution),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )
    phases = next((line for line in run.stdout.splitlines() if line.startswith("phases:")), "no phases line")
    return time.perf_counter() - started, phases


def kernel_edit(path: Path, n: int) -> None:
    """Change every kernel's source as a learner's edit does, and nothing it computes. Triton: a comment line at the
    top of each @triton.jit function's body (its source is its cache key: it compiles and tunes again); CUDA: a
    comment at the end (the build is keyed by the file's content)."""
    text = path.read_text()
    if path.suffix != ".py":
        path.write_text(f"{text}\n// kcourse bench: edit {n}\n")
        return
    lines = text.splitlines(keepends=True)
    jitted = [
        node.body[0].lineno
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.FunctionDef) and any("jit" in ast.unparse(d) for d in node.decorator_list)
    ]
    for lineno in sorted(jitted, reverse=True):
        first = lines[lineno - 1]
        lines.insert(lineno - 1, f"{first[: len(first) - len(first.lstrip())]}# kcourse bench: edit {n}\n")
    path.write_text("".join(lines))


def after_an_edit(words, lang, solution: str, env: dict[str, str] | None = None) -> tuple[float, str]:
    """The one-shot grade of the solution with its kernels edited, from a copy beside it (the same folder: the
    same compile caches, which the grades before warmed)."""
    original = ROOT / "solutions" / solution
    copy = original.with_name(f"edited_{original.name}")
    shutil.copy(original, copy)
    try:
        kernel_edit(copy, int(time.time()))
        return one_shot(words, lang, str(copy.relative_to(ROOT / "solutions")), env)
    finally:
        if not copy.exists():  # seen once (an H100, session 70, the second of --edits' grades): not explained yet
            print(f"note: {copy} was gone after its grade", file=sys.stderr)
        copy.unlink(missing_ok=True)


def watch_latencies(words, lang, solution: str, saves: int = 3, quick: bool = False) -> list[tuple[float, str]]:
    """Save the file `saves` times; each figure is save -> verdict printed, with the status."""
    from grader.commands.watch import watch
    from grader.core.discovery import resolve

    folder = Path(tempfile.mkdtemp())
    path = folder / Path(solution).name
    shutil.copy(ROOT / "solutions" / solution, path)
    comment = "//" if path.suffix in (".cu", ".cuh", ".cpp") else "#"
    done = threading.Event()
    seen: list[tuple[float, str]] = []

    def show(result):
        status = result.status
        if status != "passed":  # why: a solution's grade must pass, so say what failed
            status += ": " + "; ".join(
                f"{c.name}: {c.message[:300]}" for c in result.checks if c.status in ("failed", "error")
            )
        seen.append((time.perf_counter(), status, result.phases))
        done.set()

    def show_later(result):  # compute-sanitizer's verdict, after the rest
        later.append(time.perf_counter())

    later: list[float] = []
    events = _record_events()
    thread = threading.Thread(
        target=watch,
        args=(resolve(words, lang=lang), "learner", path, show, quick, saves + 1),
        kwargs={"show_later": show_later},
        daemon=True,
    )
    thread.start()
    done.wait(300)
    figures = []
    for i in range(saves):
        time.sleep(8)  # the learner reads the verdict; the next worker warms up meanwhile
        done.clear()
        with open(path, "a") as f:
            f.write(f"\n{comment} save {i}\n")
        saved = time.perf_counter()
        done.wait(300)
        time.sleep(0.5) if not later or later[-1] < saved else None
        sanitizer = f", sanitizer +{later[-1] - seen[-1][0]:.1f} s" if later and later[-1] > saved else ""
        phases = ", ".join(f"{k} {v:.2f}" for k, v in seen[-1][2].items())
        steps = _timeline([e for e in events if saved <= e[0] <= seen[-1][0]], saved)
        figures.append((seen[-1][0] - saved, f"{seen[-1][1]}{sanitizer}; {phases}\n      events: {steps}"))
    thread.join(60)
    return figures


def _record_events() -> list[tuple[float, str]]:
    """Every event the grading children send, with the time it arrived (this process runs watch itself)."""
    from grader.run import sandbox

    events: list[tuple[float, str]] = []
    original = sandbox.Child.event

    def event(self, deadline):
        message = original(self, deadline)
        events.append(
            (time.perf_counter(), str(message.get("text") or message.get("who") or message.get("event"))[:40])
        )
        return message

    sandbox.Child.event = event
    return events


def _timeline(events: list[tuple[float, str]], saved: float) -> str:
    """`+0.12 loading your code, +0.80 checking n=1, ...`: when each run of like events began after the save."""
    marks, last = [], None
    for at, text in events:
        if text != last:
            marks.append(f"+{at - saved:.2f} {text}")
        last = text
    return ", ".join(marks)


def slowest_steps(exercise: str, lang: str | None, shown: int = 12) -> None:
    from grader.core.discovery import resolve
    from grader.run.grade import grade

    events = _record_events()
    for run in ("cold", "warm"):
        events.clear()
        started = time.perf_counter()
        result = grade(resolve((exercise,), lang=lang), source="solutions")
        print(f"{exercise} {run}: {time.perf_counter() - started:.1f} s, {result.status}, phases {result.phases}")
        waits = sorted(((b - a, text) for (a, text), (b, _) in zip(events, events[1:])), reverse=True)
        for seconds, text in waits[:shown]:
            print(f"  {seconds:6.2f} s after {text}")


def targets_named(args: list[str]) -> list:
    """The exercise versions named (id, or id:lang; all where none is), sorted, and slice K of N (--shard=K/N)."""
    from grader.core.discovery import all_targets

    shard = next((a.split("=", 1)[1] for a in args if a.startswith("--shard=")), "1/1")
    k, n = (int(x) for x in shard.split("/"))
    named = [a for a in args if not a.startswith("--")]
    chosen = [t for t in all_targets() if not named or t.spec.id in named or t.key in named]
    return sorted(chosen, key=lambda t: t.key)[k - 1 :: n]


def solution_of(target) -> str:
    from grader.core.discovery import solution_file

    return str(solution_file(target.spec, target.variant).relative_to(ROOT / "solutions"))


# The learner's loop three ways: the compile pass on its threads, on one thread, and none (child/compile_steps.py)
EDIT_MODES = {"threads": {}, "one thread": {COMPILE_THREADS_ENV: "1"}, "no pass": {COMPILE_FIRST_ENV: "0"}}


def edits(args: list[str], rounds: int = 1) -> None:
    """What compiling first, and side by side, saves a grade after a kernel edit: each mode of EDIT_MODES in turn,
    `rounds` times, after one grade that warms the solution's caches; then what the pass costs a warm grade of an
    unchanged file (every kernel compiled already), with it and without, alternately."""
    for target in targets_named(args):
        words, lang, solution = (target.spec.id,), target.variant.lang, solution_of(target)
        one_shot(words, lang, solution)
        for _ in range(rounds):
            for mode, env in EDIT_MODES.items():
                took, phases = after_an_edit(words, lang, solution, env)
                print(f"{target.key} after an edit, {mode}: {took:.1f} s ({phases})", flush=True)
        for mode in ("threads", "no pass", "threads", "no pass"):
            took, phases = one_shot(words, lang, solution, EDIT_MODES[mode])
            print(f"{target.key} warm, {mode}: {took:.1f} s ({phases})", flush=True)


def table(args: list[str]) -> None:
    """One markdown row per exercise version: one-shot cold and warm, after a kernel edit (not with --no-edit, about
    a quarter of the time), watch's save -> verdict."""
    print(
        "| exercise | version | one-shot cold | one-shot warm | after a kernel edit | watch | verdict |\n"
        "|---|---|---|---|---|---|---|"
    )
    for target in targets_named(args):
        words, lang, solution = (target.spec.id,), target.variant.lang, solution_of(target)
        (cold, _), (warm, phases) = one_shot(words, lang, solution), one_shot(words, lang, solution)
        edited, edited_phases = (None, "") if "--no-edit" in args else after_an_edit(words, lang, solution)
        saves = watch_latencies(words, lang, solution, saves=2)
        status = saves[-1][1].split(";")[0] if saves else "no verdict"
        watch_s = f"{saves[-1][0]:.1f} s" if saves else "—"
        edit_s = "—" if edited is None else f"{edited:.1f} s"
        row = f"| {target.spec.id} | {lang} | {cold:.1f} s | {warm:.1f} s | {edit_s} | {watch_s} | {status[:80]} |"
        print(row, flush=True)
        print(f"<!-- {target.key} warm {phases} -->\n<!-- {target.key} edited {edited_phases} -->", flush=True)


def main() -> None:
    if sys.argv[1:2] == ["--steps"]:
        slowest_steps(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
        return
    if sys.argv[1:2] == ["--table"]:
        table(sys.argv[2:])
        return
    if sys.argv[1:2] == ["--edits"]:
        edits(sys.argv[2:])
        return
    one_shot_only = "--one-shot" in sys.argv  # twice each (the second with nvcc's and the sanitizer's caches warm)
    only = [a for a in sys.argv[1:] if a != "--one-shot"]  # exercise ids to bench (default: all of EXERCISES)
    print(f"import floor (python -c 'import torch; torch.zeros(1, device=\"cuda\")'): {import_floor():.2f} s")
    for words, lang, solution in [e for e in EXERCISES if not only or e[0][0] in only]:
        for _ in range(2 if one_shot_only else 1):
            total, phases = one_shot(words, lang, solution)
            print(f"{' '.join(words)}: one-shot grade {total:.2f} s ({phases})", flush=True)
        for quick in () if one_shot_only else (False, True):
            figures = ", ".join(
                f"{s:.2f} s ({status})" for s, status in watch_latencies(words, lang, solution, quick=quick)
            )
            print(f"  watch{' --quick' if quick else ''}: save -> verdict {figures}")


if __name__ == "__main__":
    main()
