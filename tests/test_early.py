"""What `kcourse grade` starts before it imports torch (grader/run/early.py): on a GPU machine the child, the
references' GPU process and nvcc, so that a one-shot grade pays the import once, overlapped."""

import shutil
import threading

import pytest
from conftest import ROOT

from grader.core.discovery import resolve
from grader.run import early, heavy, sandbox
from grader.toolchain import build


class _Child:
    device, visible_devices = "cuda", None


def _on_a_gpu_machine(monkeypatch, started_early):
    monkeypatch.setattr(build, "gpu_arch", lambda: "sm_90")
    monkeypatch.setattr(sandbox, "early_child", lambda kind, imports=None: _Child())
    monkeypatch.setattr(heavy, "start_early", lambda spec, reference, devices: started_early.append(spec.id))


@pytest.mark.slow
@pytest.mark.skipif(build.find_nvcc() is None, reason="no nvcc here: the early build has nothing to run")
def test_the_early_build_fills_the_cache_the_grades_own_build_reads(tmp_path, monkeypatch):
    """Same arguments, same cache key: the grade's build of the file is then a cache hit (or waits on the
    build's lock), not a second nvcc run."""
    monkeypatch.setenv("KCOURSE_CACHE", str(tmp_path / "cache"))
    started_early: list[str] = []
    _on_a_gpu_machine(monkeypatch, started_early)
    target = resolve(("vector_add",), lang="cuda")
    learner = tmp_path / "mine.cu"
    shutil.copy(ROOT / "exercises" / "vector_add" / "vector_add.cu", learner)  # the stub: a learner's kit has it too

    assert isinstance(early.start(target, "learner", learner), _Child)
    for thread in [t for t in threading.enumerate() if t.name == "kcourse-early-build"]:
        thread.join(120)
    built = build.build_variant(learner, target.variant, build.gpu_arch())  # the grade's own build call
    assert built.ok and built.cached
    assert started_early == ["vector_add"]  # heavy decides itself whether the spec wants the process


def test_nothing_is_built_early_for_a_triton_file_or_a_notebook(tmp_path, monkeypatch):
    started_early: list[str] = []
    _on_a_gpu_machine(monkeypatch, started_early)
    builds = []
    monkeypatch.setattr(build, "build_shared_library", lambda *a, **k: builds.append(a))
    early.start(resolve(("vector_add",), lang="triton"), "solutions", None)
    notebook = tmp_path / "mine.ipynb"
    notebook.write_text("{}")
    early.start(resolve(("vector_add",), lang="cuda"), "learner", notebook)
    for thread in [t for t in threading.enumerate() if t.name == "kcourse-early-build"]:
        thread.join(10)
    assert builds == []
