"""Every command that changes the project takes its lock one way, in its own name:
``Ctx.locked_stack()`` / ``Ctx.locked_project()``, which name the lock after the command
being run. No command module spells a lock name, so none can name the wrong one (the
holder other commands are told of, the one `refuse_during_rebase` lets through)."""

from __future__ import annotations

import re
from pathlib import Path

import forkpatch.cli

CLI = Path(forkpatch.cli.__file__).resolve().parent


def test_no_command_module_names_its_own_lock() -> None:
    spelled = {
        f"{path.name}:{n}": line.strip()
        for path in sorted(CLI.glob("*.py"))
        if path.name != "context.py"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"\.locked\(", line)
    }
    assert not spelled, spelled


def test_the_lock_is_held_in_the_name_of_the_command_that_runs(tmp_path, capsys) -> None:
    """While `forkpatch refresh` holds the lock, another command is told `refresh` holds it."""
    from forkpatch.cli import main
    from forkpatch.cli.context import Ctx
    from support.projects import copy_example

    ex = copy_example(tmp_path, capsys)
    assert main(["-C", str(ex.project), "apply"]) == 0
    c = Ctx(ex.project, command="refresh")
    with c.locked_stack():
        lock = (ex.project / ".forkpatch" / "lock").read_text(encoding="utf-8")
        assert lock.split()[1:] == ["refresh"], lock
        capsys.readouterr()
        assert main(["-C", str(ex.project), "push"]) != 0
        assert "refresh" in capsys.readouterr().err
