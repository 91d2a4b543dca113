"""The parent's side of `kcourse capstone` and `kcourse block`: pick the kernels, run the child with a time
limit, judge what it reports, record it (store kinds "capstone" and "block") and write the report.

A verdict is made here from the child's figures: the learner's run finished (a crash, a hang, a kernel that
raised or turned finite inputs into NaN fails it, the operation named), its loss stayed within the tolerance
of the eager run's over the final steps, and, for the kit's solutions on a GPU, it was at least as fast as
eager (for the learner's own kernels the speed is reported, not required: a model with one kernel of theirs
is mostly PyTorch's, and PyTorch's glue around a kernel costs time)."""

from __future__ import annotations

import os
import random
import statistics
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

from grader.capstone import kernels
from grader.core import store
from grader.core.errors import KcourseError
from grader.core.paths import course_root
from grader.core.records import FAILED, PASSED, SKIPPED, Check
from grader.core.spec import tomllib
from grader.core.vocabulary import CheckName, Code, Event
from grader.run import sandbox

CONFIGS = Path(__file__).with_name("configs.toml")
CAPSTONE, BLOCK = "capstone", "block"  # store kinds (a plan unit may require them: requires = ["capstone"])
TIMEOUT_S = {"cuda": 1200.0, "cpu": 300.0}  # the whole child: three runs (compile and autotune included)
INFO = "info"  # a figure reported, not graded
OPERATION_PARTS = {
    "attention": ("layer_norm", "linear", "attention", "softmax"),
    "ffn": ("layer_norm", "linear", "gelu"),
    "block": ("layer_norm", "linear", "attention", "softmax", "gelu"),
}


class CapstoneError(KcourseError, RuntimeError):
    """The run cannot start (a bad --data file, a bad --use); the message says what to do."""


def load_config(kind: str, tiny: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the size's settings, the kind's shared settings: tolerances)."""
    table = tomllib.loads(CONFIGS.read_text())[kind]
    return dict(table["tiny" if tiny else "full"]), {k: v for k, v in table.items() if not isinstance(v, dict)}


def parse_use(items: tuple[str, ...]) -> dict[str, Path]:
    """--use EXERCISE[:VERSION]=FILE -> {"exercise:version": path}; the version may be left out where the kit's
    operations name one version of the exercise."""
    found = {}
    names = [key for roles in kernels.OPERATIONS.values() for keys in roles.values() for key in keys]
    for item in items:
        name, _, file = item.partition("=")
        matches = [k for k in names if k == name or k.split(":")[0] == name]
        if not file or not Path(file).is_file() or len(set(matches)) != 1:
            raise CapstoneError(
                f"--use {item!r}: write EXERCISE[:VERSION]=FILE with an existing file, one of: "
                f"{', '.join(sorted(set(names)))}"
            )
        found[matches[0]] = Path(file).resolve()
    return found


def _device() -> tuple[bool, str | None]:
    from grader.run.grade import cuda_available
    from grader.toolchain.build import gpu_arch

    gpu = cuda_available()
    return gpu, gpu_arch() if gpu else None


def choose(
    source: str, low_precision: str, use: dict[str, Path], interpret_all: bool
) -> tuple[bool, list[kernels.Choice]]:
    gpu, arch = _device()
    choices = kernels.pick_kernels(source, kernels.operation_dtypes("float32", low_precision), gpu, use, interpret_all)
    if gpu:
        kernels.build_cuda(choices, arch)
    return gpu, choices


# --- the child ---------------------------------------------------------------------------------------------


def run_child(
    job: dict[str, Any], gpu: bool, timeout_s: float, on_event: Callable[[dict], None]
) -> tuple[list[dict], str, dict]:
    """The child's result events ("run", "block"), how it ended ("" when it finished) and its device."""
    child = sandbox.Child("cuda" if gpu else "cpu", module="grader.capstone.child")
    job = {**job, "box": _box(job, child)}
    results, ended, device = [], "", {}
    deadline = time.monotonic() + timeout_s
    try:
        device = child.wait_ready().get("device", {})
        child.send(job)
        while True:
            event = child.event(deadline)
            if event["event"] == Event.DONE:
                break
            if event["event"] in (Event.RUN, Event.BLOCK):
                results.append(event["result"])
            if event["event"] == Event.ERROR:
                ended = f"the run stopped with an internal error: {event.get('message')}"
            on_event(event)
    except (sandbox.ChildTimeout, sandbox.ChildGone) as exc:
        child.kill()
        death = sandbox.Death(isinstance(exc, sandbox.ChildTimeout), child.proc.wait(), child.last_step)
        if child.ready is None:  # no learner code had run: not the learner's
            ended = sandbox.start_failure(exc, death.returncode)[1]
        else:
            ended = sandbox.death_message(death, timeout_s)[1]
    finally:
        output = child.output()
        child.close()
    if ended and output.strip():
        ended += "\nits output ended with:\n" + output.strip()[-1500:]
    return results, ended, device


def _box(job: dict[str, Any], child: sandbox.Child) -> dict | None:
    """The capstone child's box (box.py): it reads the learner's kernel files, their libraries and the data,
    and writes its own folder and caches; None where no box is possible (the report's runs say so)."""
    from grader.child import box

    if not box.available()[0] or os.environ.get(box.UNBOXED_ENV) == "1":
        return None
    files = [Path(p) for c in job.get("choices", []) for p in (c.get("file"), c.get("library")) if p]
    files += [Path(job["data"])] if job.get("data") else []
    first = files[0] if files else course_root() / "grader"
    return box.policy(child.dir, first, course_root(), files, [sandbox.box_home()]).to_dict()


def _seed(seed: int | None) -> int:
    return seed if seed is not None else random.randrange(1, 2**31)


# --- the capstone ---------------------------------------------------------------------------------------------


def capstone(
    source: str = "learner",
    tiny: bool = False,
    data: Path | None = None,
    seed: int | None = None,
    timeout_s: float | None = None,
    use: dict[str, Path] | None = None,
    compile_baseline: bool | None = None,
    steps: int | None = None,
    on_event: Callable[[dict], None] = lambda e: None,
    record: bool = True,
) -> dict[str, Any]:
    """Train the three runs, judge, record; returns the record."""
    gpu, _ = _device()
    tiny = tiny or not gpu
    config, shared = _configured(tiny, compile_baseline, steps)
    if data is not None and not Path(data).is_file():
        raise CapstoneError(f"--data {data}: no such file; give a text file (tinyshakespeare's input.txt, any .txt)")
    gpu, choices = choose(source, config["low_precision"], use or {}, interpret_all=False)
    seed = _seed(seed)
    job = {
        "mode": CAPSTONE,
        "config": config,
        "seed": seed,
        "data": str(data) if data else None,
        "choices": kernels.as_dicts(choices),
    }
    results, ended, device = run_child(job, gpu, timeout_s or TIMEOUT_S["cuda" if gpu else "cpu"], on_event)
    runs = {r["name"]: r for r in results if isinstance(r, dict) and "name" in r}
    checks = judge_capstone(runs, ended, config, shared, source, gpu) + _none_yours(choices)
    record_ = {
        "kind": CAPSTONE,
        "at": time.time(),
        "source": source,
        "seed": seed,
        "tiny": tiny,
        "data": str(data) if data else "(embedded default text)",
        "device": device,
        "config": config,
        "choices": kernels.as_dicts(choices),
        "runs": runs,
        "checks": [asdict(c) for c in checks],
        **_status(checks),
    }
    if record:
        store.append(record_)
    return record_


def _configured(tiny: bool, compile_baseline: bool | None, steps: int | None) -> tuple[dict[str, Any], dict]:
    """configs.toml's run (tiny or full) with the command's overrides: the baseline compiled or not, fewer steps."""
    config, shared = load_config(CAPSTONE, tiny)
    if compile_baseline is not None:
        config["compile"] = compile_baseline
    if steps:  # the final loss stays a tail's median (the configured 100 of 800 steps), not the whole short run's
        config.update(
            steps=steps,
            final_window=min(config["final_window"], max(1, steps // 8)),
            warmup_steps=min(config["warmup_steps"], steps - 1),
        )
    return config, shared


def final_loss(run: dict[str, Any], window: int) -> float | None:
    """The median loss of the last `window` steps (None where the run did not get there or held a NaN).
    The median, not the mean: on its last plateau every run's loss spikes now and then, at different steps in
    each run, and a mean that caught one spike's tail put correct kernels far from eager's (docs/measurements.md).
    A kernel slightly wrong everywhere moves the whole plateau, and the median."""
    losses = run.get("losses") or []
    tail = losses[-window:]
    if run.get("nan_at") is not None or len(losses) < window or any(v is None for v in tail):
        return None
    return statistics.median(tail)


def judge_capstone(
    runs: dict[str, dict], ended: str, config: dict, shared: dict, source: str, gpu: bool
) -> list[Check]:
    eager, mine = runs.get("eager"), runs.get("kernels")
    if eager is None or final_loss(eager, config["final_window"]) is None:
        return [
            Check(
                CheckName.RUN,
                "error",
                "the PyTorch eager run did not finish: "
                + (ended or "its loss became NaN")
                + " — check the installation with `kcourse env-check`",
                {"code": Code.BASELINE_FAILED},
            )
        ]
    if mine is None or mine.get("failed"):
        why = (mine or {}).get("failed") or ended or "the run with your kernels did not report"
        return [
            Check(
                CheckName.RUN,
                FAILED,
                f"training with your kernels failed: {why}",
                {"code": Code.KERNEL_FAILED, "operation": (mine or {}).get("operation")},
            )
        ]
    checks = [Check(CheckName.RUN, PASSED, f"{config['steps']} steps with your kernels, no NaN")]
    tolerance = loss_tolerance(eager, runs.get("compile"), config["final_window"], shared)
    checks.append(_loss_check(eager, mine, config["final_window"], tolerance))
    checks.append(_speed_check(runs, shared["speed_floor"], source, gpu))
    return checks


def loss_tolerance(eager: dict, compiled: dict | None, window: int, shared: dict) -> float:
    """The bar for the final loss: the configured fraction of eager's, or, where PyTorch's two runs differ more
    than that (bfloat16 and atomics make every run a little different, and a loss still falling fast turns a
    small drift into several percent), `noise_factor` times their own gap. Your kernels are held to what PyTorch
    itself can promise, never to less than the bar, and never to more than `max_tolerance`: a baseline left
    behind on a plateau would otherwise widen it past anything a wrong kernel could miss by (docs/measurements.md
    has the runs that set both)."""
    other = final_loss(compiled, window) if compiled else None
    want = final_loss(eager, window)
    if other is None or not want:
        return shared["loss_tolerance"]
    noise = shared["noise_factor"] * abs(other - want) / want
    return min(shared["max_tolerance"], max(shared["loss_tolerance"], noise))


def _loss_check(eager: dict, mine: dict, window: int, tolerance: float) -> Check:
    want, got = final_loss(eager, window), final_loss(mine, window)
    gap = abs(got - want) / want
    text = (
        f"final loss (median of the last {window} steps) {got:.4f} vs eager's {want:.4f}: {gap:.2%} apart "
        f"(tolerance {tolerance:.1%})"
    )
    if gap <= tolerance:
        return Check(CheckName.LOSS, PASSED, text, {"gap": gap})
    return Check(
        CheckName.LOSS,
        FAILED,
        text + " — a kernel that is slightly wrong everywhere (a dropped term, a scale, a "
        "gradient off by a factor) shows here, not in a NaN; its own grade's tolerance is tighter: re-grade "
        "the kernels listed as yours. If the curves in the report only part where the loss falls in a step "
        "(your run still on a plateau the others have left), run again with another --seed",
        {"gap": gap},
    )


def _speed_check(runs: dict[str, dict], floor: float, source: str, gpu: bool) -> Check:
    eager, mine = runs["eager"].get("tokens_per_s"), runs["kernels"].get("tokens_per_s")
    compiled = (runs.get("compile") or {}).get("tokens_per_s")
    if not gpu or not eager or not mine:
        return Check(
            CheckName.SPEED,
            INFO,
            "no GPU: tokens/s under the Triton interpreter and CPU PyTorch mean nothing; "
            "run `kcourse capstone` on a GPU for the speed figures",
            {"code": Code.NO_GPU},
        )
    ratio = mine / eager
    text = f"{mine:,.0f} tokens/s: {ratio:.2f}x eager's {eager:,.0f}" + (
        f", {mine / compiled:.2f}x torch.compile's {compiled:,.0f}" if compiled else ""
    )
    if source != "solutions":
        return Check(
            CheckName.SPEED, INFO, text + " (reported, not required: the bar is the kit's solutions')", {"ratio": ratio}
        )
    status = PASSED if ratio >= floor else FAILED
    return Check(CheckName.SPEED, status, text + f" (the solutions' bar: at least {floor:g}x eager)", {"ratio": ratio})


def _none_yours(choices: list[kernels.Choice]) -> list[Check]:
    """A run with PyTorch in every slot proves nothing of the learner's: skipped, with what to grade."""
    if any(c.yours for c in choices):
        return []
    return [
        Check(
            CheckName.KERNELS,
            SKIPPED,
            "none of your kernels could serve here (the report says why for each "
            "operation): pass an exercise's grade first (`kcourse grade activations --lang gelu_tanh`, "
            "`kcourse grade layer_norm`, ...), or plug a file in with --use",
            {"code": Code.NO_KERNELS},
        )
    ]


def _status(checks: list[Check]) -> dict[str, str]:
    bad = [c for c in checks if c.status in (FAILED, "error")] or [c for c in checks if c.status == SKIPPED]
    status = bad[0].status if bad else PASSED
    return {
        "status": status,
        "verdict": bad[0].message.splitlines()[0]
        if bad
        else ", ".join(c.name for c in checks if c.status == PASSED) + " passed",
    }


# --- one block ---------------------------------------------------------------------------------------------------


def block(
    source: str = "learner",
    tiny: bool = False,
    seed: int | None = None,
    timeout_s: float | None = None,
    use: dict[str, Path] | None = None,
    on_event: Callable[[dict], None] = lambda e: None,
    record: bool = True,
) -> dict[str, Any]:
    """One transformer block, each part forward and backward against float64; judged, recorded."""
    gpu, _ = _device()
    tiny = tiny or not gpu
    config, shared = load_config(BLOCK, tiny)
    gpu, choices = choose(source, config["low_precision"], use or {}, interpret_all=True)  # one pass: slow is fine
    seed = _seed(seed)
    job = {"mode": BLOCK, "config": config, "seed": seed, "choices": kernels.as_dicts(choices)}
    results, ended, device = run_child(job, gpu, timeout_s or TIMEOUT_S["cuda" if gpu else "cpu"], on_event)
    found = results[0] if results else {"failed": ended or "the block check did not report"}
    checks = judge_block(found, shared) + _none_yours(choices)
    record_ = {
        "kind": BLOCK,
        "at": time.time(),
        "source": source,
        "seed": seed,
        "tiny": tiny,
        "device": device,
        "config": config,
        "choices": kernels.as_dicts(choices),
        "result": found,
        "whose": whose_parts(choices),
        "checks": [asdict(c) for c in checks],
        **_status(checks),
    }
    if record:
        store.append(record_)
    return record_


def judge_block(found: dict[str, Any], shared: dict[str, Any]) -> list[Check]:
    if found.get("failed"):
        return [
            Check(
                CheckName.RUN,
                FAILED,
                f"the block with your kernels failed: {found['failed']}",
                {"code": Code.KERNEL_FAILED, "operation": found.get("operation")},
            )
        ]
    checks = []
    for part, figures in found["parts"].items():
        limit = shared["error_factor"] * figures["torch_error"] + shared["error_floor"]
        text = (
            f"{part}: max relative error vs float64 {figures['error']:.3g} (worst in {figures['worst']}); "
            f"PyTorch in the same dtypes {figures['torch_error']:.3g}; limit {limit:.3g}"
        )
        checks.append(Check(part, PASSED if figures["error"] <= limit else FAILED, text, figures))
    return checks


def whose_parts(choices: list[kernels.Choice]) -> dict[str, list[str]]:
    """Per part of the block: "operation role: yours (exercise, lang)" or "...: PyTorch"."""
    return {
        part: [f"{c.operation} {c.role}: {c.label()}" for c in choices if c.operation in operations]
        + (["residual connections: PyTorch (x + part(x))"] if part == "block" else [])
        for part, operations in OPERATION_PARTS.items()
    }
