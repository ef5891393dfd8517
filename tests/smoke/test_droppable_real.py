"""`forkpatch droppable --onto v1.3.0` on the real series and the real fork (the fixture).

The fork's v1.3.0 wheel is built the way the fixture's v1.2.1 wheel was (the fork's own
setup.py, ``VLLM_TARGET_DEVICE=empty``: Python only); the series is this repository's.
At v1.3.0 cli-version is upstreamed (the fork took the fix), so it is droppable; the
four FP8 patches are needed: each one's static checks (the CPU stand-ins for the SM70
ops) pass with it and fail without it. The sm70 conditions cannot run here.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from forkpatch.cli import main
from support import REPO_ROOT, realfork

pytestmark = [pytest.mark.real_fork, pytest.mark.slow]

FP8_PATCHES = ("capability-floor", "odd-width-padding", "eager-block-cast", "packed-repack")


@pytest.fixture(scope="module")
def wheel_v130(tmp_path_factory: pytest.TempPathFactory) -> Path:
    realfork.fork_or_skip()
    realfork.tags_or_skip("v1.3.0")
    realfork.modules_or_skip((*realfork.FORK_MODULES, *realfork.BUILD_MODULES))
    tmp = tmp_path_factory.mktemp("v130")
    realfork.export_wheel_tree(realfork.FORK, "v1.3.0", tmp / "tree")
    proc = realfork.start_wheel_build(tmp / "tree", "1.3.0", tmp / "dist", tmp / "build.log")
    return realfork.finish_wheel_build(proc, tmp / "dist", tmp / "build.log")


def _files(project: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in [project / "series.yaml", *project.glob("patches/*")]}


def test_droppable_onto_v130(wheel_v130: Path, tmp_path: Path, capsys):
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy2(REPO_ROOT / "series.yaml", project / "series.yaml")
    shutil.copytree(REPO_ROOT / "patches", project / "patches")
    before = _files(project)
    args = ["-C", str(project), "--fork-repo", realfork.FORK, "droppable", "--onto", "v1.3.0"]
    code = main([*args, "--base-wheel", str(wheel_v130), "--json"])
    out, err = capsys.readouterr()
    assert code == 11, err
    data = json.loads(out)
    got = {p["name"]: p for p in data["patches"]}
    assert data["target"] == "v1.3.0" and data["droppable"] == ["cli-version"], got
    assert got["cli-version"]["verdict"] == "droppable"
    assert got["cli-version"]["evidence"].startswith("upstreamed at v1.3.0")
    for name in FP8_PATCHES:
        p = got[name]
        assert p["verdict"] == "needed", p
        failing = [c for c, o in p["checks_without_patch"].items() if o in ("failed", "error")]
        assert failing and all(c.startswith("static.") for c in failing), p
        assert all(p["checks_with_patch"][c] == "passed" for c in failing), p
        assert p["evidence"].startswith(f"{failing[0]} passes with the patch and"), p
    # The project itself is untouched (the rebase ran in a scratch copy).
    assert _files(project) == before
