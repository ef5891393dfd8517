"""What every command gets (the project directory and global switches), for the command
modules of this package (none of them imports the group in :mod:`forkpatch.cli.app`).
Importing it loads no click: :mod:`forkpatch.cli.dispatch` runs the plain forms of
`top` and `status` without it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Concatenate, ParamSpec, TypeVar

if TYPE_CHECKING:
    from forkpatch.project import Project
    from forkpatch.stack import Stack, StackModel


#: The commands that say themselves where a rebase in progress stands (or make a
#: project): no note about a pending rebase after them.
_OWN_REBASE_NOTE = frozenset({"rebase", "init", "demo"})


class Ctx:
    """What every command gets: the project directory and global switches, and which
    command runs (None until the command line has been parsed that far).

    :mod:`forkpatch.cli.dispatch` makes it empty and hands it to the parse, which fills
    it in: what the entry says after the command (a rebase in progress, the state
    after a Ctrl-C) it reads from here."""

    def __init__(
        self,
        directory: Path | None = None,
        fork_repo: str | None = None,
        debug: bool = False,
        command: str | None = None,
    ) -> None:
        self.directory = directory
        self.fork_repo = fork_repo
        self.debug = debug
        self.command = command

    @property
    def notes_pending_rebase(self) -> bool:
        """Whether a rebase in progress is worth a note after this command."""
        return self.command is not None and self.command not in _OWN_REBASE_NOTE

    def project(self) -> Project:
        from forkpatch.project import open_project

        return open_project(self.directory, self.fork_repo)

    def project_or_none(self) -> Project | None:
        """The project when there is a series.yaml (smoke and publish also work without one)."""
        from forkpatch.errors import NoProjectError

        try:
            return self.project()
        except NoProjectError:
            return None

    @contextlib.contextmanager
    def locked_project(self) -> Iterator[Project]:
        """The project, under its lock taken in this command's name (the holder other
        commands are told of; see :meth:`Project.locked`)."""
        if self.command is None:
            raise RuntimeError("locked_project() outside a command")
        project = self.project()
        with project.locked(self.command):
            yield project

    @contextlib.contextmanager
    def locked_stack(self) -> Iterator[Stack]:
        """The stack, under the project's lock (:meth:`locked_project`)."""
        from forkpatch.stack import Stack

        with self.locked_project() as project:
            yield Stack(project)

    def stack_model(self) -> StackModel:
        """The stack to read (``top``): neither the engine nor the patch parser loads."""
        from forkpatch.stack import StackModel

        return StackModel(self.project())


_P = ParamSpec("_P")
_R = TypeVar("_R")


def pass_ctx(f: Callable[Concatenate[Ctx, _P], _R]) -> Callable[_P, _R]:
    """click's pass decorator for :class:`Ctx` (made when a command module, which
    imports click anyway, applies it)."""
    import click

    return click.make_pass_decorator(Ctx)(f)
