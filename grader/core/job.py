"""The job a grading parent sends its child, as one record: grader/run/grade.py fills it in, grader/child/worker.py
(and the tools' modules beside it) read it. It crosses the pipe as JSON: `to_message()` in the parent,
`Job.from_message()` in the child, which refuses a key it does not know, so a name misspelt on either side is an
error, never a silent default."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

PARENT_ONLY = ("wrapper",)  # read by the parent to start the child; never sent


@dataclass
class Job:
    mode: str = "grade"  # grade, or a tool's run: profile, counters, tune, viz, attention_sweep (worker.py)
    sanitize: bool | str = True  # compute-sanitizer on a small case; "background": the verdict does not wait for it
    timed_sizes: str = "all"  # "all" [performance] cases, or "verdict": only the last, where the verdict is taken
    torch_anchor: bool | None = None  # time PyTorch beside the learner (None: at every size when all are timed)
    # what is graded
    spec_folder: str = ""
    lang: str = ""  # the version's name (spec variants.<lang>)
    learner: str = ""  # the learner's file
    learner_library: str | None = None  # its nvcc build, where its kind builds one
    seed: int = 0
    solutions_root: str = ""  # the learner's code may not read below it (integrity.SolutionWatch)
    solution: str | None = None  # the solution's file, timed beside the learner's (None: the calibration's bar)
    solution_library: str | None = None
    emulated: bool = False  # CUDA on the CPU emulator (grader/cuda_cpu)
    # where it runs
    device: str = ""  # "cuda" or "cpu": the child's own, added when the job arrives
    work_dir: str = ""  # the child's scratch folder: the only place the box lets it write
    box: dict | None = None  # box.Policy as a dict; None: unboxed (a machine without Landlock, or KCOURSE_UNBOXED)
    box_home: str | None = None  # this learner's compiled-kernel caches
    # the tools' runs (grader/commands/tools.py, viz.py, compare_attention.py)
    trace_path: str | None = None  # profile: where the child writes its trace
    tune_libraries: dict[str, str] = field(default_factory=dict)  # tune, CUDA: a library per configuration built
    tune_build_errors: dict[str, str] = field(default_factory=dict)  # tune, CUDA: the log of each that did not build
    viz_case: int | None = None  # viz: the case to draw
    sweep: dict | None = None  # compare --attention: {config, lengths, budget_s}
    wrapper: list[str] | None = None  # a command the child runs under (ncu); the parent's only

    @property
    def anchor(self) -> bool:
        """Whether PyTorch is timed beside the learner at the timed sizes."""
        return self.torch_anchor if self.torch_anchor is not None else self.timed_sizes != "verdict"

    def to_message(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k not in PARENT_ONLY}

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> Job:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(message) - known)
        if unknown:
            raise ValueError(f"job keys unknown to this grader: {', '.join(unknown)} (grader/core/job.py lists them)")
        return cls(**message)
