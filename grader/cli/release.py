"""`kcourse release`: instructors write the learner's kit."""

from __future__ import annotations

from pathlib import Path

import click


@click.command()
@click.argument("target_dir", type=click.Path(path_type=Path))
def release(target_dir) -> None:
    """Instructors: write the learner's kit to TARGET_DIR: the files git tracks, less solutions/, test fixtures
    and CI, with learner/README.md as its README (checked for leaked solution text)."""
    from grader.commands.release import ReleaseError
    from grader.commands.release import release as write_release

    try:
        kit = write_release(target_dir)
    except ReleaseError as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(
        f"wrote the learner's kit to {target_dir} ({len(kit.files)} files, no solutions or test fixtures; "
        "checked for leaks)"
    )
    if kit.untracked:
        shown = ", ".join(p.as_posix() for p in kit.untracked[:5]) + (", ..." if len(kit.untracked) > 5 else "")
        click.echo(
            f"left out {len(kit.untracked)} file(s) git does not track: {shown} — `git add` any a learner "
            "needs and release again"
        )
