"""What every command gets (the project directory and global switches), for cli.py and the
cli_* modules that register their commands on it (so that none of them imports cli.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from forkpatch.project import Project
    from forkpatch.stack import Stack


class Ctx:
    """What every command gets: the project directory and global switches."""

    def __init__(self, directory: Path | None, fork_repo: str | None, debug: bool) -> None:
        self.directory = directory
        self.fork_repo = fork_repo
        self.debug = debug

    def project(self) -> Project:
        from forkpatch.project import open_project

        return open_project(self.directory, self.fork_repo)

    def stack(self) -> Stack:
        from forkpatch.stack import Stack

        return Stack(self.project())


pass_ctx = click.make_pass_decorator(Ctx)
