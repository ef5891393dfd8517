"""The click commands stay thin: each command function is its options' parsing, one call
to the core and one to a view, 25 lines or fewer of body (its docstring not counted).
What a command does beyond that lives in the core, or in its module's helpers."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import click

import forkpatch.cli

LIMIT = 25


def body_lines(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from the first statement after the docstring to the end of the function."""
    body = fn.body
    first = body[0]
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        body = body[1:]
    if not body:
        return 0
    return (body[-1].end_lineno or body[-1].lineno) - body[0].lineno + 1


def _top_functions(path: Path) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        node.name: node
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }


def _command_functions() -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """The function behind every click command (and group) defined in forkpatch.cli,
    found from the commands themselves, so that none is missed whatever decorates it."""
    found = []
    for info in pkgutil.iter_modules(forkpatch.cli.__path__, "forkpatch.cli."):
        module = importlib.import_module(info.name)
        path = Path(inspect.getfile(module))
        functions = _top_functions(path)
        for value in vars(module).values():
            if not isinstance(value, click.Command) or value.callback is None:
                continue
            callback = inspect.unwrap(value.callback)
            if Path(inspect.getfile(callback)) != path:
                continue  # imported from another module, measured there
            found.append((f"{path.name}:{callback.__name__}", functions[callback.__name__]))
    return found


def test_every_command_function_is_thin():
    from forkpatch.cli.app import COMMANDS

    commands = _command_functions()
    # Every command of the table is measured, not a few of them.
    table = {f"{e.module.rsplit('.', 1)[1]}.py:{e.function}" for e in COMMANDS.values()}
    assert table <= {name for name, _ in commands}
    long = {name: n for name, fn in commands if (n := body_lines(fn)) > LIMIT}
    assert long == {}


def test_the_measure_sees_a_long_command(tmp_path):
    """A docstring does not count; a 26th line of body does."""
    doc = '    """One line.\n\n    And more: a docstring of\n    several lines.\n    """\n'
    lines = "".join(f"    x{i} = {i}\n" for i in range(LIMIT))
    for extra, expected in (("", LIMIT), ("    return None\n", LIMIT + 1)):
        path = tmp_path / "m.py"
        path.write_text(
            f"import click\n\n\n@click.command()\ndef cmd():\n{doc}{lines}{extra}",
            encoding="utf-8",
        )
        assert body_lines(_top_functions(path)["cmd"]) == expected
    # A statement over several lines counts every line.
    path.write_text("def f():\n    g(\n        1,\n        2,\n    )\n", encoding="utf-8")
    assert body_lines(_top_functions(path)["f"]) == 4
