"""No module of forkpatch reads the environment, the working directory or the user's
home when it is imported.

The command server imports every module once and forks a worker per command, with the
command's own environment and directory: a value read at import would be the server's,
the same for every command it ever runs (a test hook, a setting, a credential). Each
read happens inside a function, when the command runs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import forkpatch

SRC = Path(forkpatch.__file__).resolve().parent
# What reads the process's surroundings: os.environ / os.getenv / os.getcwd, settings.*,
# Path.home / Path.cwd / expanduser.
_ATTRS = {"environ", "environb", "getenv", "getenvb", "getcwd", "home", "cwd", "expanduser"}


def _reads(node: ast.AST) -> list[str]:
    """What ``node`` reads at the moment it runs (not inside a function or lambda
    defined there)."""
    found = []
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        if isinstance(n, ast.Attribute) and n.attr in _ATTRS:
            found.append(ast.unparse(n))
        if (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Name)
            and n.func.value.id == "settings"
        ):
            found.append(ast.unparse(n.func))
        stack.extend(ast.iter_child_nodes(n))
    return found


def _module_level(tree: ast.Module) -> list[ast.stmt]:
    """The statements that run at import: the module's, and its classes' bodies."""
    out: list[ast.stmt] = []
    todo = list(tree.body)
    while todo:
        stmt = todo.pop()
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            out += [ast.Expr(d) for d in stmt.decorator_list]
            continue
        if isinstance(stmt, ast.ClassDef):
            todo += stmt.body
            continue
        out.append(stmt)
    return out


def test_no_module_reads_the_environment_at_import() -> None:
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        if "incheck" in path.parts:  # the smoke venv's standalone check scripts
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for stmt in _module_level(tree):
            for what in _reads(stmt):
                offenders.append(f"{path.relative_to(SRC)}:{stmt.lineno}: {what}")
    assert not offenders, "read at import:\n" + "\n".join(offenders)


def test_the_check_finds_a_read_at_import() -> None:
    tree = ast.parse(
        "import os\nfrom forkpatch import settings\nA = os.environ.get('X')\n"
        "B = settings.count('Y')\nclass C:\n    D = os.getcwd()\n"
        "def f():\n    return os.environ\n"
    )
    found = [w for s in _module_level(tree) for w in _reads(s)]
    assert sorted(found) == ["os.environ", "os.getcwd", "settings.count"]
