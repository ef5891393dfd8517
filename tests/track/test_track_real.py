"""`forkpatch track` against the real 1Cat-vLLM fork (FORKPATCH_FORK_REPO or the fixture).

With the series at v1.2.1, the newer releases are v1.2.2 and v1.3.0 and track
acts on v1.3.0; `track --run --no-publish` rebases onto it and writes the
summary. The build needs the fork's released wheel for v1.3.0
(``FORKPATCH_REAL_BASE_WHEEL``, a path; else only the rebase stage runs: a
from-source build is the Docker tests' business).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from forkpatch.cli import main
from support import realfork

REPO_ROOT = realfork.REPO_ROOT
FORK = realfork.FORK

pytestmark = pytest.mark.real_fork


@pytest.fixture
def real_project(tmp_path: Path) -> Path:
    realfork.fork_or_skip()
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy2(REPO_ROOT / "series.yaml", project / "series.yaml")
    shutil.copytree(REPO_ROOT / "patches", project / "patches")
    return project


def test_track_offers_v130(real_project: Path, capsys):
    code = main(["-C", str(real_project), "--fork-repo", str(FORK), "track", "--json"])
    out, err = capsys.readouterr()
    assert code == 10, err
    data = json.loads(out)
    assert data["base"] == "v1.2.1"
    assert [t["tag"] for t in data["newer"]] == ["v1.2.2", "v1.3.0"]
    assert data["target"]["tag"] == "v1.3.0"
    assert data["unparsable"] == []
    assert data["forecast"]["branch"]  # the fork's default branch was checked


def test_track_run_no_publish_writes_the_summary(real_project: Path, tmp_path: Path, capsys):
    out_dir = tmp_path / "out"
    base_wheel = os.environ.get("FORKPATCH_REAL_BASE_WHEEL")
    steps = "rebase,build,smoke" if base_wheel else "rebase"
    args = [
        "-C",
        str(real_project),
        "--fork-repo",
        str(FORK),
        "track",
        "--run",
        "--no-publish",
        "--json",
        "--out",
        str(out_dir),
        "--steps",
        steps,
        "--smoke-tier",
        "static",
    ]
    if base_wheel:
        args += ["--base-wheel", base_wheel]
    code = main(args)
    out, err = capsys.readouterr()
    assert code == 0, err
    data = json.loads(out)
    assert data["tag"] == "v1.3.0"
    assert data["stages"]["rebase"]["status"] == "done"
    assert data["stages"]["rebase"]["patches"]["cli-version"] == "upstreamed"
    summary = (out_dir / "v1.3.0" / "summary.md").read_text()
    assert summary.startswith("# forkpatch: v1.2.1 → v1.3.0")
    assert "## Rebase" in summary and "forkpatch/rebase-v1.3.0" in summary
    rebased = (out_dir / "v1.3.0" / "project" / "series.yaml").read_text()
    assert "tag: v1.3.0" in rebased
    # the project itself is untouched
    assert (real_project / "series.yaml").read_bytes() == (REPO_ROOT / "series.yaml").read_bytes()
    # a second run is a no-op
    assert main(args) == 0
    assert (out_dir / "v1.3.0" / "summary.md").read_text() == summary
