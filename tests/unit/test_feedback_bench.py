"""scripts/feedback_bench.py's kernel edit: the learner's loop it times changes every kernel's source (so Triton
compiles and tunes it again, and nvcc builds it again) and nothing the code computes."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "scripts" / "feedback_bench.py"
pytestmark = pytest.mark.skipif(not BENCH.is_file(), reason="scripts/ is the instructors' (not in the learner's kit)")


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


KEYS = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("edited", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
keys = {}
for name, value in vars(module).items():
    while type(value).__name__ in ("Autotuner", "Heuristics"):
        value = value.fn
    if type(value).__name__ == "JITFunction":
        keys[name] = value.cache_key
print(json.dumps(keys))
"""


def _kernels(path: Path) -> dict[str, str]:
    """Each @triton.jit function's cache key (its source, first line and dependencies), autotuned ones included,
    as Triton computes it for a GPU: in a process of its own, outside the interpreter these tests run under."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, "-c", KEYS, str(path)], capture_output=True, text=True, env=env, check=True)
    return json.loads(run.stdout)


@pytest.mark.solutions
def test_a_kernel_edit_changes_every_triton_kernels_cache_key_and_the_file_still_loads(tmp_path):
    bench = _module(BENCH, "feedback_bench_under_test")
    source = ROOT / "solutions" / "flash_attention_v2_backward" / "flash_attention_v2_backward.py"
    before = _kernels(source)
    copy = tmp_path / source.name
    copy.write_text(source.read_text())
    bench.kernel_edit(copy, 1)
    after = _kernels(copy)
    assert len(before) >= 4 and before.keys() == after.keys()
    assert all(before[name] != after[name] for name in before)
    assert copy.read_text().count("# kcourse bench: edit 1") == len(before)


def test_a_cuda_edit_changes_the_files_content(tmp_path):
    bench = _module(BENCH, "feedback_bench_under_test")
    copy = tmp_path / "k.cu"
    copy.write_text("__global__ void k() {}\n")
    bench.kernel_edit(copy, 2)
    assert copy.read_text() == "__global__ void k() {}\n\n// kcourse bench: edit 2\n"


def test_the_versions_named_are_chosen_by_id_or_id_and_lang_and_a_shard_takes_every_nth():
    bench = _module(BENCH, "feedback_bench_targets")
    assert [t.key for t in bench.targets_named(["flash_attention_v2_backward:triton"])] == [
        "flash_attention_v2_backward:triton"
    ]
    both = [t.key for t in bench.targets_named(["flash_attention_v2_backward"])]
    assert len(both) == 2 and both == sorted(both)  # the Triton and the CUDA versions
    assert [t.key for t in bench.targets_named(["flash_attention_v2_backward", "--shard=2/2"])] == both[1:]
    assert set(bench.EDIT_MODES) == {"threads", "one thread", "no pass"}


def test_the_edit_loop_grades_each_mode_after_an_edit_then_warm_with_the_pass_and_without(monkeypatch, capsys):
    """--edits: one warm-up grade, each compile mode after a kernel edit, then warm grades of the unchanged file with
    the compile pass and without, alternately (what the pass costs when nothing needs compiling)."""
    bench = _module(BENCH, "feedback_bench_edits")
    graded = []
    monkeypatch.setattr(bench, "one_shot", lambda w, l, s, env=None: graded.append(("warm", env)) or (1.0, "phases"))
    monkeypatch.setattr(bench, "after_an_edit", lambda w, l, s, env=None: graded.append(("edit", env)) or (2.0, "p"))
    bench.edits(["flash_attention_v2_backward:triton"])
    on, off = bench.EDIT_MODES["threads"], bench.EDIT_MODES["no pass"]
    assert graded == [("warm", None)] + [("edit", env) for env in bench.EDIT_MODES.values()] + [
        ("warm", on),
        ("warm", off),
        ("warm", on),
        ("warm", off),
    ]
    assert "warm, no pass: 1.0 s" in capsys.readouterr().out
