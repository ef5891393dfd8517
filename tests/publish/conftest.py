"""Fixtures for the publish tests: the example wheel with its smoke report, an index."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.servers import serve_pypiserver
from support.smoke import ExampleBuild


@pytest.fixture(scope="session")
def smoked(example_build: ExampleBuild, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the wheel and the real static-tier smoke report beside it
    (no project: `--deps none`, only the baseline checks)."""
    from forkpatch.smoke import SmokeOptions, run_smoke

    d = tmp_path_factory.mktemp("smoked")
    wheel = d / example_build.wheel.name
    shutil.copy2(example_build.wheel, wheel)
    outcome = run_smoke(SmokeOptions(wheels=(wheel,), tier="static", deps="none"))
    assert outcome.passed, outcome.report
    assert outcome.report.status("static") == "passed", outcome.report.statuses()
    return d


@pytest.fixture
def wheel_dir(smoked: Path, tmp_path: Path) -> Path:
    """A private copy of the smoked wheel and its report."""
    d = tmp_path / "dist"
    shutil.copytree(smoked, d)
    return d


@dataclass
class IndexServer:
    url: str
    root: Path
    user: str
    password: str
    proc: subprocess.Popen[bytes]

    def files(self) -> list[str]:
        return sorted(p.name for p in self.root.iterdir() if not p.name.startswith("."))


@pytest.fixture
def pypiserver(tmp_path: Path) -> Iterator[IndexServer]:
    """pypiserver on 127.0.0.1 with a free port; upload, download and list need a password."""
    pytest.importorskip("pypiserver")
    passlib = pytest.importorskip("passlib.apache")
    root = tmp_path / "index-root"
    root.mkdir()
    user, password = "publisher", "s3cret-index-pw"
    ht = passlib.HtpasswdFile(str(tmp_path / "htpasswd"), new=True, default_scheme="apr_md5_crypt")
    ht.set_password(user, password)
    ht.save()
    options = [
        "-P",
        str(tmp_path / "htpasswd"),
        "-a",
        "update,download,list",
        "--disable-fallback",
        "--hash-algo",
        "sha256",
        "--log-stream",
        "none",
    ]
    try:
        with serve_pypiserver(root, options, ready_path="health") as (url, proc):
            yield IndexServer(url=url, root=root, user=user, password=password, proc=proc)
    except RuntimeError as exc:
        pytest.fail(str(exc))
