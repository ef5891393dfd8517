"""What every command gets (the project directory and global switches), for the command
modules of this package (none of them imports the group in :mod:`forkpatch.cli.app`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

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


pass_ctx = click.make_pass_decorator(Ctx)
