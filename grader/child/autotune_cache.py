"""Autotuning results kept on disk for configurations with a pre-hook too (the grading child, on a GPU).

A grade's child is a fresh process, so Triton's autotuner would time every configuration of every tuned size again
in each grade; the child's environment asks Triton to keep its results on disk (TRITON_CACHE_AUTOTUNING,
sandbox.child_env). Triton leaves out any autotuner whose configurations carry a `pre_hook` ("We can't serialize
prehooks"), and the Triton tutorial's attention sets its TMA descriptors' block shapes in one, as the FA2 forward
solution does: those were tuned again in every grade, the learner's kernel and the solution's. Triton rebuilds its
stored configurations as new Config objects, which would lose the hook; here a stored result names each
configuration by its text (every field but the hook) and maps back to the autotuner's own objects, hooks included.

The file sits in the learner's own Triton cache (the box's), keyed like Triton's own: the kernel's source, the
tuning key, the configurations, Triton's version and the GPU target. Learner code, in the same process, could
write it as easily as Triton's own results; nothing here is trusted beyond what that code could do anyway."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

VERSION = 1  # part of the key: bump when what is stored changes


def keep_hooked_tunings() -> None:
    """Patch Triton's autotuner (once per process) so that hooked configurations are kept on disk as well."""
    from triton.runtime.autotuner import Autotuner

    tritons = getattr(Autotuner, "check_disk_cache", None)  # Triton 3.2 on: older ones keep nothing on disk
    if tritons is None or getattr(tritons, "keeps_hooks", False):
        return

    def check_disk_cache(self, tuning_key, configs, bench_fn) -> bool:
        if not tuning_key or not any(c.pre_hook for c in configs) or len({str(c) for c in configs}) < len(configs):
            return tritons(self, tuning_key, configs, bench_fn)
        return with_hooks(self, tuning_key, configs, bench_fn)

    check_disk_cache.keeps_hooks = True
    Autotuner.check_disk_cache = check_disk_cache


def with_hooks(tuner, tuning_key, configs: list, bench_fn) -> bool:
    """Triton's check_disk_cache for hooked configurations: True if a stored result was used, else time them
    (bench_fn sets tuner.configs_timings and the choice) and store the timings."""
    try:
        cache, name = place(tuner, tuning_key, configs)
        found = read(cache.get_file(name), configs)
    except Exception:  # our bookkeeping, never the learner's verdict: time the configurations as Triton would
        cache, found = None, None
    if found is not None:
        tuner.configs_timings = found
        tuner.cache[tuning_key] = min(found, key=found.get)
        return True
    bench_fn()
    if cache is not None:
        stored = [[str(config), timing] for config, timing in tuner.configs_timings.items()]
        try:
            cache.put(json.dumps({"key": [str(k) for k in tuning_key], "timings": stored}), name, binary=False)
        except (OSError, TypeError, ValueError):
            pass  # a full disk or an odd timing: the next grade times them again
    return False


def read(path: str | None, configs: list) -> dict[Any, Any] | None:
    """{config: timing} from a stored file, each name mapped to the autotuner's own object; None unless every
    configuration is there."""
    if not path:
        return None
    named = {str(config): config for config in configs}
    try:
        timings = {named[text]: timing for text, timing in json.loads(Path(path).read_text())["timings"]}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return timings if len(timings) == len(configs) else None


def place(tuner, tuning_key, configs: list):
    """(Triton's cache manager for this tuning, the file's name), keyed as Triton keys its own."""
    from triton.runtime.cache import get_cache_manager

    fn = tuner.fn
    while not hasattr(fn, "cache_key"):  # through heuristics to the @triton.jit function
        fn = fn.fn
    parts = [triton_and_target(), fn.cache_key, str(tuning_key), *(str(c) for c in configs), f"hooked {VERSION}"]
    key = hashlib.sha256("-".join(parts).encode("utf-8")).hexdigest()
    return get_cache_manager(key), f"{fn.__name__[:150]}.autotune.json"


def triton_and_target() -> str:
    """Triton's version, the GPU target's backend and the environment variables that change a compile."""
    from triton._C.libtriton import get_cache_invalidating_env_vars
    from triton.compiler.compiler import make_backend
    from triton.runtime.cache import triton_key
    from triton.runtime.driver import driver

    backend = make_backend(driver.active.get_current_target()).hash()
    return "-".join([triton_key(), backend, str(sorted(get_cache_invalidating_env_vars().items()))])
