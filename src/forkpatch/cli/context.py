"""What every command gets (the project directory and global switches), for the command
modules of this package (none of them imports the group in :mod:`forkpatch.cli.app`).
Importing it loads no click: :mod:`forkpatch.cli.dispatch` runs the plain forms of
`top` and `status` without it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Concatenate, ParamSpec, TypeVar

if TYPE_CHECKING:
    from forkpatch.project import Project
    from forkpatch.stack import Stack, StackModel


class Ctx:
    """What every command gets: the project directory and global switches."""

    def __init__(self, directory: Path | None, fork_repo: str | None, debug: bool) -> None:
        self.directory = directory
        self.fork_repo = fork_repo
        self.debug = debug

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

    def stack(self) -> Stack:
        from forkpatch.stack import Stack

        return Stack(self.project())

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
