"""The command line's table of commands: every command is in it, under its own name,
with the first paragraph of its help as the summary `forkpatch --help` lists, so that
listing the commands (and running one) imports no other command's module."""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys

import click
import pytest

import forkpatch.cli
from forkpatch.cli.app import COMMANDS, cli


def _defined() -> dict[str, tuple[str, str]]:
    """Every click command defined at the top of a module of forkpatch.cli."""
    found = {}
    for info in pkgutil.iter_modules(forkpatch.cli.__path__, "forkpatch.cli."):
        module = importlib.import_module(info.name)
        for attr, value in vars(module).items():
            if isinstance(value, click.Command) and not isinstance(value, click.Group):
                assert value.name is not None
                found[value.name] = (info.name, attr)
    return found


def _eager(ctx: click.Context) -> click.Group:
    """The same group with every command imported and held, as click lists and finds them."""
    commands = {n: cli.get_command(ctx, n) for n in COMMANDS}
    return click.Group(
        name=cli.name,
        commands={n: c for n, c in commands.items() if c is not None},
        params=cli.params,
        help=cli.help,
    )


def test_the_table_names_every_command_where_it_is_defined() -> None:
    assert {n: (e.module, e.function) for n, e in COMMANDS.items()} == _defined()


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_summary_is_the_first_paragraph_of_the_help(name: str) -> None:
    command = cli.get_command(click.Context(cli), name)
    assert command is not None and command.help
    first = " ".join(command.help.split("\n\n")[0].replace("\b", "").split())
    assert COMMANDS[name].summary == first


@pytest.mark.parametrize("width", [60, 80, 100])
def test_help_lists_the_commands_as_click_would(width: int) -> None:
    """The lazy listing against click's own, from the imported commands."""
    ctx = click.Context(cli, info_name="forkpatch", terminal_width=width, **cli.context_settings)
    assert cli.get_help(ctx) == _eager(ctx).get_help(ctx)
    assert all(f"  {name} " in cli.get_help(ctx) for name in COMMANDS)


@pytest.mark.parametrize("args", [["stat"], ["tops"], ["bulid-wheel"], ["nothing-like-it"]])
def test_an_unknown_command_is_answered_as_click_would(args: list[str]) -> None:
    """With the same suggestion as a group holding every command."""
    messages = []
    for group in (cli, _eager(click.Context(cli, info_name="forkpatch"))):
        with pytest.raises(click.UsageError) as caught:
            group.main(args, prog_name="forkpatch", standalone_mode=False)
        messages.append(caught.value.format_message())
    assert messages[0] == messages[1]


def test_help_and_a_command_import_only_their_own_module(tmp_path) -> None:
    code = (
        "import json, sys\n"
        "from forkpatch.cli import main\n"
        "main(sys.argv[1:])\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('forkpatch.cli.'))),"
        " file=sys.stderr)\n"
    )

    def loaded(*args: str) -> list[str]:
        out = subprocess.run(
            [sys.executable, "-c", code, *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=True,
        )
        return json.loads(out.stderr.splitlines()[-1])

    entry = ["forkpatch.cli.app", "forkpatch.cli.context", "forkpatch.cli.dispatch"]
    assert loaded("--help") == entry
    # The read-only commands' bodies (cli/readonly.py) are what their click commands run.
    assert loaded("top", "--help") == sorted(
        [*entry, "forkpatch.cli.readonly", "forkpatch.cli.stack"]
    )
    assert loaded("st", "--help") == sorted(
        [*entry, "forkpatch.cli.project", "forkpatch.cli.readonly"]
    )


def test_commands_print_results_through_one_path():
    """A command's result goes through ``log.result`` (stdout, credentials hidden,
    controls escaped) or ``log.emit_json``: no bare ``click.echo`` or ``print`` in the
    command modules (dispatch.py, the error boundary, writes its diagnostics to stderr)."""
    import ast
    from pathlib import Path

    found = []
    for path in sorted(Path(forkpatch.cli.__file__).parent.glob("*.py")):
        if path.name == "dispatch.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            name = ast.unparse(node.func)
            if name in ("click.echo", "print", "click.secho"):
                found.append(f"{path.name}:{node.lineno} {name}")
    assert found == []
