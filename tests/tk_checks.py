"""Where the ThunderKittens tests find a clone, shared by the ThunderKittens exercises' test files.

KCOURSE_TK_ROOT when it is set (a learner's clone, the GPU machine's copy), else the headers beside the
project in ../shared/thirdparty/ThunderKittens (this workplace's CI and development machines); without
either, the compile checks skip with what to do."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import ROOT

from grader.toolchain import thunderkittens

SHARED_COPY = ROOT.parent / "shared" / "thirdparty" / "ThunderKittens"


def _clone() -> Path | None:
    if os.environ.get(thunderkittens.ENV_VAR):
        return thunderkittens.configured_root()
    return SHARED_COPY if (SHARED_COPY / "include" / "kittens.cuh").is_file() else None


TK = _clone()
NO_TK = (
    f"no ThunderKittens here: set {thunderkittens.ENV_VAR} to a clone (git clone {thunderkittens.REPOSITORY}) "
    "to compile-check the ThunderKittens exercises"
)
needs_tk = pytest.mark.skipif(TK is None, reason=NO_TK)


@pytest.fixture
def with_tk(monkeypatch):
    """KCOURSE_TK_ROOT pointed at the clone found, for the grader's own lookup; skips without one."""
    if TK is None:
        pytest.skip(NO_TK)
    monkeypatch.setenv(thunderkittens.ENV_VAR, str(TK))
