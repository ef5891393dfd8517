"""A check that cannot run for a missing module is `not-run`, never `failed` or `error`.

`failed` means the wheel is wrong; a module the smoke environment lacks (torch on a
CPU box, fastapi, anything the wheel's code imports) is the environment's business:
the report names the module and the command that installs it, the run does not
fail, and `--bisect` is offered only when a patch can be at fault.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from support import smoke
from support.cli import Runner

pytestmark = pytest.mark.slow

ABSENT = "forkpatch_absent_module"  # a third-party module no environment has


def _wheel_with_patch(
    build: smoke.ExampleBuild,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    edit: Callable[[Path], None],
) -> tuple[Path, Path, Runner]:
    """The example series plus patch ``name`` made by ``edit`` (new, refresh), built."""
    project = smoke.copy_project(build, tmp_path / "project")
    run = Runner(project, capsys)
    run("apply")
    run("new", name)
    edit(project / ".forkpatch" / "worktree")
    run("refresh")
    _, out, _ = run(
        "build-wheel",
        "--mode",
        "overlay",
        "--base-wheel",
        str(build.base_wheel),
        "-o",
        str(tmp_path / "dist"),
        "--json",
    )
    (wheel,) = json.loads(out)["wheels"]
    return project, Path(wheel), run


def _needs_absent_module(wt: Path) -> None:
    init = wt / "vllm" / "__init__.py"
    init.write_text(f"import {ABSENT}  # a dependency this box lacks\n" + init.read_text())


@pytest.mark.parametrize("deps", ["system", "none"])
def test_missing_module_is_not_run_with_the_install_command(example_build, tmp_path, capsys, deps):
    _project, wheel, run = _wheel_with_patch(
        example_build, tmp_path, capsys, "needs-dep", _needs_absent_module
    )
    code, out, err = run(
        "smoke", str(wheel), "--tier", "static", "--deps", deps, "--json", expect=None
    )
    data = json.loads(out)
    # Nothing failed, but the tier asked for ran incomplete: exit 5, never 0.
    assert code == 5, err
    assert "tier static ran incomplete (asked for by --tier static)" in err
    assert data["passed"] is True
    by_id = {c["id"]: c for c in data["checks"]}
    for cid in (
        "static.installed-from-wheel",
        "static.version-metadata",
        "static.cli-version",
        "static.import-patched-modules",
    ):
        assert by_id[cid]["outcome"] == "not-run", (cid, by_id[cid])
        detail = by_id[cid]["detail"]
        assert f"'{ABSENT}'" in detail and "pip install" not in detail, detail
    # How to install it is said once, in the report's notes and on the terminal.
    (note,) = [n for n in data["notes"] if ABSENT in n]
    assert f"-m pip install {ABSENT}`" in note and note.startswith("4 check(s) did not run")
    assert err.count(f"pip install {ABSENT}") == 1, err
    if deps == "none":
        assert "--deps none installs nothing" in note
    # The provenance needs no import: it still ran and passed.
    assert by_id["static.provenance"]["outcome"] == "passed"
    assert data["tiers"]["status"]["static"] == "incomplete"
    assert "failed" not in {c["outcome"] for c in data["checks"]}
    assert "--bisect" not in err
    # Progress: each check as it ends.
    assert "[1/" in err and "static.provenance" in err


def _breaks_the_cli(wt: Path) -> None:
    main = wt / "vllm" / "entrypoints" / "cli" / "main.py"
    main.write_text(main.read_text() + "\nraise SystemExit('broken by a patch')\n")


def test_a_real_failure_offers_bisect(example_build, tmp_path, capsys):
    _project, wheel, run = _wheel_with_patch(
        example_build, tmp_path, capsys, "break-cli", _breaks_the_cli
    )
    _, out, err = run("smoke", str(wheel), "--tier", "static", "--json", expect=1)
    by_id = {c["id"]: c for c in json.loads(out)["checks"]}
    assert by_id["static.cli-version"]["outcome"] == "failed"
    assert "--bisect" in err and "static.cli-version" in err


def test_a_wheel_that_does_not_match_the_series_is_not_bisected(example_build, tmp_path, capsys):
    project = smoke.copy_project(example_build, tmp_path / "project", edit_description=True)
    run = Runner(project, capsys)
    _, _, err = run(
        "smoke", str(example_build.wheel), "--tier", "static", "--deps", "none", expect=1
    )
    assert "static.provenance" in err
    assert "--bisect" not in err and "rebuild it" in err
