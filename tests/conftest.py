"""Shared test setup: each test gets its own results store and build cache; GPU and nvcc tests skip
where the machine lacks them (run `pytest -m gpu` on a GPU machine before calling GPU work done).

Tiers (pyproject's addopts): plain `pytest` runs the fast tier, unit tests and a small end-to-end sample; tests
marked `slow` (a grade's child, validate, a CLI grade, an exercise's nvcc build, or seconds of work) run with
`pytest -m slow`, and `bench` (ladder figures printed on a GPU, no bar asserted on them) with `pytest -m bench`.
A -m on the command line replaces the default one: .ci/run runs `-m "not bench"`; the short GPU tier is
`-m "gpu and not slow and not bench"`."""

from __future__ import annotations

import functools
import inspect
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import worker_order

ROOT = Path(__file__).resolve().parent.parent
SUBMISSIONS = Path(__file__).resolve().parent / "fixtures" / "submissions"


def _has_gpu() -> bool:
    smi = shutil.which("nvidia-smi")
    if not smi or subprocess.run([smi, "-L"], capture_output=True).returncode != 0:
        return False
    import torch

    return torch.cuda.is_available()


HAS_GPU = _has_gpu()
# With a GPU, tests may run in parallel (pytest -n): grades share it, each times it alone (grader/core/gpu_lock.py)
if HAS_GPU:
    import tempfile

    os.environ.setdefault("KCOURSE_GPU_LOCK", str(Path(tempfile.gettempdir()) / f"kcourse-gpu-{os.getuid()}.lock"))
    # each worker's compile passes on its share of the host's cores, not on all of them (child/compile_steps.py)
    _workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    os.environ.setdefault("KCOURSE_COMPILE_THREADS", str(max(2, (os.cpu_count() or 1) // _workers)))
else:
    # Without a GPU every Triton kernel a test runs in its own process is interpreted. Triton's standard library
    # (tl.zeros, tl.sum, ...) is interpreted only if TRITON_INTERPRET is set when triton.language is first
    # imported, and `import torch._dynamo` (torch.compile, opcheck) imports it: a test that reached it first left
    # its pytest worker unable to interpret any kernel that calls one ("Cannot call @triton.jit'd outside of the
    # scope of a kernel"), failing whichever interpreter tests xdist then gave that worker.
    os.environ.setdefault("TRITON_INTERPRET", "1")


# Files sent to the workers first: the learner kit's own fast tier is one test of about two minutes; dispatched in
# alphabetical order it started with a sixth of a CI run left, and the other worker idled while it finished.
FIRST = ("tests/test_release.py",)


def pytest_collection_modifyitems(config, items):
    from grader.toolchain.build import find_nvcc

    items.sort(key=lambda item: not item.nodeid.startswith(FIRST))  # stable: every other test keeps its order
    _leave_out_what_passed_in_the_kit(config, items)

    no_gpu = pytest.mark.skip(reason="no NVIDIA GPU here: run `pytest -m gpu` on a GPU machine")
    no_nvcc = pytest.mark.skip(reason="nvcc not found: install the CUDA Toolkit")
    has_nvcc = find_nvcc() is not None
    no_solutions = pytest.mark.skip(reason="solutions/ is absent (a learner's kit)")
    has_solutions = (ROOT / "solutions").is_dir()
    for item in items:
        if "solutions" in item.keywords and not has_solutions:
            item.add_marker(no_solutions)
        if "gpu" in item.keywords and not HAS_GPU:
            item.add_marker(no_gpu)
        if "nvcc" in item.keywords and not has_nvcc:
            item.add_marker(no_nvcc)
        if HAS_GPU and "gpu" in item.keywords and _times_in_process(item):
            item.add_marker(pytest.mark.gpu_exclusive)


# .ci/run runs the learner kit's fast tier first, in a fresh release (the kit README's `pytest`), and logs the tests
# that passed there (KCOURSE_PASSED_LOG); its run of the repository (KCOURSE_PASSED_IN_KIT: that log) leaves out
# those whose own code names none of the instructor's files. The kit is the repository less those files, so such a
# test ran the same code on the same files there. One that names them (a solution, a fixture) runs again here,
# where they exist.
PASSED_LOG, PASSED_IN_KIT = os.environ.get("KCOURSE_PASSED_LOG"), os.environ.get("KCOURSE_PASSED_IN_KIT")
INSTRUCTORS_FILES = re.compile(r"solution|fixture|submission", re.IGNORECASE)


def pytest_runtest_logreport(report):
    if PASSED_LOG and report.when == "call" and report.passed and not os.environ.get("PYTEST_XDIST_WORKER"):
        with open(PASSED_LOG, "a") as log:  # the controller's copy of each report (a worker's would be a second)
            log.write(report.nodeid + "\n")


def _leave_out_what_passed_in_the_kit(config, items) -> None:
    if not PASSED_IN_KIT or not Path(PASSED_IN_KIT).is_file():
        return  # no kit run (or none passed): everything runs here
    passed = set(Path(PASSED_IN_KIT).read_text().splitlines())
    again = [item.nodeid not in passed or _names_instructors_files(item) for item in items]
    config.hook.pytest_deselected(items=[item for item, run in zip(items, again) if not run])
    items[:] = [item for item, run in zip(items, again) if run]


def _names_instructors_files(item) -> bool:
    try:
        return bool(INSTRUCTORS_FILES.search(inspect.getsource(item.function)))
    except (OSError, TypeError, AttributeError):
        return True  # its code unreadable: run it


# What a test calls when it times kernels in the test's own process, not through a grade's child (do_bench:
# Triton's timer, which test_flash_attention_v2's side-by-side rounds against SDPA use)
IN_PROCESS_TIMING = ("time_alternating", "measure_copy_bandwidth", "race_at_copy_bandwidth", "do_bench")


def _times_in_process(item) -> bool:
    return item.originalname in _timing_functions(str(item.fspath))


@functools.lru_cache(maxsize=None)
def _timing_functions(path: str) -> frozenset[str]:
    """The module's functions that time in their process: those naming a timer, and those naming (calling, or taking
    as a fixture) one of those, to a fixed point. Only they hold the GPU alone: a module's other GPU tests (its
    mistakes, graded in a child) build and grade beside other workers. Read once per module."""
    import ast

    tree = ast.parse(Path(path).read_text())
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            used |= {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
            used |= {a.arg for a in node.args.args}
            used |= {a.name for n in ast.walk(node) if isinstance(n, ast.ImportFrom) for a in n.names}
            names[node.name] = used
    timing = set(IN_PROCESS_TIMING)
    while True:
        more = {name for name, used in names.items() if used & timing} - timing
        if not more:
            return frozenset(timing)
        timing |= more


@pytest.fixture(autouse=True)
def gpu_alone(request, isolated_state):
    """A GPU test that times in its own process (`gpu_exclusive`, set at collection for tests that call the timers)
    holds the GPU lock exclusively: other pytest workers' grades wait, and what it starts runs inside. It takes the
    lock after `isolated_state` has seeded the ceilings: a worker seeding them holds the ceilings' file lock while it
    waits for the GPU, so a test holding the GPU must never then wait for that file lock."""
    if not HAS_GPU or not request.node.get_closest_marker("gpu_exclusive"):
        yield
        return
    from grader.core import gpu_lock

    with gpu_lock.exclusive():
        yield


@pytest.fixture(autouse=True)
def grade_as_the_learner(request, monkeypatch):
    """On a GPU a test's grade() times what `kcourse grade` times: the verdict's size, PyTorch beside it, not every
    size with PyTorch beside each (`kcourse grade --full`, validate): timing phases queue under the GPU lock, one
    grade at a time. A test that reads another size's figures is marked `all_sizes`. An exercise with a memory
    limit still runs every size, for its memory alone but the verdict's (judge.memory_only).

    compute-sanitizer runs only in the tests about it (marked `sanitizer`: tests/test_sanitizer.py, the mistakes it
    must catch, every solution's grade in tests/test_gpu.py): elsewhere it held the GPU lock shared for 5-80 s a
    grade beside the numerics, which the test does not read, while other workers' timers waited for the lock."""
    if not HAS_GPU or "gpu" not in request.keywords:
        return
    from grader.run import grade as grading

    defaults = dict(grading.grade.__kwdefaults__)
    if not request.node.get_closest_marker("all_sizes"):
        defaults.update(timed_sizes="verdict", job_extra={"torch_anchor": True})
    if not request.node.get_closest_marker("sanitizer"):
        defaults.update(sanitize_code=False)
    monkeypatch.setattr(grading.grade, "__kwdefaults__", defaults)


@pytest.fixture(autouse=True)
def phases_log(request, monkeypatch):
    """`KCOURSE_TEST_PHASES_LOG=FILE`: each grade a test runs appends a JSON line (the test, the exercise, its
    file, source and seed, status, wall time and phases in seconds, when it ended, and how many grading children
    were forked by the fork server or started fresh since the test's last grade). Beside the GPU lock's log
    (KCOURSE_GPU_LOCK_LOG): where a parallel run's time goes inside its grades (`scripts/gpu_lock_report.py LOCK_LOG
    PHASES_LOG`)."""
    path = os.environ.get("KCOURSE_TEST_PHASES_LOG")
    if not path:
        return
    import json
    import time

    from grader.core.records import GradeResult
    from grader.run import forkserver, sandbox

    finish, start = GradeResult.finish, sandbox.Child.__init__
    forked: list[bool] = []  # per child started: did it come from the fork server

    def start_and_note(child, *args, **kwargs):
        start(child, *args, **kwargs)
        forked.append(isinstance(child.proc, forkserver.ForkedChild))

    def finish_and_log(result):
        finish(result)
        line = {"test": request.node.nodeid, "exercise": result.exercise, "lang": result.lang, "seed": result.seed}
        line.update(source=result.source, file=result.file)  # the same file and seed graded twice: a duplicate
        line.update(status=result.status, wall=result.duration_s, phases=dict(result.phases), ended=time.time())
        line.update(children={"forked": sum(forked), "fresh": len(forked) - sum(forked)})
        forked.clear()
        with open(path, "a") as f:  # one short write per line: appends from many workers stay whole
            f.write(json.dumps(line) + "\n")
        return result

    monkeypatch.setattr(GradeResult, "finish", finish_and_log)
    monkeypatch.setattr(sandbox.Child, "__init__", start_and_note)


@pytest.fixture(autouse=True)
def seeded(request):
    """torch's and random's global generators seeded from the test's id: a test that draws unseeded values draws
    the same ones on every run, so its outcome never depends on luck (rope's reference test, comparing float64 with
    float32 math at torch's default atol, failed 29 of 400 fresh draws). The grader draws from its own seeds."""
    import random
    import zlib

    import torch

    seed = zlib.crc32(request.node.nodeid.encode())
    random.seed(seed)
    torch.manual_seed(seed)


@pytest.fixture(autouse=True)
def isolated_state(tmp_path, monkeypatch, request):
    """Results and reports of a test go to its own folder; the build cache is shared per session."""
    monkeypatch.setenv("KCOURSE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KCOURSE_ALLOW_MODIFIED_KIT", "1")  # grade-batch in a checkout with uncommitted edits
    monkeypatch.setenv("KCOURSE_CACHE", str(_session_cache()))
    monkeypatch.setenv("KCOURSE_FORK_SERVER", "1")  # grading children forked after one torch import (forkserver.py)
    if not HAS_GPU:
        monkeypatch.setenv("KCOURSE_DEVICE", "cpu")
    if HAS_GPU:
        _seed_ceilings(tmp_path / "home")
    if not request.node.get_closest_marker("emulator"):
        # A CUDA grade without a GPU is compiled only, as before the emulator: tests about something else need not
        # spend seconds running kernels on the CPU (those that do are marked `emulator`)
        monkeypatch.setenv("KCOURSE_CUDA_CPU", "off")
    return tmp_path / "home"


_CACHE: list[Path] = []


# CI (.ci/run) names the build cache its `kcourse validate` steps just filled: the tests compile the same stubs and
# solutions with the same flags (the attention operators' compile checks alone took 5 minutes), and the cache is
# keyed by source, flags and compiler, so a hit is the same build.
SHARED_CACHE = os.environ.get("KCOURSE_TEST_BUILD_CACHE")


def _session_cache() -> Path:
    if not _CACHE:
        import tempfile

        _CACHE.append(Path(SHARED_CACHE) if SHARED_CACHE else Path(tempfile.mkdtemp(prefix="kcourse-test-cache-")))
        _CACHE[0].mkdir(parents=True, exist_ok=True)  # KCOURSE_TEST_BUILD_CACHE may name a folder not yet made
    return _CACHE[0]


def _seed_ceilings(home: Path) -> None:
    """The GPU's copy and matmul ceilings, measured once for the session (every worker's, where the build cache is
    shared) and put in each test's state folder: a grading child measures them otherwise, in each test (about 4 s,
    and on a GPU other workers share)."""
    import fcntl

    seed = _session_cache() / "device_ceilings.json"
    with open(str(seed) + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not seed.exists() and not _CEILINGS_FAILED:
            try:
                _measure_ceilings(seed)
            except Exception as exc:  # each grading child measures them then, as before
                _CEILINGS_FAILED.append(exc)
                print(f"tests/conftest.py: the GPU's ceilings were not measured ({exc!r}); each grade measures them")
    if seed.exists():
        home.mkdir(parents=True, exist_ok=True)
        shutil.copy(seed, home / "device_ceilings.json")


_CEILINGS_FAILED: list[Exception] = []


def _measure_ceilings(path: Path) -> None:
    import json

    import torch

    from grader.child import timing
    from grader.core import gpu_lock

    with gpu_lock.exclusive():
        measured = timing.measure_ceilings()
    path.write_text(json.dumps({torch.cuda.get_device_properties(0).name: measured}))


def pytest_configure(config):
    """Under `pytest -n N` the workers share one build cache, made here in the controller before they start (they
    inherit its environment): the same stubs and solutions are built once, not once per worker. The workers are
    told the scheduler too (their own `dist` option reads "no"): worker_order.py deals out the longest tests."""
    config.pluginmanager.register(worker_order.LongestFirst(), "kcourse-longest-first")
    controller = not os.environ.get("PYTEST_XDIST_WORKER") and getattr(config.option, "numprocesses", None)
    if controller:
        os.environ[worker_order.DIST] = str(config.getvalue("dist"))
    if SHARED_CACHE or not controller:
        return
    import tempfile

    _OWN_SHARED.append(tempfile.mkdtemp(prefix="kcourse-test-cache-"))
    os.environ["KCOURSE_TEST_BUILD_CACHE"] = _OWN_SHARED[0]


_OWN_SHARED: list[str] = []

# The [[mistakes]] table's test: one file, about a third of the CPU tiers' time, each row an independent grade
MISTAKES_TABLE = "tests/test_exercise_mistakes.py::test_each_mistakes_fixture_fails_as_its_spec_says["


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: without it installed, never called
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile` (a file's tests on one worker, in order: module fixtures and the interpreter tests that
    need their file's order), except the [[mistakes]] table, whose rows go out by exercise: as one file, its nine
    minutes of grades (of a 2-core CI run's seventeen) could only run on one worker; split, both workers stay
    busy to the run's last ten seconds."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FileOrExercise(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith(MISTAKES_TABLE):  # "...says[add_rms_norm-triton-one_row_stride-cpu]"
                return MISTAKES_TABLE + nodeid[len(MISTAKES_TABLE) :].split("-", 1)[0]
            return super()._split_scope(nodeid)

    return FileOrExercise(config, log)


def pytest_sessionfinish(session, exitstatus):
    """The session's build cache goes with the session: left behind, each run of the suite kept 78 MB in /tmp
    (248 of them filled this machine's disk). One CI shares is CI's to remove; the workers' shared one, the
    controller's (it finishes last)."""
    for path in [] if SHARED_CACHE else [*_CACHE, *_OWN_SHARED]:
        shutil.rmtree(path, ignore_errors=True)
    _CACHE.clear()


def submission(name: str) -> Path:
    """A fixture of learner code. A learner's kit ships none (some pass an exercise), so there the test skips."""
    if not SUBMISSIONS.is_dir():
        pytest.skip(
            "tests/fixtures/submissions/ is absent (a learner's kit): this test grades the instructor's fixtures"
        )
    return SUBMISSIONS / name


EDIT_SUFFIX = ".edit.toml"  # a fixture that is the solution with a few edits, not a copy of it (see edited_solution)


def edited_solution(name: str, solution: Path, folder: Path) -> Path:
    """The learner's file a `.edit.toml` fixture describes: `solution` (or the fixture its `base` names: a ladder's
    step, for a mistake the solution has no line for) with each of its [[edit]] tables applied (a one-line mistake
    needs no 200-line copy of the solution, and the edit follows the solution as it changes),
    written to `folder` under the solution's own name. Each `old` must be found `count` times (default 1), and every
    one is replaced: an edit that no longer finds its text fails, rather than grading the solution unchanged."""
    from grader.core.spec import tomllib  # the spec parser's (tomli before Python 3.11)

    fixture = tomllib.loads(submission(name).read_text())
    base = (
        submission(fixture["base"]) if "base" in fixture else solution
    )  # a ladder's step, where the solution lacks the line
    text = base.read_text()
    for edit in fixture["edit"]:
        found, wanted = text.count(edit["old"]), edit.get("count", 1)
        assert found == wanted, (
            f"{name}: {edit['old']!r} is in {base} {found} times, not {wanted}: quote more of the line, or say "
            "count = N to replace all N"
        )
        text = text.replace(edit["old"], edit["new"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / solution.name).write_text(text)
    return folder / solution.name
