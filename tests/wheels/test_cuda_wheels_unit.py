"""The CUDA wheel route's pieces that need no engine: the lock, the loopback server,
the build options, local fork sources in the source archive. Fast; default suite."""

from __future__ import annotations

import io
import socket
import tarfile
import urllib.request
from pathlib import Path

import pytest

from forkpatch.errors import BuildError
from forkpatch.wheels.container import builder_context
from forkpatch.wheels.options import BuildOptions
from forkpatch.wheels.sourcetree import write_source_tar
from forkpatch.wheels.wheelhouse import lock_text, serve, stable_port
from support import REPO_ROOT

H = {c: c * 64 for c in "abcdef"}


def _item(name: str, version: str, digest: str | None) -> dict:  # type: ignore[type-arg]
    hashes = {"sha256": digest} if digest else {}
    return {
        "metadata": {"name": name, "version": version},
        "download_info": {"url": f"https://x/{name}.whl", "archive_info": {"hashes": hashes}},
    }


def test_lock_merges_the_files_of_every_python_and_marks_diverging_versions() -> None:
    text = lock_text(
        {
            "3.11": {
                "install": [
                    _item("Torch", "2.10.0", H["a"]),
                    _item("typing_extensions", "4.16.0", H["c"]),
                    _item("networkx", "3.6.1", H["d"]),
                ]
            },
            "3.12": {
                "install": [
                    _item("torch", "2.10.0", H["b"]),
                    _item("typing-extensions", "4.16.0", H["c"]),
                    _item("networkx", "3.7", H["e"]),
                ]
            },
        }
    )
    body = [line for line in text.splitlines() if not line.startswith("#")]
    assert body == [
        "networkx==3.6.1 ; python_version == '3.11' \\",
        f"    --hash=sha256:{H['d']}",
        "networkx==3.7 ; python_version == '3.12' \\",
        f"    --hash=sha256:{H['e']}",
        "torch==2.10.0 \\",
        f"    --hash=sha256:{H['a']} \\",
        f"    --hash=sha256:{H['b']}",
        "typing-extensions==4.16.0 \\",
        f"    --hash=sha256:{H['c']}",
    ]
    with pytest.raises(BuildError, match=r"no sha256 for torch 2\.10\.0"):
        lock_text({"3.12": {"install": [_item("torch", "2.10.0", None)]}})


def test_the_committed_lock_pins_the_target_stack() -> None:
    """torch 2.10.0 for both Pythons, the CUDA 12.8 runtime it brings, every line hashed."""
    text = (REPO_ROOT / "ci" / "cuda-wheels.lock").read_text()
    lines = text.splitlines()
    at = lines.index("torch==2.10.0 \\")
    hashes = []
    for line in lines[at + 1 :]:
        if not line.startswith("    --hash=sha256:"):
            break
        hashes.append(line)
    assert len(hashes) == 2  # the cp311 and the cp312 file
    assert "nvidia-cuda-runtime-cu12==12.8.90" in text
    for line in text.splitlines():
        if line and not line.startswith(("#", " ")):
            assert "==" in line and line.endswith("\\"), line
    # The data copy an installed forkpatch ships is the same file.
    data = REPO_ROOT / "src" / "forkpatch" / "data" / "cuda-wheels.lock"
    assert data.read_bytes() == text.encode()


def test_serve_hands_a_directory_over_loopback_and_falls_back_when_the_port_is_taken(
    tmp_path: Path,
) -> None:
    (tmp_path / "a-1-py3-none-any.whl").write_bytes(b"wheel bytes")
    port = stable_port(b"lock")
    assert 40000 <= port < 60000 and port == stable_port(b"lock") != stable_port(b"other")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        with serve(tmp_path, busy) as url:
            assert url.startswith("http://127.0.0.1:") and f":{busy}/" not in url
            listing = urllib.request.urlopen(url, timeout=10).read().decode()
            assert 'href="a-1-py3-none-any.whl"' in listing
            wheel = urllib.request.urlopen(url + "a-1-py3-none-any.whl", timeout=10).read()
            assert wheel == b"wheel bytes"
    with pytest.raises(BuildError, match="is not a directory"), serve(tmp_path / "nope"):
        pass


def test_build_options_reject_what_no_route_reads(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match="unknown toolchain 'conda'"):
        BuildOptions(toolchain="conda")
    with pytest.raises(BuildError, match="only read by the wheels toolchain"):
        BuildOptions(toolchain="apt", wheelhouse=tmp_path)
    with pytest.raises(BuildError, match="'CUTLASS_DIR' is not one of the fork's source"):
        BuildOptions(sources={"CUTLASS_DIR": tmp_path})
    ok = BuildOptions(
        toolchain="wheels", wheelhouse=tmp_path, sources={"VLLM_CUTLASS_SRC_DIR": tmp_path}
    )
    assert ok.toolchain == "wheels"


def test_source_archive_under_a_prefix(tmp_path: Path) -> None:
    (tmp_path / "include" / "cutlass").mkdir(parents=True)
    (tmp_path / "include" / "cutlass" / "cutlass.h").write_text("#pragma once\n")
    buf = io.BytesIO()
    write_source_tar(tmp_path, buf, prefix="/deps/vllm_cutlass")
    buf.seek(0)
    with tarfile.open(fileobj=buf) as tar:
        names = tar.getnames()
    assert names[:2] == ["deps", "deps/vllm_cutlass"]
    assert "deps/vllm_cutlass/include/cutlass/cutlass.h" in names
    assert all(n.startswith("deps") for n in names)
    buf = io.BytesIO()
    write_source_tar([("x/y.cu", 0o100644, b"int y;\n")], buf, prefix="deps/t")
    buf.seek(0)
    with tarfile.open(fileobj=buf) as tar:
        assert tar.getnames() == ["deps", "deps/t", "deps/t/x/y.cu"]


def test_the_wheels_route_needs_the_lock_the_others_do_not(tmp_path: Path) -> None:
    ci = tmp_path / "ci"
    ci.mkdir()
    (ci / "container-build.sh").write_text("#!/bin/sh\n")
    (ci / "builder.Dockerfile").write_text("FROM scratch\n")
    src = tmp_path / "fork"
    src.mkdir()
    ctx = builder_context(src, dockerfile=ci / "builder.Dockerfile", toolchain="none")
    assert ctx["cuda-wheels.lock"] == b""  # the Dockerfile COPYs it whatever the route
    with pytest.raises(BuildError, match=r"cannot read .*cuda-wheels\.lock"):
        builder_context(src, dockerfile=ci / "builder.Dockerfile", toolchain="wheels")
    (ci / "cuda-wheels.lock").write_text("torch==2.10.0 --hash=sha256:" + H["a"] + "\n")
    ctx = builder_context(src, dockerfile=ci / "builder.Dockerfile", toolchain="wheels")
    assert ctx["cuda-wheels.lock"].startswith(b"torch==2.10.0")


def test_build_wheel_options_for_the_wheel_route_are_checked_before_any_build(
    example_project, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    _project, run = example_project
    code, _out, err = run(
        "build-wheel", "--mode", "container", "--fork-source", "no-equals-sign", expect=None
    )
    assert code == 2 and "'no-equals-sign' is not VAR=DIR" in err
    code, _out, err = run(
        "build-wheel", "--mode", "container", "--wheelhouse", str(tmp_path), expect=None
    )
    assert code == 1 and "only read by the wheels toolchain (got 'apt')" in err
    code, _out, err = run(
        "build-wheel",
        "--mode",
        "container",
        "--toolchain",
        "wheels",
        "--fork-source",
        f"CUTLASS={tmp_path}",
        expect=None,
    )
    assert code == 1 and "'CUTLASS' is not one of the fork's source variables" in err
    assert "VLLM_CUTLASS_SRC_DIR" in err  # the tip names the real ones
