"""Shared fixtures: scratch git repositories shaped like the fork, and projects on them.

Helpers live in tests/fptest.py (import them from there, not from conftest).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fptest import Runner, ScratchRepo

# Settings that change what forkpatch itself does. A developer may have them
# exported (FORKPATCH_FORK_REPO pointing at the real fork is common); no test
# may see them, or a test built on the example fork would run on the real one.
# The real-fork tier reads its fork from tests/real_fork/realkit.py, which
# took FORKPATCH_FORK_REPO before this fixture removes it.
TOOL_ENV = (
    "FORKPATCH_FORK_REPO",
    "FORKPATCH_BASE_WHEEL",
    "FORKPATCH_PUBLISH_TO",
    "FORKPATCH_DEBUG",
    "FORKPATCH_KEEP_CONTAINER",
    "FORKPATCH_KEEP_SMOKE_ENV",
    "FORKPATCH_TEST_KILL_AT",
    "FORKPATCH_TEST_COUNT_WRITES",
    "FORKPATCH_TEST_PAUSE_AFTER",
)


@pytest.fixture(autouse=True)
def _no_developer_forkpatch_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in TOOL_ENV:
        monkeypatch.delenv(name, raising=False)


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
