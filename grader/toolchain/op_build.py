"""Building a torch operator the three ways a course teaches: torch's JIT loader, the exercise's setup.py,
CMake. The learner's file is copied under the stub's name beside the files the spec gives complete
(`files = [...]`: sources, headers, setup.py, CMakeLists.txt), so every build sees the same project.

It runs in the sandboxed child: loading an operator runs the learner's static initialisers. Each build
gets its own operator namespace, TORCH_EXTENSION_NAME, named by the files' content (the JIT loader
defines it; the given setup.py and CMakeLists.txt read it): the learner's and the solution's operators
live side by side in one process, and an unchanged project is built once."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from grader.core.errors import KcourseError
from grader.core.spec import BUILDS, Variant  # noqa: F401 (BUILDS: re-exported, tests name it here)
from grader.toolchain.build import BUILD_TIMEOUT_S, _locked, find_nvcc, format_compiler_errors

SOURCE_SUFFIXES = (".cu", ".cpp", ".cc", ".cxx")  # what the JIT loader compiles (headers are only copied)
CMAKE_HINT = (
    "cmake was not found: this version builds the operator with CMake. Install it (`pip install cmake` "
    "in the course's environment, or your system's package) and grade again"
)


class BuildFailed(KcourseError):
    """The build stopped; the message is what the learner needs from its log."""


def box_build_dirs(variant: Variant, source: Path) -> list[Path]:
    """The folder a boxed child builds this operator in, made now (a Landlock rule needs it to exist); [] for
    other kinds. Named by content and never listable from the box: no other build is in reach."""
    if not variant.kind_of.builds_in_child:
        return []
    from grader.core.paths import build_cache_dir

    folder = build_cache_dir() / extension_name(variant, source)
    folder.mkdir(parents=True, exist_ok=True)
    return [folder]


def extension_name(variant: Variant, source: Path) -> str:
    """kcourse_<stem>_<digest of every file of the project>: one namespace per distinct project."""
    digest = hashlib.sha256(source.read_bytes())
    for given in variant.files:
        digest.update(given.name.encode() + b"\0" + given.read_bytes())
    if variant.build != "jit":
        digest.update(variant.build.encode())
    return f"kcourse_{source.stem}_{digest.hexdigest()[:12]}"


def stage(variant: Variant, source: Path, folder: Path) -> Path:
    """The project in `folder`: the given files, and the learner's file under the stub's name. A file is
    rewritten only when it differs, so the build tools see an unchanged project as built."""
    folder.mkdir(parents=True, exist_ok=True)
    for data, name in [(f.read_bytes(), f.name) for f in variant.files] + [(source.read_bytes(), variant.stub)]:
        target = folder / name
        if not target.exists() or target.read_bytes() != data:
            partial = target.with_name(f"{name}.{os.getpid()}.tmp")
            partial.write_bytes(data)
            os.replace(partial, target)  # another grader staging the same project never reads half a file
    return folder


def missing_tool(variant: Variant) -> str | None:
    """What this machine lacks to build the version (None: nothing): the machine's problem, not the learner's."""
    if variant.kind_of.builds_in_child and variant.build == "cmake" and find_cmake() is None:
        return CMAKE_HINT
    return None


def find_cmake() -> str | None:
    beside_python = Path(sys.executable).parent / "cmake"  # `pip install cmake` puts it in the environment
    return shutil.which("cmake") or (str(beside_python) if beside_python.exists() else None)


def build(variant: Variant, source: Path, name: str, folder: Path) -> Path | None:
    """Build the operator; the library to load (setup, cmake), or None when the JIT loader loaded it."""
    folder.mkdir(parents=True, exist_ok=True)
    with _locked(folder):  # two graders (grade-batch, the sanitizer) may build the same project at once
        if variant.build == "jit":
            _build_jit(variant, source, name, folder)
            return None
        project = stage(variant, source, folder / "project")
        library = _finished(project)
        if library is None:
            (_build_with_setup if variant.build == "setup" else _build_with_cmake)(project, name)
            library = _library(project, name)
            (project / FINISHED).write_text(str(library))  # a build cut short never looks finished
    return library


FINISHED = ".kcourse-built"  # in the project folder once its build succeeded: the library's path


def _finished(project: Path) -> Path | None:
    try:
        library = Path((project / FINISHED).read_text())
    except OSError:
        return None
    return library if library.is_file() else None


def _library(project: Path, name: str) -> Path:
    """What setup.py (<name>.cpython-*.so, in place) or CMake (build/lib<name>.so) made."""
    found = sorted(project.glob(f"{name}*.so")) + sorted((project / "build").glob(f"lib{name}*.so"))
    if not found:
        raise BuildFailed(
            f"the build finished but made no {name}*.so: the extension (setup.py) or library "
            "(CMakeLists.txt) must be named from TORCH_EXTENSION_NAME, as the given files do"
        )
    return found[0]


def _build_jit(variant: Variant, source: Path, name: str, folder: Path) -> None:
    from torch.utils.cpp_extension import load as load_extension

    if variant.files:
        project = stage(variant, source, folder / "project")
        sources = [project / variant.stub] + [project / f.name for f in variant.files if f.suffix in SOURCE_SUFFIXES]
        includes = [str(project)]
    else:  # one file: compiled where it is, as before
        sources, includes = [source], []
    clear_stale_baton(folder)
    try:
        load_extension(
            name=name,
            sources=[str(s) for s in sources],
            build_directory=str(folder),
            extra_include_paths=includes,
            is_python_module=False,
            extra_cuda_cflags=["-O3", "-lineinfo"],
            verbose=False,
        )
    except RuntimeError as exc:
        raise BuildFailed(format_compiler_errors(str(exc), source)) from None


def clear_stale_baton(folder: Path) -> None:
    """Remove the `lock` file torch's JIT loader leaves in its build folder when a build is killed (a grade
    stopped by Ctrl-C or its time limit): the loader waits for that file to go, so every later grade of the
    exercise hung until its time limit (a GPU test slice waited 467 s). build() holds this folder's flock,
    which dies with its process, so no live build of ours owns the file."""
    (folder / "lock").unlink(missing_ok=True)


def _build_with_setup(project: Path, name: str) -> None:
    _run([sys.executable, "setup.py", "build_ext", "--inplace"], project, name, "python setup.py build_ext --inplace")


def _build_with_cmake(project: Path, name: str) -> None:
    import torch

    if find_cmake() is None:
        raise BuildFailed(CMAKE_HINT)
    major, minor = torch.cuda.get_device_capability() if torch.cuda.is_available() else (9, 0)
    configure, compile_ = cmake_commands(project, name, f"{major}.{minor}")
    _run(configure, project, name, "cmake -S . -B build")
    _run(compile_, project, name, "cmake --build build")


def cmake_commands(project: Path, name: str, capability: str) -> tuple[list[str], list[str]]:
    """Configure and build as a learner types them, plus what the grader knows: torch's CMake config
    (torch.utils.cmake_prefix_path), the namespace, the GPU's compute capability (torch's config reads
    TORCH_CUDA_ARCH_LIST and overrides CMAKE_CUDA_ARCHITECTURES) and the CUDA toolkit torch's own
    builders use (CUDA_HOME), so the three builds compile with the same nvcc."""
    import torch
    from torch.utils.cpp_extension import CUDA_HOME

    cmake, build_dir = find_cmake() or "cmake", str(project / "build")
    configure = [
        cmake,
        "-S",
        str(project),
        "-B",
        build_dir,
        "-DCMAKE_BUILD_TYPE=Release",
        f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}",
        f"-DTORCH_EXTENSION_NAME={name}",
        f"-DTORCH_CUDA_ARCH_LIST={capability}",
        f"-DCMAKE_CUDA_ARCHITECTURES={capability.replace('.', '')}",
    ]
    toolkit_nvcc = Path(CUDA_HOME or "/nonexistent") / "bin" / "nvcc"
    if toolkit_nvcc.exists():
        configure += [
            f"-DCMAKE_CUDA_COMPILER={toolkit_nvcc}",
            f"-DCUDA_TOOLKIT_ROOT_DIR={CUDA_HOME}",
            f"-DCUDAToolkit_ROOT={CUDA_HOME}",
        ]
    elif find_nvcc():
        configure += [f"-DCMAKE_CUDA_COMPILER={find_nvcc()}"]
    ninja = shutil.which("ninja") or str(Path(sys.executable).parent / "ninja")  # pip's ninja: in the environment
    if Path(ninja).exists():
        configure += ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"]
    return configure, [cmake, "--build", build_dir, "-j", str(os.cpu_count() or 2)]


def _run(command: list[str], project: Path, name: str, what: str) -> None:
    env = dict(
        os.environ,
        TORCH_EXTENSION_NAME=name,
        PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    )
    try:
        import torch

        if torch.cuda.is_available():  # torch's builders compile for this GPU only
            env.setdefault("TORCH_CUDA_ARCH_LIST", "{}.{}".format(*torch.cuda.get_device_capability()))
    except ImportError:
        pass
    try:
        proc = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise BuildFailed(f"`{what}` ran past {BUILD_TIMEOUT_S} s and was stopped") from None
    if proc.returncode != 0:
        raise BuildFailed(f"`{what}` failed:\n" + build_errors(proc.stdout + proc.stderr, project))


_ERROR = re.compile(r"\berror\b|CMake Error", re.I)


def build_errors(log: str, project: Path) -> str:
    """The lines of a setup.py or CMake log that say what went wrong (each error and the three lines after
    it: the source line and the caret, or CMake's explanation), paths shown as file names; else its end."""
    lines = log.replace(str(project) + os.sep, "").splitlines()
    keep: list[int] = []
    for index, line in enumerate(lines):
        if _ERROR.search(line):
            keep += [i for i in range(index, min(index + 4, len(lines))) if i not in keep]
    text = "\n".join(lines[i] for i in keep[:60]) if keep else "\n".join(lines[-30:])
    return format_compiler_errors(text, project / "x.cu") or text
