"""The grader's own errors: one base, KcourseError, that the CLI turns into a message (never a traceback).
Each says what went wrong and what to do next."""

from __future__ import annotations


class KcourseError(Exception):
    """A failure the user can act on; its message says how."""


class SpecError(KcourseError, ValueError):
    """A spec.toml that cannot be used; the message names the file and the field."""
