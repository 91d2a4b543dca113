"""The `kcourse` command line (also `python -m grader`). It parses arguments and calls the pipeline's
modules; it holds no grading logic. Exit codes: 0 every check that ran passed, 1 a check failed,
2 usage or setup error (`--strict`: skipped checks count as failures).

This package holds the group and `run()`; each verb lives in its own module (grader/cli/<verb>.py), imported
only when that verb runs or shows its help (VERBS below), and the pieces several verbs share are in
grader/cli/options.py."""

from __future__ import annotations

import time

STARTED = time.monotonic()  # for the `imports` phase: the grader's own start-up (Python's is before this)

# after STARTED: the CLI's own imports count as the grader's start-up
import atexit
import importlib
import os
import sys

import click

from grader.core.errors import KcourseError

# Every verb: where its click command is ("grader.cli.<module>:<function>", imported only when the verb is
# invoked or its own help is shown) and its short help for `kcourse --help`, which thus imports no verb module.
# The short help is the first sentence of the verb's docstring; tests/unit/test_cli_layout.py checks they agree.
VERBS: dict[str, tuple[str, str]] = {
    "block": (
        "grader.cli.block:block",
        "One transformer block from your kernels, forward and backward against float64 PyTorch (days 71-77).",
    ),
    "calibrate": (
        "grader.cli.calibrate:calibrate",
        "Instructors, on a GPU: time every solution and record it in calibration/calibration.json.",
    ),
    "capstone": (
        "grader.cli.capstone:capstone",
        "Train a small GPT with your kernels, against PyTorch eager and torch.compile (days 85-92).",
    ),
    "compare": (
        "grader.cli.compare:compare_command",
        "Grade several versions of one exercise side by side: `kcourse compare reduction v1.cu v2.cu v3.cu`; "
        "or every attention implementation you graded over sequence lengths: `kcourse compare attention`.",
    ),
    "env-check": (
        "grader.cli.env_check:env_check",
        "Check torch, CUDA, the GPU, nvcc, ninja and Triton; measure the GPU; time a small training run.",
    ),
    "grade": (
        "grader.cli.grade:grade",
        "Grade one exercise: `kcourse grade week2 reduction` or `kcourse grade reduction`.",
    ),
    "grade-batch": (
        "grader.cli.grade_batch:grade_batch",
        "Instructors: grade every learner folder in SUBMISSIONS into a gradebook and a leaderboard; on this "
        "machine, or on a Dask cluster (--scheduler, --cluster; docs/grading-a-class.md).",
    ),
    "list": (
        "grader.cli.listing:list_command",
        "A plan, its weeks/days, exercises and your status (your best grade; the latest too where it differs).",
    ),
    "notebook": (
        "grader.cli.notebook:notebook",
        "Write the day 4 starter notebook: a PyTorch baseline, your Triton cell, profiling cells.",
    ),
    "profile": (
        "grader.cli.profile:profile",
        "Run your kernel under torch.profiler: the top kernels, and a trace to open in Perfetto.",
    ),
    "progress": (
        "grader.cli.progress:progress",
        "Your plan as a checklist: each week/day, its topic and your best result (and the latest where it differs).",
    ),
    "release": (
        "grader.cli.release:release",
        "Instructors: write the learner's kit to TARGET_DIR: the files git tracks, less solutions/, test fixtures "
        "and CI, with learner/README.md as its README (checked for leaked solution text).",
    ),
    "report": (
        "grader.cli.report:report",
        "Write a report from your results: `kcourse report day1`, `week3`, `final`, `portfolio`.",
    ),
    "tune": (
        "grader.cli.tune:tune",
        "Time your kernel over the exercise's configurations (block sizes, num_warps, ...).",
    ),
    "validate": (
        "grader.cli.validate:validate",
        "Grade every exercise with the solutions (must pass) or the stubs (must not pass), --repeat times each, "
        "one grade per GPU at once.",
    ),
    "viz": (
        "grader.cli.viz:viz",
        "Pictures of what each program of your Triton kernel loaded and stored (run once under the interpreter).",
    ),
    "watch": (
        "grader.cli.watch:watch",
        "Re-grade your file every time you save it (Ctrl-C to stop): `kcourse watch softmax`.",
    ),
}


# Set by a command whose work is all written when it returns (grade): run() then ends the process without
# the interpreter's teardown, which with torch loaded costs a learner 0.3-0.9 s on every grade.
_FAST_EXIT = {"ok": False}


def run() -> None:
    """The console entry point (`kcourse`, `python -m grader`); tests call `main` through click's runner."""
    try:
        main()
    except SystemExit as exc:
        if not _FAST_EXIT["ok"]:
            raise
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        sys.stdout.flush()
        sys.stderr.flush()
        atexit._run_exitfuncs()  # what must still happen at exit does: thread pools end, semaphores are unlinked
        os._exit(code)


class Commands(click.Group):
    """The verbs. A KcourseError a verb does not turn into its own message ends here: its message (which says what
    to do next) and exit status 2, never a traceback.

    The verbs of `verbs` (name -> ("module:function", short help)) load lazily, as click's documentation shows
    (list_commands and get_command overridden): a verb's module is imported when it runs or shows its own help;
    the group's help lists them from the short help alone. Commands added the usual way (`@group.command()`)
    work beside them."""

    def __init__(self, *args, verbs: dict[str, tuple[str, str]] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.verbs = dict(verbs or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.verbs})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands or cmd_name not in self.verbs:
            return super().get_command(ctx, cmd_name)
        module, _, name = self.verbs[cmd_name][0].partition(":")
        command = getattr(importlib.import_module(module), name)
        if not isinstance(command, click.Command):
            raise TypeError(f"{self.verbs[cmd_name][0]} is not a click command")
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """As click's, but a lazy verb's row comes from its short help in `verbs`: no verb module is imported."""
        rows = []
        for name in self.list_commands(ctx):
            if name in self.commands or name not in self.verbs:
                command = super().get_command(ctx, name)
                if command is not None and not command.hidden:
                    rows.append((name, command))
            else:
                rows.append((name, click.Command(name, help=self.verbs[name][1])))  # stands in for the listing
        if rows:
            limit = formatter.width - 6 - max(len(name) for name, _ in rows)
            with formatter.section("Commands"):
                formatter.write_dl([(name, command.get_short_help_str(limit)) for name, command in rows])

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except KcourseError as exc:
            error = click.ClickException(str(exc))
            error.exit_code = 2  # a usage or setup error (the exit codes: README, docs/learners.md)
            raise error from None


@click.group(cls=Commands, verbs=VERBS, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """kernel-course: exercises and an autograder for CUDA and Triton."""
