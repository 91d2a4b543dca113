"""The grader's words, in one place: a check's status and name, the code that says why it failed or was
skipped, and the events a grading child sends its parent.

Each is an Enum whose members are also plain strings (`Vocab`): they compare equal to the strings, print as
them, and serialise to JSON as them, so records written before this module existed read the same, and the
child and the parent (two processes that speak JSON over a pipe) need no conversion. Code constructs checks
with members, never string literals (tests/unit/test_vocabulary.py scans grader/ for literals in those places);
an exercise's spec names checks and codes in its [[mistakes]] and is checked against these lists when loaded."""

from __future__ import annotations

import functools
from enum import Enum


class Vocab(str, Enum):
    """A string Enum that formats as its value (Python 3.10 has no StrEnum; a (str, Enum) member's format()
    gives 'Code.MISMATCH' on some versions and 'mismatch' on others)."""

    __str__ = str.__str__
    __format__ = str.__format__

    @classmethod
    def values(cls) -> list[str]:
        return list(_values(cls))


@functools.cache
def _values(vocab: type[Vocab]) -> tuple[str, ...]:
    """A vocabulary's values, read once (the spec parser checks each spec's names against them)."""
    return tuple(member.value for member in vocab)


class Status(Vocab):
    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"  # the grader's own fault (a bug, a broken reference): never the learner's verdict
    SKIPPED = "skipped"  # did not run here (no GPU, --quick): never counted as passed


class CheckName(Vocab):
    """The checks a grade is made of, in the order they usually run."""

    KIT = "kit"  # the kit's own files unchanged (an instructor's checkout or a release)
    BUILD = "build"  # nvcc / the host compiler / the torch extension build
    GPU_COMPILE = "gpu_compile"  # a Triton kernel compiled for the GPU where numerics ran elsewhere
    LOAD = "load"  # the learner's file imported, its entry point found
    RUN = "run"  # the child ran to the end (crash, hang, time limit)
    NUMERICS = "numerics"  # every case's outputs against the float64 reference
    INTEGRITY = "integrity"  # the result is the learner's kernel's own (no torch compute, inputs untouched)
    OPERATOR = "operator"  # a torch_op exercise's registered custom operator, its schema
    GRADIENTS = "gradients"  # its backward against the reference's
    OPCHECK = "opcheck"  # torch.library.opcheck
    TORCH_COMPILE = "torch_compile"  # the operator under torch.compile
    SANITIZER = "sanitizer"  # compute-sanitizer (GPU) or AddressSanitizer (the CPU emulator)
    MEMORY = "memory"  # extra device memory against the spec's bar
    SPEED = "speed"  # the learner's time against the solution's, at the verdict size
    GRADER = "grader"  # an internal error of the grader, reported as such
    # the capstone (grader/capstone): a training run with the learner's kernels swapped in
    LOSS = "loss"
    KERNELS = "kernels"


class Code(Vocab):
    """Why a check failed or was skipped (check.details["code"]), grouped by the check that gives it."""

    OK = "ok"  # speed and memory say "ok" when they pass
    # kit, build, load
    KIT_MODIFIED = "kit_modified"
    BUILD_ERROR = "build_error"
    EMULATOR_BUILD_ERROR = "emulator_build_error"
    NO_NVCC = "no_nvcc"
    NO_HOST_COMPILER = "no_host_compiler"
    NO_BUILD_TOOL = "no_build_tool"
    TOOLKIT_INCOMPLETE = "toolkit_incomplete"
    LIBRARY_MISSING = "library_missing"  # a spec's `link` library is not on this machine
    REQUIREMENT_MISSING = "requirement_missing"  # a spec's `requires` is not met here
    MISSING_FILE = "missing_file"
    BAD_NOTEBOOK = "bad_notebook"
    PLAIN_GLOBAL = "plain_global"
    SYNTAX_ERROR = "syntax_error"
    MISSING_ENTRY = "missing_entry"
    BAD_SIGNATURE = "bad_signature"
    BAD_SPEC = "bad_spec"
    WRONG_LANGUAGE = "wrong_language"
    NOT_IMPLEMENTED = "not_implemented"
    LOAD_TIMEOUT = "load_timeout"
    BOX_FAILED = "box_failed"
    CHILD_START = "child_start"  # the grading process never became ready (before any learner code ran)
    GPU_FULL = "gpu_full"  # the grader's own GPU work (inputs, references) ran out of memory: other processes hold it
    # run: the child's end
    CRASH = "crash"
    TIMEOUT = "timeout"
    EXCEPTION = "exception"
    CUDA_ERROR = "cuda_error"
    EMULATED_FAULT = "emulated_fault"  # the CPU emulator stopped a kernel (a trap, an assert)
    MISALIGNED = "misaligned"
    MEMORY_ERROR = "memory_error"  # AddressSanitizer under the emulator: out of bounds, use after free
    # numerics
    MISMATCH = "mismatch"
    NOT_WRITTEN = "not_written"
    PARTIAL_WRITE = "partial_write"
    PROPERTY = "property"  # an output judged by the exercise's property check, not by equality
    OUT_OF_BOUNDS = "out_of_bounds"
    BAD_RETURN = "bad_return"
    RETURNED_EARLY = "returned_early"  # a host-side function returned while its output was still being written
    # integrity
    TORCH_COMPUTE = "torch_compute"
    TORCH_COMPUTE_BACKWARD = "torch_compute_backward"
    INPUT_MODIFIED = "input_modified"
    CACHED_RESULT = "cached_result"
    SOLUTION_LOADED = "solution_loaded"
    FORGED_VERDICT = "forged_verdict"
    GARBLED = "garbled"
    TIMING_FORGED = "timing_forged"
    # a torch_op exercise's operator checks (grader/checks/op_checks.py)
    NO_OPERATOR = "no_operator"
    WRONG_SCHEMA = "wrong_schema"
    OPERATOR_NOT_CALLED = "operator_not_called"
    NO_BACKWARD = "no_backward"
    GRADIENT_MISSING = "gradient_missing"
    GRADIENT_MISMATCH = "gradient_mismatch"
    GRADCHECK_FAILED = "gradcheck_failed"
    OPCHECK_FAILED = "opcheck_failed"
    COMPILE_FAILED = "compile_failed"
    COMPILED_MISMATCH = "compiled_mismatch"
    NO_COMPILER = "no_compiler"
    NO_EVIDENCE = "no_evidence"
    NOT_RUN = "not_run"
    # sanitizer (compute-sanitizer's tools; a leak is memcheck's leak report)
    RACE = "race"
    SYNC = "sync"
    MEMCHECK = "memcheck"
    INITCHECK = "initcheck"
    LEAK = "leak"
    NO_SANITIZER = "no_sanitizer"
    NO_SANITIZE = "no_sanitize"  # --no-sanitize
    NO_SMALL_CASE = "no_small_case"
    SANITIZER_INCOMPLETE = "sanitizer_incomplete"
    SANITIZER_PENDING = "sanitizer_pending"  # kcourse watch: still running after the verdict
    SANITIZER_SUPERSEDED = "sanitizer_superseded"  # kcourse watch: the file changed before it ended
    # speed and memory
    SLOW = "slow"
    NO_GPU = "no_gpu"
    QUICK = "quick"  # --quick
    NO_SOLUTION = "no_solution"
    NO_TIMED_SIZES = "no_timed_sizes"
    IMPLAUSIBLE_TIMING = "implausible_timing"
    GPU_SHARED = "gpu_shared"
    HOST_BUSY = "host_busy"  # the timing probe disagreed while the host starved the learner's process of CPU
    CORRUPT_CALIBRATION = "corrupt_calibration"
    TOO_MUCH_MEMORY = "too_much_memory"
    NOT_MEASURED = "not_measured"
    # the capstone
    BASELINE_FAILED = "baseline_failed"
    KERNEL_FAILED = "kernel_failed"
    NO_KERNELS = "no_kernels"


class Order(Vocab):
    """What a grading parent tells its child after the job (grader/run/ -> grader/child/worker.py): each message is
    a JSON object whose key is the order (TIME's carries COMPILE_FIRST beside it). A trial to run is a message of its
    own ({"case", "k", ...})."""

    COMPILE_CASES = "compile_cases"  # before the trials: compile for these cases ([index]), then COMPILED (gpu_lock)
    END_TRIALS = "end_trials"  # every numerics trial has been sent
    TIME = "time"  # time these sizes: [{case, label, anchor, ...}]; any other message after the trials ends the run
    COMPILE_FIRST = "compile_first"  # with TIME, true: compile for the timed sizes at a go of its own (gpu_lock)
    STOP = "stop"  # no timing: end as after a grade
    GO = "go"  # the parent is listening: start the next timed burst (its clock brackets it)
    PROBE_AGAIN = "probe_again"  # true: run the timing probe's bursts once more; false: end


# A STEP event's text while the child compiles (child/compile_steps.py): the parent times these steps (child_link)
COMPILING = "compiling "


class Event(Vocab):
    """What a grading child (grader/child/worker.py, worker_tools.py; grader/capstone/train.py) tells its parent."""

    READY = "ready"  # started, torch imported: the device it has
    STEP = "step"  # what it is doing now (the "still running" lines and a timeout's message say it)
    LOADED = "loaded"  # the learner's file imported
    TRIAL = "trial"  # one numerics trial ran: its output files and the integrity evidence
    TRIALS_DONE = "trials_done"
    COMPILED = "compiled"  # compiled, launching nothing (Order.COMPILE_CASES, COMPILE_FIRST): the parent's turn
    TIMING_START = "timing_start"
    TIMED = "timed"  # one timed size: the medians it measured
    PROBE_START = "probe_start"  # the parent's clock times the bursts between these two
    PROBE_END = "probe_end"
    CHECK = "check"  # a failure of the learner's code, found in the child
    TOOL = "tool"  # profile / tune results
    DONE = "done"
    ERROR = "error"
    GARBLED = "garbled"  # the parent's name for a line it could not read
    # the capstone's training run
    RUN = "run"
    BLOCK = "block"
    PROGRESS = "progress"
