"""add2 (transformer-ops chapter 1): a kernel bound as a PyTorch operator and built three ways, and what the
grader grew for it: versions named for what differs (jit, setup, cmake: picked with --lang), a project of
several files (`files = [...]`: the learner's kernel copied beside the given wrapper, header and build
files), and the setup.py and CMake builds beside torch's JIT loader (grader/toolchain/op_build.py).

On the CPU: the versions resolve by name, each compiles the stub and the solution for sm_90, the given
CMakeLists.txt configures against torch's CMake config (where cmake exists), setup.py names its extension
from TORCH_EXTENSION_NAME, and the classic mistakes are played in torch against the spec's cases
(simulated_kernels.py). On a GPU (`pytest -m gpu -s`) each build is built, loaded and graded for real."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import ROOT, submission
from simulated_kernels import (
    cpu_cases,
    exercise,
    fails_somewhere,
    figure_line,
    first_failure,
    grade_fixture,
    store,
    verdicts,
)

from grader.core.discovery import resolve
from grader.core.spec import SpecError, load_spec
from grader.run.grade import grade
from grader.toolchain import build, op_build

SPEC = exercise("add2")
FOLDER = ROOT / "exercises" / "add2"
SOLUTION = ROOT / "solutions" / "add2" / "add2_kernel.cu"
BUILDS = ("jit", "setup", "cmake")


# --- the versions and the grader's growth ----------------------------------------------------------------


def test_the_three_builds_are_versions_of_one_exercise_picked_by_name():
    assert set(SPEC.variants) == set(BUILDS)
    for name in BUILDS:
        variant = resolve(("add2",), lang=name).variant
        assert (variant.lang, variant.kind, variant.build, variant.language) == (name, "torch_op", name, "cuda")
        assert variant.stub == "add2_kernel.cu" and variant.entry == "add2"
        assert SPEC.variant(variant.lang) == variant  # what the sandboxed child looks up from the job
    assert resolve(("add2",)).variant.build == "jit"  # default_lang
    assert resolve(("add2",), lang="cuda").variant.build == "jit"  # a .cu file's language: the default version


def test_a_version_named_for_no_build_or_language_is_refused_with_the_names():
    with pytest.raises(SpecError, match="cmake, jit, setup"):
        SPEC.variant("make")


def _spec(tmp_path: Path, variant: str) -> Path:
    folder = tmp_path / "demo"
    folder.mkdir()
    (folder / "spec.toml").write_text(
        'id = "demo"\n' + variant + '\n[outputs.y]\nshape = ["n"]\n[[cases]]\nn = 1\n'
        "[tolerance.float32]\natol = 0\nrtol = 0\n"
    )
    return folder


@pytest.mark.parametrize(
    "variant,message",
    [
        ('[variants.triton]\nkind = "cuda"\nstub = "k.cu"\nentry = "k"\nargs = ["y"]', "name it cuda"),
        (
            '[variants.setup]\nkind = "torch_op"\nbuild = "setup"\nstub = "k.cu"\nentry = "k"\nargs = ["y"]',
            "needs setup.py",
        ),
        (
            '[variants.jit]\nkind = "torch_op"\nstub = "k.cu"\nfiles = ["ops.cpp"]\nentry = "k"\nargs = ["y"]',
            "ops.cpp not found",
        ),
        ('[variants.cuda]\nkind = "cuda"\nbuild = "cmake"\nstub = "k.cu"\nentry = "k"\nargs = ["y"]', "apply to kind"),
        (
            '[variants.jit]\nkind = "torch_op"\nbuild = "make"\nstub = "k.cu"\nentry = "k"\nargs = ["y"]',
            "known: jit, setup, cmake",
        ),
    ],
)
def test_build_options_that_could_not_work_are_refused_when_the_spec_loads(tmp_path, variant, message):
    with pytest.raises(SpecError, match=message):
        load_spec(_spec(tmp_path, variant))


@pytest.mark.solutions
def test_each_project_gets_its_own_operator_namespace_and_a_single_file_keeps_its_old_one():
    import hashlib

    jit, setup = SPEC.variants["jit"], SPEC.variants["setup"]
    stub = FOLDER / "add2_kernel.cu"
    names = {op_build.extension_name(v, f) for v in (jit, setup) for f in (stub, SOLUTION)}
    assert len(names) == 4 and all(n.startswith("kcourse_add2_kernel_") for n in names)
    assert op_build.extension_name(jit, stub) == op_build.extension_name(jit, stub)
    gelu = exercise("gelu_op").variants["cuda"]  # one file, jit: the name is what it was before `files`
    source = ROOT / "exercises" / "gelu_op" / "gelu_op.cu"
    assert (
        op_build.extension_name(gelu, source)
        == f"kcourse_gelu_op_{hashlib.sha256(source.read_bytes()).hexdigest()[:12]}"
    )


def test_the_project_is_the_learners_file_under_the_stubs_name_beside_the_given_files(tmp_path):
    mine = tmp_path / "my_try.cu"
    mine.write_text("// mine\n")
    cmake = SPEC.variants["cmake"]
    project = op_build.stage(cmake, mine, tmp_path / "project")
    assert sorted(p.name for p in project.iterdir()) == ["CMakeLists.txt", "add2.h", "add2_kernel.cu", "add2_ops.cpp"]
    assert (project / "add2_kernel.cu").read_text() == "// mine\n"
    before = (project / "add2_ops.cpp").stat().st_mtime_ns
    op_build.stage(cmake, mine, project)  # unchanged: not rewritten, so the build tools see it as built
    assert (project / "add2_ops.cpp").stat().st_mtime_ns == before


def test_a_jit_build_killed_midway_does_not_make_the_next_one_wait_for_its_lock(tmp_path, monkeypatch):
    """torch's JIT loader leaves its `lock` file behind when killed and the next load waits for it to go:
    a grade stopped during a build (Ctrl-C, its time limit) made every later grade of the exercise hang."""
    import fcntl

    import torch.utils.cpp_extension

    folder = tmp_path / "build"
    folder.mkdir()
    (folder / "lock").write_text("")  # what a killed build leaves
    seen = {}

    def load(name, sources, build_directory, **kwargs):
        seen["stale lock"] = (Path(build_directory) / "lock").exists()
        with open(Path(build_directory) / ".lock", "w") as other:  # another grader's build must wait meanwhile
            try:
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
                seen["held"] = False
            except BlockingIOError:
                seen["held"] = True

    monkeypatch.setattr(torch.utils.cpp_extension, "load", load)
    gelu = exercise("gelu_op").variants["cuda"]
    op_build.build(gelu, ROOT / "exercises" / "gelu_op" / "gelu_op.cu", "kcourse_gelu_op_test", folder)
    assert seen == {"stale lock": False, "held": True}


def test_a_failed_builds_log_is_cut_to_its_errors_with_file_names():
    project = Path("/tmp/kc/project")
    log = (
        "-- The CXX compiler identification is GNU 12\n-- Configuring done\n[1/3] Building CUDA object x.o\n"
        f'FAILED: CMakeFiles/x.dir/add2_kernel.cu.o\n{project}/add2_kernel.cu(12): error: identifier "k" is undefined\n'
        "      c[k] = a[k];\n        ^\n\n1 error detected in the compilation of add2_kernel.cu.\nninja: build stopped\n"
    )
    text = op_build.build_errors(log, project)
    assert text.startswith('add2_kernel.cu:12: error: identifier "k" is undefined') and "c[k] = a[k];" in text
    assert "Configuring done" not in text and "ninja:" not in text


def test_a_machine_without_cmake_is_told_to_install_it_and_the_learner_is_not_blamed(monkeypatch):
    monkeypatch.setattr(op_build, "find_cmake", lambda: None)
    assert "pip install cmake" in op_build.missing_tool(SPEC.variants["cmake"])
    assert op_build.missing_tool(SPEC.variants["setup"]) is None


# --- on the CPU: each build compiles the stub and the solution; the given build files work ----------------


@pytest.mark.nvcc
@pytest.mark.solutions
@pytest.mark.parametrize("lang", BUILDS)
def test_the_stub_and_the_solution_compile_for_sm_90_under_every_build(lang):
    if torch.cuda.is_available():
        pytest.skip("a GPU grades for real (below)")
    for source in ("stubs", "solutions"):
        result = grade(resolve(("add2",), lang=lang), source=source, seed=1, record=False)
        checks = {c.name: c for c in result.checks}
        assert checks["build"].status == "passed", checks["build"].message
        assert "MatAdd" in checks["build"].message and checks["numerics"].status == "skipped"
        assert lang == "jit" or op_build.BUILDS[lang] in checks["build"].message  # setup.py / CMakeLists.txt: on a GPU


@pytest.mark.nvcc
@pytest.mark.slow
def test_the_given_cmakelists_configures_against_torchs_cmake_config(tmp_path):
    if op_build.find_cmake() is None:
        pytest.skip("cmake is not installed here: the CMake build is checked on the GPU machine (pip install cmake)")
    project = op_build.stage(SPEC.variants["cmake"], FOLDER / "add2_kernel.cu", tmp_path / "project")
    configure, _ = op_build.cmake_commands(project, "kcourse_add2_check", "9.0")
    done = subprocess.run(configure, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, op_build.build_errors(done.stdout + done.stderr, project)
    assert "TORCH_EXTENSION_NAME:STRING=kcourse_add2_check" in (project / "build" / "CMakeCache.txt").read_text()


@pytest.mark.slow
def test_the_given_setup_py_names_its_extension_from_torch_extension_name(tmp_path):
    """setup.py's CUDAExtension needs a CUDA torch to build; naming it needs none (CUDA_HOME is filled in)."""
    project = op_build.stage(SPEC.variants["setup"], FOLDER / "add2_kernel.cu", tmp_path / "project")
    script = (
        "import sys, torch.utils.cpp_extension as c; c.CUDA_HOME = c.CUDA_HOME or '/usr/local/cuda'; "
        "sys.argv = ['setup.py', '--name']; exec(open('setup.py').read())"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, TORCH_EXTENSION_NAME="kcourse_add2_named"),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "kcourse_add2_named"


@pytest.mark.slow
@pytest.mark.nvcc
def test_the_fixtures_compile():
    nvcc = build.find_nvcc()
    # the ladder's step 1, and the spec's [[mistakes]] with a file of their own
    sources = [submission(name) for name in ("add2_2d.cu", "add2_no_tail.cu")]
    jobs = [
        subprocess.Popen(
            [nvcc, "-std=c++17", "-arch=sm_90", "-cubin", f"-I{FOLDER}", "-o", os.devnull, str(source)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for source in sources
    ]
    for source, job in zip(sources, jobs):
        assert job.wait() == 0, f"{source.name}: {job.stdout.read()}"


# --- on the CPU: the mistakes played against the spec's cases ---------------------------------------------


def two_d(block: int, round_up: bool):
    """The 2-D kernel: blocks of block x block threads, the grid n / block rounded up or (the document) down."""

    def model(inputs, outputs, params):
        n = params["n"]
        blocks = -(-n // block) if round_up else n // block
        m = min(n, blocks * block)  # the rows and columns some thread covers
        a, b, c = inputs["a"], inputs["b"], outputs["c"]
        store(c[:m, :m], a[:m, :m] + b[:m, :m])

    return model


def float4_without_tail(inputs, outputs, params):
    whole = (inputs["a"] + inputs["b"]).reshape(-1)
    k = whole.numel() - whole.numel() % 4
    store(outputs["c"].view(-1)[:k], whole[:k])


CORRECT = {
    "the 2-D kernel, grid rounded up": two_d(16, round_up=True),
    "the flat float4 kernel with its tail": lambda i, o, p: store(o["c"], i["a"] + i["b"]),
}
MISTAKES = {
    "the document's grid(n / 16, n / 16)": two_d(16, round_up=False),
    "float4 without the scalar tail": float4_without_tail,
}


def test_cases_are_ragged_tiny_and_one_whole_block():
    sizes = {c.params["n"] for c in cpu_cases(SPEC)}
    assert {1, 15, 16, 17} <= sizes and any(n % 16 and n > 256 for n in sizes) and any(n * n % 4 for n in sizes)
    assert 3 * 4 * SPEC.performance.cases[-1].params["n"] ** 2 >= 256 * 2**20  # the verdict size moves >= 256 MB


@pytest.mark.parametrize("name", list(MISTAKES))
def test_every_classic_mistake_fails_some_case(name):
    found = fails_somewhere(SPEC, MISTAKES[name])
    assert any(v != "ok" for v in found.values()), f"{name} passes every case: {found}"


@pytest.mark.parametrize("name", list(CORRECT))
def test_honest_kernels_pass_every_case(name):
    found = verdicts(SPEC, CORRECT[name])
    assert all(v == "ok" for v in found.values()), found


# --- on a GPU: every build built, loaded and graded --------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.solutions
@pytest.mark.parametrize("lang", BUILDS)
def test_the_solution_passes_under_every_build_at_copy_bandwidth(lang):
    if lang == "cmake" and op_build.find_cmake() is None:
        pytest.skip("cmake is not installed on this GPU machine: `pip install cmake` into the course's environment")
    result = grade(resolve(("add2",), lang=lang), source="solutions", seed=21, record=False)
    assert result.status == "passed", result.verdict
    print("\n" + figure_line(f"add2 ({lang}) solution", result))
    assert (result.timings[-1].roofline_pct or 0) >= 85


@pytest.mark.gpu
def test_the_stub_fails_on_the_gpu():
    result = grade(resolve(("add2",)), source="stubs", seed=5, record=False)
    assert first_failure(result).details.get("code") in ("not_written", "mismatch"), result.verdict


@pytest.mark.bench
@pytest.mark.gpu
def test_the_documents_kernel_rounded_up_passes_and_prints_its_ladder_figure():
    result = grade_fixture("add2", "add2_2d.cu")
    assert result.status == "passed", result.verdict
    print("\n" + figure_line("add2 ladder step 1 (2-D, 16 x 16)", result))
