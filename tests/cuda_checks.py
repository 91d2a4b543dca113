"""What the tests of raw CUDA exercises share: building the stub and the solution for sm_90, compiling
the mistake and ladder fixtures, and printing a grade's figures beside torch's."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from conftest import submission

from grader.toolchain import build


def build_without_spills(sources: list[Path], defines: dict[str, int] | None = None) -> None:
    """Each source's kernels build for sm_90 with `defines`, as a grade without a GPU builds them (the session's
    build cache is shared with the CPU grades); the last one, the solution, spills nothing."""
    for source in sources:
        result = build.build_shared_library(source, "sm_90", defines=defines, device_only=True)
        assert result.ok, f"{source.name}: {result.log}"
    assert result.resources and not any(r["spill_stores"] for r in result.resources), result.resources


def solution_edits_apply(solution: Path, edits: dict[str, tuple]) -> None:
    """Each one-line mistake's `old` text (name: (old, new, verdict codes)) still stands in the solution."""
    text = solution.read_text()
    for name, (old, _, _) in edits.items():
        assert old in text, f"{name}: {old!r} is not in {solution.name}: update the test's edit to the solution's text"


def compile_fixtures(names: list[str | Path]) -> None:
    """Device code only, all at once, as a grade without a GPU builds it (through the session's build cache, so a
    fixture the [[mistakes]] table also grades is built once): the GPU tests grade them, this catches a typo
    without one. A name is a fixture's; a Path (a `mutant`) is compiled where it is."""
    sources = [name if isinstance(name, Path) else submission(name) for name in names]
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        results = list(pool.map(lambda source: build.build_shared_library(source, "sm_90", device_only=True), sources))
    for name, result in zip(names, results):
        assert result.ok, f"{name}: {result.log}"


def numerics(result):
    """The numerics check (compute-sanitizer's may also fail on a racy kernel, and comes apart from it); a grade that
    ended before numerics fails the test with its verdict (a build error, a crash, a full GPU), not a StopIteration."""
    found = [c for c in result.checks if c.name == "numerics"]
    assert found, f"no numerics check: {result.verdict}"
    return found[0]


def figures(result) -> str:
    return "; ".join(
        f"{t.case}: you {t.learner_rate or 0:.0f} {t.unit} ({t.roofline_pct or 0:.0f}%), solution "
        f"{t.solution_rate or 0:.0f}, torch {t.torch_rate or 0:.0f} {t.unit}"
        for t in result.timings
    )


def fixture_fails(exercise_id: str, source: str | Path, codes) -> None:
    """A fixture (a name, or a Path: a `mutant`), graded, fails its first failing check with one of `codes`."""
    from simulated_kernels import first_failure, grade_fixture

    result = grade_fixture(exercise_id, source)
    assert first_failure(result).details.get("code") in codes, result.verdict


def fixture_passes_numerics(exercise_id: str, source: str | Path, label: str):
    """A correct fixture, graded, passes numerics; its figure is printed under `label`. Returns the grade."""
    from simulated_kernels import figure_line, grade_fixture

    result = grade_fixture(exercise_id, source)
    assert numerics(result).status == "passed", result.verdict
    if result.timings:
        print("\n" + figure_line(label, result))
    return result


def mutant(base: str | Path, mistake: str, edits: list[tuple[str, str]], folder: Path) -> Path:
    """A correct fixture with one classic mistake edited in, written to `folder` as `<base stem>_<mistake>.cu`:
    a mistake is its few changed lines, not another copy of the whole kernel. Each `old` text must occur in
    the base exactly once, so an edit of the base that moves it fails here, loudly, not by testing nothing.
    `base` is a fixture's name, or a Path to another correct source (a solution: the caller skips where the
    kit has none)."""
    source = (base if isinstance(base, Path) else submission(base)).read_text()
    if isinstance(base, Path):
        base = base.name
    for old, new in edits:
        assert source.count(old) == 1, f"{base}: {old!r} occurs {source.count(old)} times; update the edit"
        source = source.replace(old, new)
    path = folder / f"{Path(base).stem.removesuffix('_minimal')}_{mistake}{Path(base).suffix}"
    path.write_text(f"// Mistake {mistake}: {base} with {len(edits)} edit(s)\n" + source)
    return path
