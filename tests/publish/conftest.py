from __future__ import annotations

import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "smoke"))

import smokekit


@pytest.fixture(scope="session")
def example_build(tmp_path_factory: pytest.TempPathFactory) -> smokekit.ExampleBuild:
    return smokekit.build_example(tmp_path_factory.mktemp("example-build"))


@pytest.fixture(scope="session")
def smoked(example_build: smokekit.ExampleBuild, tmp_path_factory: pytest.TempPathFactory
           ) -> Path:
    """A directory holding the wheel and the real static-tier smoke report beside it
    (no project: `--deps none`, only the baseline checks)."""
    from forkpatch.smoke import SmokeOptions, run_smoke

    d = tmp_path_factory.mktemp("smoked")
    wheel = d / example_build.wheel.name
    shutil.copy2(example_build.wheel, wheel)
    outcome = run_smoke(SmokeOptions(wheels=(wheel,), tier="static", deps="none"))
    assert outcome.passed, outcome.report
    assert outcome.report["tiers"]["status"]["static"] == "passed", outcome.report["tiers"]
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
    port = smokekit.free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pypiserver", "run", "-p", str(port), "-i", "127.0.0.1",
         "-P", str(tmp_path / "htpasswd"), "-a", "update,download,list", "--disable-fallback",
         "--hash-algo", "sha256", "--log-stream", "none", str(root)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(url + "health", timeout=2).read()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail("pypiserver did not start")
            time.sleep(0.2)
    try:
        yield IndexServer(url=url, root=root, user=user, password=password, proc=proc)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
