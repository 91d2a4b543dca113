"""The box's read list (grader/child/box.py, `policy`): made in the trusted parent, so tested without Landlock.
A folder the child may read opens everything below it, so no rule may sit on a folder that holds the kit."""

from __future__ import annotations

import sys
from pathlib import Path

from grader.child import box


def kit_in(parent: Path) -> Path:
    kit = parent / "code" / "kernel-course"
    for name in ("solutions/softmax", "grader", "exercises/softmax", ".kcourse"):
        (kit / name).mkdir(parents=True)
    (parent / "code" / "helpers").mkdir()
    (parent / "code" / "notes.txt").write_text("x")
    return kit


def reaches(read: list[str], path: Path) -> bool:
    return any(path == Path(p) or Path(p) in path.parents for p in read)


def test_an_import_folder_above_the_kit_opens_its_neighbours_but_not_the_solutions(tmp_path, monkeypatch):
    kit = kit_in(tmp_path)
    monkeypatch.setattr(sys, "path", [*sys.path, str(tmp_path / "code")])  # PYTHONPATH=~/code
    read = box.policy(tmp_path / "scratch", kit / "exercises/softmax/softmax.py", kit).read
    assert not reaches(read, kit / "solutions/softmax") and not reaches(read, kit / ".kcourse")
    assert reaches(read, kit / "grader") and reaches(read, kit / "exercises/softmax")  # the kit's named parts
    assert reaches(read, tmp_path / "code/helpers") and reaches(read, tmp_path / "code/notes.txt")


def test_beside_the_kit_lists_each_level_on_the_way_down_less_the_kits_path():
    kit = Path("/nonexistent-kit-parent/kit")
    assert box._beside_kit(Path("/usr"), kit) == [str(Path("/usr").resolve())]  # not above the kit: itself


def test_a_system_folder_holding_the_kit_is_opened_entry_by_entry(tmp_path):
    kit = kit_in(tmp_path)
    opened = box._beside_kit(tmp_path, kit.resolve())
    assert sorted(opened) == sorted(str(p.resolve()) for p in [tmp_path / "code/helpers", tmp_path / "code/notes.txt"])
