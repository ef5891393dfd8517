"""Pure tests of the container-build helpers and the command runner (no Docker engine needed)."""

from __future__ import annotations

import hashlib
import io
import sys
import tarfile
from pathlib import Path

import pytest

from forkpatch.errors import BuildError
from forkpatch.fsutil import read_sums
from forkpatch.wheels.container import (
    CacheConfig,
    builder_context,
    builder_image_key,
    default_dockerfile,
    size_jobs,
)
from forkpatch.wheels.dist import commit_dist
from forkpatch.wheels.runner import redact, run
from forkpatch.wheels.sourcetree import write_source_tar
from support import REPO_ROOT
from support.containers import make_synthetic_fork

GiB = 1024**3
REPO = REPO_ROOT


def test_redact_hides_every_secret_longest_first() -> None:
    # By value only from 8 characters on (forkpatch.redact.MIN_SECRET_LENGTH).
    text = "key=abcdef123456 id=abcdef123456XYZ token="
    assert redact(text, ["abcdef123456", "abcdef123456XYZ", None, ""]) == "key=**** id=**** token="


def test_run_keeps_output_and_shows_it_only_on_failure(capfd) -> None:  # type: ignore[no-untyped-def]
    ok = run([sys.executable, "-c", "print('hello')"], what="say hello")
    assert ok.stdout == "hello\n"
    err = capfd.readouterr().err
    assert "+ " in err and "print" in err and "hello\n" not in err.replace("'hello'", "")

    script = "import sys\nfor i in range(50): print('line', i)\nsys.exit(4)"
    with pytest.raises(BuildError) as info:
        run([sys.executable, "-c", script], what="count to fifty")
    msg = str(info.value)
    assert msg.startswith("cannot count to fifty: `")
    assert "exited with code 4" in msg
    assert "line 49" in msg and "line 20" in msg and "line 19\n" not in msg  # last 30 lines
    assert "line 0\n" in capfd.readouterr().err  # full output shown on failure


def test_run_redacts_secrets_and_names_missing_tools(capfd) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(BuildError) as info:
        run(
            [sys.executable, "-c", "import sys; print('tok=s3cr3t'); sys.exit(1)", "s3cr3t"],
            what="leak",
            secrets=["s3cr3t"],
        )
    assert "s3cr3t" not in str(info.value) and "s3cr3t" not in capfd.readouterr().err
    with pytest.raises(BuildError, match="did not start") as info:
        run(["forkpatch-no-such-tool"], what="run a missing tool")
    assert "PATH" in (info.value.tip or "")


def test_run_streams_lines(capfd) -> None:  # type: ignore[no-untyped-def]
    buf = io.StringIO()
    res = run([sys.executable, "-c", "print('a'); print('b')"], what="stream", stream=buf)
    assert buf.getvalue() == "a\nb\n" and res.stdout == "a\nb\n"


def test_size_jobs_by_cores_and_memory() -> None:
    assert size_jobs(16, 128 * GiB) == (16, 1)
    assert size_jobs(64, 64 * GiB) == (16, 1)  # memory-bound: 4 GiB a job
    assert size_jobs(2, 2 * GiB) == (1, 1)
    assert size_jobs(8, 0) == (8, 1)  # unknown memory


def test_builder_image_key_changes_with_every_input() -> None:
    base = builder_image_key(b"FROM x", {"a": b"1"}, "img", {"A": "1"}, "sha256:1")
    assert base == builder_image_key(b"FROM x", {"a": b"1"}, "img", {"A": "1"}, "sha256:1")
    assert (
        len(
            {
                base,
                builder_image_key(b"FROM y", {"a": b"1"}, "img", {"A": "1"}, "sha256:1"),
                builder_image_key(b"FROM x", {"a": b"2"}, "img", {"A": "1"}, "sha256:1"),
                builder_image_key(b"FROM x", {"a": b"1"}, "img2", {"A": "1"}, "sha256:1"),
                builder_image_key(b"FROM x", {"a": b"1"}, "img", {"A": "2"}, "sha256:1"),
                builder_image_key(b"FROM x", {"a": b"1"}, "img", {"A": "1"}, "sha256:2"),
            }
        )
        == 6
    )


def test_source_tar_excludes_vcs_and_build_leftovers(tmp_path: Path) -> None:
    src = make_synthetic_fork(tmp_path / "fork", functions=1)
    (src / "vllm" / "__pycache__").mkdir()
    (src / "vllm" / "__pycache__" / "x.pyc").write_bytes(b"x")
    (src / "tools").mkdir()
    (src / "tools" / "run.sh").write_text("#!/bin/sh\n")
    (src / "tools" / "run.sh").chmod(0o755)
    (src / "link").symlink_to("vllm")
    buf = io.BytesIO()
    write_source_tar(src, buf)
    buf.seek(0)
    with tarfile.open(fileobj=buf) as tar:
        members = {m.name: m for m in tar}
    assert "setup.py" in members and "flash-attention-v100/setup.py" in members
    assert not [n for n in members if n.startswith((".git", "build")) or "__pycache__" in n]
    assert members["tools/run.sh"].mode & 0o111
    assert members["link"].issym() and members["link"].linkname == "vllm"
    assert {m.uid for m in members.values()} == {0}


def test_source_tar_from_tree_entries() -> None:
    entries = [
        ("a/x.py", 0o100644, b"x = 1\n"),
        ("a/run", 0o100755, b"#!/bin/sh\n"),
        ("l", 0o120000, b"a"),
    ]
    buf = io.BytesIO()
    assert write_source_tar(entries, buf) == 3
    buf.seek(0)
    with tarfile.open(fileobj=buf) as tar:
        m = {t.name: t for t in tar}
        assert tar.extractfile(m["a/x.py"]).read() == b"x = 1\n"  # type: ignore[union-attr]
    assert m["a/run"].mode == 0o755 and m["a/x.py"].mode == 0o644 and m["l"].issym()


def test_builder_context_follows_requirement_includes(tmp_path: Path) -> None:
    src = tmp_path / "fork"
    (src / "requirements" / "build").mkdir(parents=True)
    (src / "requirements" / "build" / "cuda.txt").write_text("-r ../common.txt\nninja\n")
    (src / "requirements" / "cuda.txt").write_text("-r common.txt\ntorch==2.10.0\n")
    (src / "requirements" / "common.txt").write_text("-c constraints.txt\nregex\n")
    (src / "requirements" / "constraints.txt").write_text("regex<2030\n")
    ctx = builder_context(src, dockerfile=REPO / "ci" / "builder.Dockerfile", toolchain="apt")
    assert set(ctx) == {
        "ci/container-build.sh",
        "cuda-wheels.lock",
        "requirements/build/cuda.txt",
        "requirements/cuda.txt",
        "requirements/common.txt",
        "requirements/constraints.txt",
        "requirements/.forkpatch-keep",
        "tools/.forkpatch-keep",
    }
    (src / "requirements" / "cuda.txt").unlink()
    with pytest.raises(BuildError, match=r"no requirements/cuda\.txt"):
        builder_context(src, dockerfile=REPO / "ci" / "builder.Dockerfile", toolchain="apt")
    # The stand-in path does not need them.
    builder_context(src, dockerfile=REPO / "ci" / "builder.Dockerfile", toolchain="none")


def test_cache_config_from_env_and_secrets() -> None:
    assert CacheConfig.from_env({}).kind == "ccache"
    assert CacheConfig.from_env({"FORKPATCH_CCACHE_VOLUME": "v"}).volume == "v"
    env = {
        "SCCACHE_BUCKET": "b",
        "SCCACHE_ENDPOINT": "http://127.0.0.1:9",
        "AWS_ACCESS_KEY_ID": "AKIA",
        "AWS_SECRET_ACCESS_KEY": "shh",
        "HOME": "/root",
    }
    cache = CacheConfig.from_env(env)
    assert cache.kind == "sccache"
    cenv, secrets = cache.container_env(env)
    assert cenv["AWS_SECRET_ACCESS_KEY"] == "shh" and "HOME" not in cenv
    assert set(secrets) == {"AKIA", "shh"}
    assert "shh" not in repr(cache)
    with pytest.raises(BuildError, match="not a cache kind"):
        CacheConfig.from_env({"FORKPATCH_CACHE": "distcc"})
    from_yaml = CacheConfig.from_mapping({"volume": "team-ccache", "max-size": "50G"}, environ={})
    assert (from_yaml.kind, from_yaml.volume, from_yaml.ccache_max_size) == (
        "ccache",
        "team-ccache",
        "50G",
    )
    with pytest.raises(BuildError, match="did you mean 'volume'"):
        CacheConfig.from_mapping({"volumes": "x"}, environ={})
    with pytest.raises(BuildError, match="needs SCCACHE_BUCKET"):
        CacheConfig(kind="sccache").container_env({})


def test_a_build_commits_its_wheels_and_sha256sums_as_one_unit(tmp_path: Path) -> None:
    """The container path's outputs enter dist/ as the overlay path's do: every wheel
    there (old and new) listed in SHA256SUMS, nothing else, and no journal left."""
    dist = tmp_path / "dist"
    dist.mkdir()
    (dist / "b-1-py3-none-any.whl").write_bytes(b"b")
    (dist / "notes.txt").write_text("x")
    staging = dist / ".forkpatch-stage-x"
    staging.mkdir()
    (staging / "a-1-py3-none-any.whl").write_bytes(b"a")
    commit_dist(dist, [staging / "a-1-py3-none-any.whl"])
    text = (dist / "SHA256SUMS").read_text()
    assert [line.split("  ")[1] for line in text.splitlines()] == [
        "a-1-py3-none-any.whl",
        "b-1-py3-none-any.whl",
    ]
    assert text.startswith("ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb  ")
    assert (dist / "a-1-py3-none-any.whl").read_bytes() == b"a"
    assert read_sums(dist) == {
        "a-1-py3-none-any.whl": hashlib.sha256(b"a").hexdigest(),
        "b-1-py3-none-any.whl": hashlib.sha256(b"b").hexdigest(),
    }
    assert sorted(p.name for p in dist.iterdir()) == [
        ".forkpatch-stage-x",
        "SHA256SUMS",
        "a-1-py3-none-any.whl",
        "b-1-py3-none-any.whl",
        "notes.txt",
    ]


def test_builder_files_ship_as_package_data() -> None:
    """An installed forkpatch has no ci/: the Dockerfile and the in-image build script are
    package data (symlinks to ci/ in the checkout, copied into the wheel)."""
    import forkpatch

    data = Path(forkpatch.__file__).resolve().parent / "data"
    for name in ("builder.Dockerfile", "container-build.sh", "cuda-wheels.lock"):
        assert (data / name).read_bytes() == (REPO / "ci" / name).read_bytes(), name
    found = default_dockerfile()
    assert found.read_bytes() == (REPO / "ci" / "builder.Dockerfile").read_bytes()
    assert (found.parent / "container-build.sh").is_file()
    builder_context(REPO, dockerfile=found, toolchain="none")
