"""The rebase engine against the real 1Cat-vLLM fork (FORKPATCH_FORK_REPO or the fixture).

A series made from the fork's own commits v1.2.1..v1.2.2 (`git format-patch`, then
`forkpatch import`) must come out entirely `upstreamed` on v1.3.0.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from support import realfork
from support.cli import Runner
from support.projects import snapshot

pytestmark = pytest.mark.real_fork


@pytest.fixture
def real_series(tmp_path: Path, capsys) -> tuple[Path, Runner]:
    fork = realfork.fork_or_skip()
    realfork.tags_or_skip("v1.2.1", "v1.2.2", "v1.3.0")
    incoming = tmp_path / "incoming"
    subprocess.run(
        [
            "git",
            "-C",
            fork,
            "format-patch",
            "-q",
            "--zero-commit",
            "--no-signature",
            "-o",
            str(incoming),
            "v1.2.1..v1.2.2",
        ],
        check=True,
    )
    project = tmp_path / "project"
    project.mkdir()
    run = Runner(project, capsys)
    run("init", "--fork-url", fork, "--base", "v1.2.1")
    run("import", *sorted(str(p) for p in incoming.glob("*.patch")))
    return project, run


def test_real_fork_series_is_entirely_upstreamed_on_v130(real_series):
    project, run = real_series
    before = snapshot(project)
    start = time.monotonic()
    _, out, _ = run("check", "--onto", "v1.3.0", "--json")
    elapsed = time.monotonic() - start
    data = json.loads(out)
    assert data["base"] == "v1.2.1" and data["onto"] == "v1.3.0"
    assert data["patches"], "the series is empty"
    for p in data["patches"]:
        assert p["status"] == "upstreamed", p
        assert p["evidence"]
    assert snapshot(project) == before
    print(f"check --onto v1.3.0 of {len(data['patches'])} real patches: {elapsed:.1f}s")


def test_real_fork_rebase_drops_every_patch(real_series):
    project, run = real_series
    _, out, _ = run("rebase", "--onto", "v1.3.0", "--json")
    report = json.loads(out)
    assert {p["status"] for p in report["patches"]} == {"upstreamed"}
    assert len(report["dropped"]) == len(report["patches"])
    text = (project / "series.yaml").read_text()
    assert "tag: v1.3.0" in text and "patches: []" in text
    assert not any((project / "patches").iterdir())
