"""Shared fixtures: scratch git repositories shaped like the fork, and projects on them.

Helpers live in tests/fptest.py (import them from there, not from conftest).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fptest import GIT_ENV, Runner, ScratchRepo, snapshot


@pytest.fixture
def scratch_repo(tmp_path: Path) -> ScratchRepo:
    return ScratchRepo(tmp_path / "fork")


@pytest.fixture
def example_fork(tmp_path: Path):
    """The built-in example fork (tags v1.2.0, v1.2.1, v1.3.0)."""
    from forkpatch.example import make_fork

    return make_fork(tmp_path / "example-fork")


@pytest.fixture
def example_project(tmp_path: Path, example_fork, capsys) -> Iterator[tuple[Path, Runner]]:
    """A project on the example fork at v1.2.1 with the example series imported."""
    from forkpatch.example import write_example_patches

    project = tmp_path / "project"
    project.mkdir()
    run = Runner(project, capsys)
    run("init", "--fork-url", str(example_fork.path), "--base", "v1.2.1")
    incoming = write_example_patches(example_fork.path, "v1.2.1", tmp_path / "incoming")
    run("import", *map(str, incoming))
    yield project, run
