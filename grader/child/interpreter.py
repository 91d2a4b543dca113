"""Work Triton's interpreter does and throws away, left out in the grading child (`TRITON_INTERPRET=1`, no GPU).

Each change keeps a kernel's results and errors what Triton's own interpreter gives (tests/test_interpreter_options.py)
and is skipped where this Triton lacks what it changes. The costs are in docs/measurements.md (sessions 61-62)."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable


def speed_up() -> None:
    """Both changes below, for the rest of this process."""
    drop_dead_overflow_checks()
    patch_language_once_per_launch()


def drop_dead_overflow_checks() -> None:
    """Triton's interpreter builds an overflow check for every integer add, sub and mul (int64 casts, two compares and
    an `and`), then drops it: the check's device_assert does nothing without `debug`, which the interpreter never
    sets (its options are fixed)."""
    from triton.runtime import interpreter

    builder = getattr(interpreter, "interpreter_builder", None)
    options = getattr(builder, "options", None)
    if getattr(options, "sanitize_overflow", False) and not getattr(options, "debug", True):
        builder.options = dataclasses.replace(options, sanitize_overflow=False)


class _Unchanged:
    """The patch scope of a helper's call that patched nothing (Triton discards a helper's scope unrestored)."""

    def restore(self) -> None:
        pass


def patch_language_once_per_launch() -> None:
    """Triton's interpreter patches triton.language (every builtin of tl, tl.tensor and tl.math) when a kernel is
    launched, restores it when the launch ends, and patches it again at every call of a @triton.jit helper in
    between: a helper called in a loop is patched at each of its calls, in each program. Here a helper's call
    patches only when its language modules (tl, tl.core) are not yet patched in this launch; a launch patches and
    restores as before."""
    from triton.runtime import interpreter

    original = getattr(interpreter, "_patch_lang", None)
    if original is None or getattr(original, "kcourse_once", False):
        return
    launch: set[int] | None = None  # the language modules the running launch has patched; None between launches

    def patch_lang(fn: Callable) -> Any:
        nonlocal launch
        wanted = _languages(fn)
        if launch is not None and wanted and wanted <= launch:  # a helper inside a launch, its modules patched
            return _Unchanged()
        scope = original(fn)
        if launch is not None:  # a helper with a module the launch had not patched: patched as Triton does
            launch |= wanted
            return scope
        launch = set(wanted)  # a launch: its scope's restore ends it
        restore = scope.restore

        def restore_and_end() -> None:
            nonlocal launch
            launch = None
            restore()

        scope.restore = restore_and_end
        return scope

    patch_lang.kcourse_once = True
    interpreter._patch_lang = patch_lang


def _languages(fn: Callable) -> set[int]:
    """The triton.language modules `fn`'s globals hold (what Triton's _patch_lang patches for it), by identity."""
    import triton.language as tl

    return {id(value) for value in fn.__globals__.values() if value is tl or value is tl.core}
