"""`forkpatch build-wheel` refusals through the CLI: clear errors, nothing in dist/."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from forkpatch.example import build_release_wheel
from support.wheelfactory import base_files, build_wheel


def _dist(project: Path) -> list[str]:
    d = project / "dist"
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


def _add_compiled_patch(project: Path, run, fork: Path, tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    subprocess.run(["git", "clone", "-q", str(fork), str(wt)], check=True)
    subprocess.run(["git", "-C", str(wt), "checkout", "-q", "v1.2.1"], check=True)
    (wt / "csrc" / "ops.cu").write_text("// faster\n__global__ void noop() {}\n")
    diff = subprocess.run(["git", "-C", str(wt), "diff"], check=True, capture_output=True).stdout
    patch = tmp_path / "kernel-tweak.patch"
    patch.write_bytes(b"Tweak the kernel.\n\n" + diff)
    run("import", str(patch))


def test_overlay_refuses_a_series_that_touches_compiled_code(
    example_project, example_fork, tmp_path
):
    project, run = example_project
    _add_compiled_patch(project, run, example_fork.path, tmp_path)
    base = build_release_wheel(example_fork.path, "v1.2.1", tmp_path / "release")
    _, _, err = run("build-wheel", "--mode", "overlay", "--base-wheel", str(base), expect=1)
    assert "compiled code" in err and "csrc/ops.cu" in err and "--mode container" in err
    assert _dist(project) == []


def test_auto_mode_says_why_it_picks_the_container(
    example_project, example_fork, tmp_path, monkeypatch
):
    project, run = example_project
    _add_compiled_patch(project, run, example_fork.path, tmp_path)
    base = build_release_wheel(example_fork.path, "v1.2.1", tmp_path / "release")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-such-docker.sock")
    _, _, err = run("build-wheel", "--base-wheel", str(base), expect=1)
    assert "build mode: container (the series touches compiled code (csrc/ops.cu" in err
    assert "no Docker engine" in err
    # The tip is one a user's project can follow: no script of forkpatch's own CI.
    assert "ci/start-docker.sh" not in err and "systemctl start docker" in err
    assert "DOCKER_HOST" in err and "--mode overlay" in err
    assert _dist(project) == []


def test_base_wheel_of_another_version_is_refused(example_project, example_fork, tmp_path):
    project, run = example_project
    other = build_release_wheel(example_fork.path, "v1.3.0", tmp_path / "release")
    _, _, err = run("build-wheel", "--mode", "overlay", "--base-wheel", str(other), expect=1)
    assert "1.3.0" in err and "1.2.1" in err
    assert _dist(project) == []


@pytest.mark.parametrize("other", ["six", "vllm", "1cat-vllm-extras"])
def test_base_wheel_of_another_distribution_is_refused(example_project, tmp_path, other):
    """Same version, another project's wheel: named as such, not as a version mismatch."""
    project, run = example_project
    (tmp_path / "other").mkdir()
    wheel = build_wheel(tmp_path / "other", base_files("1.2.1"), name=other, version="1.2.1")
    _, _, err = run("build-wheel", "--mode", "overlay", "--base-wheel", str(wheel), expect=1)
    assert f"the {other!r} distribution" in err and "1cat-vllm" in err, err
    assert "rebase" not in err
    assert _dist(project) == []


def test_corrupt_base_wheel_is_refused(example_project, tmp_path):
    project, run = example_project
    bad = tmp_path / "1cat_vllm-1.2.1-py3-none-any.whl"
    bad.write_bytes(b"PK\x03\x04 not really a zip")
    _, _, err = run("build-wheel", "--mode", "overlay", "--base-wheel", str(bad), expect=1)
    assert bad.name in err
    assert _dist(project) == []


def test_overlay_build_json_and_verify(example_project, example_fork, tmp_path):
    project, run = example_project
    base = build_release_wheel(example_fork.path, "v1.2.1", tmp_path / "release")
    _, out, _ = run("build-wheel", "--base-wheel", str(base), "--json")
    data = json.loads(out)
    assert data["mode"] == "overlay" and "only Python files" in data["reason"]
    assert sorted(_dist(project)) == sorted([Path(data["wheels"][0]).name, "SHA256SUMS"])
    _, out, _ = run("verify", data["wheels"][0], "--json")
    assert json.loads(out)["matches_series"] is True
    # The fork's own (base) wheel is not the series' wheel: a mismatch in a project
    # (exit 1), with the reason; outside a project only its RECORD is checked.
    _, out, err = run("verify", str(base), "--json", expect=1)
    data = json.loads(out)
    assert data["record_ok"] is True and data["matches_series"] is False
    assert "no forkpatch provenance" in data["differences"][0]
    _, _, err = run("verify", str(base), expect=1)
    assert "does NOT match" in err
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "forkpatch", "-C", str(outside), "verify", str(base)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0 and "RECORD: ok" in proc.stderr, proc.stderr


@pytest.mark.parametrize("ignored", [False, True], ids=["not ignored", "ignored"])
def test_build_wheel_warns_when_dist_is_not_git_ignored(
    example_project, example_fork, tmp_path, ignored
):
    """A team repository not made by `init` may not ignore dist/: the command that
    writes it says so (the wheels would show as untracked files)."""
    project, run = example_project
    (project / ".gitignore").write_text(".forkpatch/\n" + ("dist/\n" if ignored else ""))
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    base = build_release_wheel(example_fork.path, "v1.2.1", tmp_path / "release")
    _, _, err = run("build-wheel", "--mode", "overlay", "--base-wheel", str(base))
    warned = f"{project / 'dist'} is not ignored by git" in err
    assert warned != ignored, err
    if not ignored:
        assert f"add `dist/` to {project / '.gitignore'}" in err
