"""Fixtures every feature uses: scratch git repositories, the example fork, projects
on it, the example wheel; and no developer settings in any test.

Helpers are plain modules of the ``support`` package (``tests/support``, on the path
through pytest's ``pythonpath`` setting); fixtures are here and in each feature's
conftest.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

# The real-fork tier reads FORKPATCH_FORK_REPO when support.realfork is imported:
# import it before the fixture below hides the variable from every test.
import support.realfork  # noqa: F401
from support import HIDDEN_ENV
from support.cli import Runner
from support.git import ScratchRepo
from support.smoke import ExampleBuild, build_example
from support.tiers import NOT_QUICK, OPT_IN, holds_quick_tests, quick_path

TESTS = Path(__file__).resolve().parent
_LEFT_OUT = pytest.StashKey[int]()


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under ``-m quick`` alone the other test modules are not even imported."""
    if config.getoption("markexpr") != "quick" or collection_path == TESTS:
        return None
    if not collection_path.is_relative_to(TESTS):
        return None
    rel = collection_path.relative_to(TESTS).as_posix()
    inside = holds_quick_tests(rel) if collection_path.is_dir() else quick_path(rel)
    return None if inside else True


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--all-tiers",
        action="store_true",
        help="also run the opt-in tiers (slow, real_fork) that a plain run leaves out",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if not item.path.is_relative_to(TESTS):
            continue
        rel = item.path.relative_to(TESTS).as_posix()
        if quick_path(rel) and not any(item.get_closest_marker(m) for m in NOT_QUICK):
            item.add_marker(pytest.mark.quick)
    # A plain run (no -m, no --all-tiers) is a developer's loop: the slow and real-fork
    # tiers are opt-in there, and said so at the end.
    if config.getoption("markexpr") or config.getoption("all_tiers"):
        return
    kept, left = [], []
    for item in items:
        opt_in = any(item.get_closest_marker(m) for m in OPT_IN)
        (left if opt_in else kept).append(item)
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = kept
        config.stash[_LEFT_OUT] = len(left)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    left = terminalreporter.config.stash.get(_LEFT_OUT, 0)
    if left:
        only = " or ".join(OPT_IN)
        terminalreporter.write_line(
            f"{left} test(s) of the opt-in tiers ({', '.join(OPT_IN)}) not run: "
            f'python3 -m pytest -q --all-tiers runs everything, -m "{only}" only those '
            "(.ci/run runs both)"
        )


@pytest.fixture(autouse=True)
def _no_developer_forkpatch_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in HIDDEN_ENV:
        monkeypatch.delenv(name, raising=False)
    # A `forkpatch` a test starts runs in its own process and starts no command server
    # in the developer's runtime directory (tests/cmdserver starts its own).
    monkeypatch.setenv("FORKPATCH_SERVER", "0")


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


@pytest.fixture(scope="session")
def example_build(tmp_path_factory: pytest.TempPathFactory) -> ExampleBuild:
    """The example fork's overlay wheel and its project (built once per session;
    the smoke and publish tests share it)."""
    return build_example(tmp_path_factory.mktemp("example-build"))
