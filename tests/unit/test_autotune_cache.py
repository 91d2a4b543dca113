"""grader/child/autotune_cache.py: autotuning results of configurations with a pre-hook kept on disk, as Triton keeps
those of configurations without one, and read back as the autotuner's own objects, hooks included."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import triton

from grader.child import autotune_cache

KEY = (4096, 128, False, "torch.bfloat16")


def hook(nargs):
    """A pre-hook, as the TMA path's (it sets the descriptors' block shapes)."""


def configs(pre_hook=hook) -> list:
    return [
        triton.Config({"BLOCK_M": 128, "BLOCK_N": n}, num_warps=w, pre_hook=pre_hook) for n, w in ((64, 4), (128, 8))
    ]


def tuner():
    """What check_disk_cache reads of an Autotuner: its kernel (the cache key and name) and its in-memory choices."""
    return SimpleNamespace(fn=SimpleNamespace(cache_key="kernel-source-hash", __name__="_attn_fwd"), cache={})


def timed(tuner_, choices: list, timings: list):
    """A bench_fn like Triton's: times the configurations, records them and the fastest."""
    calls = []

    def bench():
        calls.append(1)
        tuner_.configs_timings = dict(zip(choices, timings))
        tuner_.cache[KEY] = min(tuner_.configs_timings, key=tuner_.configs_timings.get)

    return bench, calls


@pytest.fixture(autouse=True)
def cache_here(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.setattr(autotune_cache, "triton_and_target", lambda: "triton-and-target")


def test_a_later_grade_reads_the_timings_back_as_the_autotuners_own_hooked_configurations():
    first, first_configs = tuner(), configs()
    bench, calls = timed(first, first_configs, [[2.0, 2.0, 2.0], [1.0, 1.0, 1.0]])
    assert autotune_cache.with_hooks(first, KEY, first_configs, bench) is False and calls == [1]

    later, later_configs = tuner(), configs()  # a fresh child: new objects, the same configurations
    bench, calls = timed(later, later_configs, [[9.0] * 3, [9.0] * 3])
    assert autotune_cache.with_hooks(later, KEY, later_configs, bench) is True and calls == []
    assert later.cache[KEY] is later_configs[1] and later.cache[KEY].pre_hook is hook
    assert set(later.configs_timings) == set(later_configs)


def test_another_tuning_key_or_kernel_or_set_of_configurations_is_timed_again():
    first, first_configs = tuner(), configs()
    autotune_cache.with_hooks(first, KEY, first_configs, timed(first, first_configs, [[1.0] * 3, [2.0] * 3])[0])
    edited = tuner()
    edited.fn.cache_key = "an-edited-kernel"
    fewer = configs()[:1]
    for other, key, choices in (
        (tuner(), KEY[:1] + (8192,) + KEY[2:], configs()),
        (edited, KEY, configs()),
        (tuner(), KEY, fewer),
    ):
        bench, calls = timed(other, choices, [[1.0] * 3] * len(choices))
        assert autotune_cache.with_hooks(other, key, choices, bench) is False and calls == [1]


def test_a_broken_stored_file_is_timed_again_not_an_error(tmp_path):
    first, first_configs = tuner(), configs()
    autotune_cache.with_hooks(first, KEY, first_configs, timed(first, first_configs, [[1.0] * 3, [2.0] * 3])[0])
    for stored in (tmp_path / "triton").rglob("*.autotune.json"):
        stored.write_text("{not json")
    later, later_configs = tuner(), configs()
    bench, calls = timed(later, later_configs, [[1.0] * 3, [2.0] * 3])
    assert autotune_cache.with_hooks(later, KEY, later_configs, bench) is False and calls == [1]


def test_the_patch_leaves_configurations_without_hooks_to_triton(monkeypatch):
    from triton.runtime.autotuner import Autotuner

    seen = []
    monkeypatch.setattr(Autotuner, "check_disk_cache", lambda self, key, configs, bench: seen.append(key) or False)
    autotune_cache.keep_hooked_tunings()
    autotune_cache.keep_hooked_tunings()  # once per process: a second call wraps nothing again
    plain = tuner()
    assert Autotuner.check_disk_cache(plain, KEY, configs(pre_hook=None), timed(plain, [], [])[0]) is False
    assert seen == [KEY]
    hooked, hooked_configs = tuner(), configs()
    bench, calls = timed(hooked, hooked_configs, [[1.0] * 3, [2.0] * 3])
    assert Autotuner.check_disk_cache(hooked, KEY, hooked_configs, bench) is False and calls == [1] and seen == [KEY]


REAL = """
import sys, triton, triton.language as tl
from grader.child import autotune_cache
autotune_cache.triton_and_target = lambda: "no GPU here: the driver's target left out"

def hook(nargs):
    pass

def make():
    @triton.autotune(configs=[triton.Config({"B": b}, num_warps=4, pre_hook=hook) for b in (64, 128)], key=["n"])
    @triton.jit
    def kernel(x, n, B: tl.constexpr):
        pass
    return kernel

autotune_cache.keep_hooked_tunings()
for run in ("first", "later"):
    tuner = make()  # a fresh autotuner each time, as in a new grading child
    configs = tuner.configs
    def bench():
        tuner.configs_timings = {configs[0]: [2.0, 2.0, 2.0], configs[1]: [1.0, 1.0, 1.0]}
        tuner.cache[(4096,)] = configs[1]
    used = tuner.check_disk_cache((4096,), configs, bench)
    chosen = tuner.cache[(4096,)]
    print(run, used, chosen is configs[1], chosen.pre_hook is hook)
"""


def test_triton_s_own_autotuner_and_configurations_go_through_it(tmp_path):
    """A real Autotuner, Config and JITFunction (outside the interpreter, which keeps nothing on disk): the first
    tuning is stored, a fresh autotuner reads it back as its own hooked configuration."""
    script = tmp_path / "tune.py"  # a file: Triton reads a kernel's source from it
    script.write_text(REAL)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = str(Path(__file__).resolve().parents[2])
    env.update(TRITON_CACHE_DIR=str(tmp_path / "triton"), PYTHONPATH=os.pathsep.join([root, env.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env)
    assert run.stdout.split("\n")[:2] == ["first False True True", "later True True True"], run.stdout + run.stderr
