"""Where things live. Everything is relative to the course root so a learner's copy works anywhere."""

from __future__ import annotations

import os
from pathlib import Path


def course_root() -> Path:
    """The folder holding exercises/, solutions/, plans/ and templates/ (KCOURSE_ROOT overrides)."""
    override = os.environ.get("KCOURSE_ROOT")
    return Path(override).resolve() if override else Path(__file__).resolve().parents[2]


def exercises_dir() -> Path:
    return course_root() / "exercises"


def solutions_dir() -> Path:
    return course_root() / "solutions"


def plans_dir() -> Path:
    return course_root() / "plans"


def templates_dir() -> Path:
    return course_root() / "templates"


def state_dir() -> Path:
    """The learner's results and reports (KCOURSE_HOME overrides, e.g. for tests)."""
    override = os.environ.get("KCOURSE_HOME")
    path = Path(override) if override else course_root() / ".kcourse"
    path.mkdir(parents=True, exist_ok=True)
    return path


def build_cache_dir() -> Path:
    """Compiled learner code, keyed by source hash; shared between runs and safe to delete."""
    override = os.environ.get("KCOURSE_CACHE")
    base = Path(override) if override else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    path = (base if override else base / "kernel-course") / "build"
    path.mkdir(parents=True, exist_ok=True)
    return path
