"""The command line's layout (issue 39): grader/cli/__init__.py holds the group and a table of the verbs, each in its
own module under grader/cli/, imported only when that verb runs or shows its own help. `kcourse --help` lists every
verb from the table alone, and importing the CLI imports nothing heavy."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from grader.cli import VERBS, Commands, main

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "triton", "jinja2", "rich", "matplotlib")


def loaded(where: str) -> click.Command:
    module, _, name = where.partition(":")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_every_verb_in_the_table_is_a_click_command_of_that_name(verb):
    where, short_help = VERBS[verb]
    command = loaded(where)
    assert isinstance(command, click.Command) and command.name == verb
    assert main.get_command(click.Context(main), verb) is command
    assert where.startswith("grader.cli.") and where.partition(":")[0] != "grader.cli.options"
    # the table's short help is the one the verb's docstring gives (kept in the table so --help imports no verb)
    assert command.get_short_help_str(10**6) == short_help


def test_every_verb_module_is_in_the_table():
    modules = {p.stem for p in (ROOT / "grader" / "cli").glob("*.py")} - {"__init__", "options"}
    assert modules == {where.partition(":")[0].rpartition(".")[2] for where, _ in VERBS.values()}


@pytest.mark.parametrize("width", [50, 80, 120])
def test_help_lists_every_verb_as_if_every_verb_were_loaded(width):
    result = CliRunner().invoke(main, ["--help"], terminal_width=width)
    assert result.exit_code == 0
    listed = result.output.split("Commands:\n")[1].splitlines()
    assert [line.split()[0] for line in listed if line.startswith("  ") and not line.startswith("   ")] == sorted(VERBS)
    eager = click.Group(main.name, commands={verb: loaded(where) for verb, (where, _) in VERBS.items()})
    eager.help, eager.context_settings = main.help, main.context_settings
    assert result.output == CliRunner().invoke(eager, ["--help"], terminal_width=width).output


def fresh(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_importing_the_cli_and_its_help_import_no_verb_and_nothing_heavy():
    out = fresh(
        "import sys\nfrom grader.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        f"print([m for m in sys.modules if m.split('.')[0] in {HEAVY!r} or m.startswith('grader.cli.')])"
    )
    assert "grade-batch" in out and out.splitlines()[-1] == "[]"


def test_no_verb_module_imports_anything_heavy_until_it_runs():
    out = fresh(
        "import importlib, sys\nfrom grader.cli import VERBS\n"
        "for where, _ in VERBS.values():\n    importlib.import_module(where.partition(':')[0])\n"
        f"print([m for m in sys.modules if m.split('.')[0] in {HEAVY!r}])"
    )
    assert out.splitlines()[-1] == "[]"


def test_a_kcourse_error_from_a_lazy_verb_is_its_message_and_exit_status_2(tmp_path, monkeypatch):
    (tmp_path / "lazy_verb.py").write_text(
        "import click\nfrom grader.core.errors import KcourseError\n\n\n"
        "@click.command()\ndef fails():\n    raise KcourseError('plans/x.toml: week 3 lists no exercise')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    group = Commands("kcourse", verbs={"fails": ("lazy_verb:fails", "Fails.")})
    assert "lazy_verb" not in sys.modules
    result = CliRunner().invoke(group, ["fails"])
    assert result.exit_code == 2 and "plans/x.toml: week 3 lists no exercise" in result.output
    assert "Traceback" not in result.output


def test_an_unknown_verb_is_a_usage_error():
    result = CliRunner().invoke(main, ["gradee"])
    assert result.exit_code == 2 and "No such command 'gradee'" in result.output
