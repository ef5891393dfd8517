"""Which fork repository forkpatch uses, and fork repositories that cannot serve the series.

- precedence: ``--fork-repo`` > a local ``fork.url`` > ``FORKPATCH_FORK_REPO`` > a
  remote ``fork.url`` (a developer's variable must not replace another local fork);
- a repository without series.yaml's base commit is refused naming both, never
  reported as "does not apply" or as a moved tag;
- shallow clones work between their boundaries and say how deep they must be;
- a read-only fork repository is never written to.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import pytest
import yaml

from support.cli import Runner
from support.git import ScratchRepo, git
from support.projects import EXAMPLE_NAMES, copy_example, snapshot

REMOTE = "https://forkpatch.invalid/1cat-vllm.git"


def _other_fork(path: Path) -> ScratchRepo:
    """A fork with the same tag names as the example fork and unrelated commits."""
    repo = ScratchRepo(path)
    for tag in ("v1.2.0", "v1.2.1", "v1.3.0"):
        repo.add_file("README.md", f"another fork at {tag}\n")
        repo.commit(tag)
        repo.tag(tag)
    return repo


def _remote_url(project: Path, url: str = REMOTE) -> None:
    series = project / "series.yaml"
    data = yaml.safe_load(series.read_text())
    series.write_text(series.read_text().replace(data["fork"]["url"], url))


# --------------------------------------------------------------------------- precedence


def test_init_with_a_local_fork_url_ignores_the_environment(tmp_path, capsys, monkeypatch):
    """`init --fork-url <local fork>` records that fork's base, whatever FORKPATCH_FORK_REPO says."""
    ex = copy_example(tmp_path, capsys, with_project=False)
    other = _other_fork(tmp_path / "other")
    monkeypatch.setenv("FORKPATCH_FORK_REPO", str(other.path))
    ex.run("init", "--fork-url", str(ex.fork.path), "--base", "v1.2.1")
    base = yaml.safe_load((ex.project / "series.yaml").read_text())["base"]
    assert base["commit"] == ex.fork.rev("v1.2.1^{commit}") != other.rev("v1.2.1^{commit}")
    ex.run("import", *map(str, ex.incoming))
    _, out, _ = ex.run("status", "--json")
    assert [p["status"] for p in json.loads(out)["patches"]] == ["clean"] * 4
    ex.run("apply")


@pytest.mark.parametrize("command", [["status"], ["apply"], ["check", "--onto", "v1.3.0"]])
def test_project_with_a_local_fork_url_ignores_the_environment(
    tmp_path, capsys, monkeypatch, command
):
    ex = copy_example(tmp_path, capsys)
    other = _other_fork(tmp_path / "other")
    monkeypatch.setenv("FORKPATCH_FORK_REPO", str(other.path))
    before = snapshot(ex.project)
    ex.run(*command)
    assert snapshot(ex.project) == before


def test_environment_stands_in_for_a_remote_fork_url(tmp_path, capsys, monkeypatch):
    ex = copy_example(tmp_path, capsys)
    _remote_url(ex.project)
    monkeypatch.setenv("FORKPATCH_FORK_REPO", str(ex.fork.path))
    _, out, _ = ex.run("status", "--json")
    assert [p["name"] for p in json.loads(out)["patches"]] == EXAMPLE_NAMES


def test_explicit_fork_repo_beats_a_local_fork_url(tmp_path, capsys, monkeypatch):
    ex = copy_example(tmp_path, capsys)
    other = _other_fork(tmp_path / "other")
    monkeypatch.delenv("FORKPATCH_FORK_REPO", raising=False)
    _, _, err = ex.run("--fork-repo", str(other.path), "status", expect=1)
    assert str(other.path) in err and "--fork-repo" in err


# --------------------------------------------------------------------------- wrong repository


@pytest.mark.parametrize("how", ["env", "option"])
@pytest.mark.parametrize(
    "command",
    [
        ["status"],
        ["apply"],
        ["check", "--onto", "v1.3.0"],
        ["rebase", "--onto", "v1.3.0"],
        ["import", "PLACEHOLDER"],
    ],
)
def test_repository_without_the_base_commit_is_named_with_it(
    tmp_path, capsys, monkeypatch, how, command
):
    """Not "does not apply", not "the tag was moved": the repository and the commit."""
    ex = copy_example(tmp_path, capsys)
    _remote_url(ex.project)
    other = _other_fork(tmp_path / "other")
    base = ex.fork.rev("v1.2.1^{commit}")
    pre: list[str] = []
    if how == "env":
        monkeypatch.setenv("FORKPATCH_FORK_REPO", str(other.path))
    else:
        pre = ["--fork-repo", str(other.path)]
    if command[0] == "import":
        plain = tmp_path / "new.diff"
        plain.write_text("--- a/README.md\n+++ b/README.md\n@@ -1 +1,2 @@\n-x\n+y\n+z\n")
        command = ["import", "--name", "fresh", str(plain)]
    before = snapshot(ex.project)
    code, _out, err = ex.run(*pre, *command, expect=None)
    assert code == 1, err
    assert str(other.path) in err and base in err, err
    assert ("FORKPATCH_FORK_REPO" if how == "env" else "--fork-repo") in err
    for wrong in ("does not apply", "was moved", "Traceback"):
        assert wrong not in err, err
    assert snapshot(ex.project) == before


# --------------------------------------------------------------------------- shallow clones


def _shallow_clone(src: Path, dest: Path, *args: str) -> Path:
    git(dest.parent, "clone", "-q", "--bare", *args, f"file://{src}", str(dest))
    return dest


def test_shallow_clone_with_the_history_between_base_and_target(tmp_path, capsys, monkeypatch):
    """A clone cut just before the base: everything from the base on works."""
    ex = copy_example(tmp_path, capsys)
    monkeypatch.delenv("FORKPATCH_FORK_REPO", raising=False)
    clone = _shallow_clone(ex.fork.path, tmp_path / "shallow.git", "--shallow-exclude=v1.2.0")
    assert (clone / "shallow").is_file()
    run = Runner(ex.project, capsys)
    pre = ["--fork-repo", str(clone)]
    _, out, _ = run(*pre, "status", "--json")
    assert [p["status"] for p in json.loads(out)["patches"]] == ["clean"] * 4
    run(*pre, "apply")
    _, out, _ = run(*pre, "check", "--onto", "v1.3.0", "--json")
    statuses = {p["name"]: p["status"] for p in json.loads(out)["patches"]}
    assert statuses["cli-version"] == "upstreamed", statuses
    run(*pre, "rebase", "--onto", "v1.3.0")
    assert "tag: v1.3.0" in (ex.project / "series.yaml").read_text()
    # The store knows the boundary: a walk past it stops there instead of failing.
    store = ex.project / ".forkpatch" / "repo.git"
    assert (store / "shallow").read_text() == (clone / "shallow").read_text()
    assert git(store, "rev-list", "--count", ex.fork.rev("v1.3.0^{commit}"))


def test_shallow_clone_cut_inside_the_range_says_how_deep(tmp_path, capsys, monkeypatch):
    """Base and target are there, the commits between them are not."""
    ex = copy_example(tmp_path, capsys)
    monkeypatch.delenv("FORKPATCH_FORK_REPO", raising=False)
    clone = _shallow_clone(ex.fork.path, tmp_path / "cut.git", "--depth=1", "--branch=v1.3.0")
    git(clone, "fetch", "-q", "--depth=1", f"file://{ex.fork.path}", "tag", "v1.2.1")
    run = Runner(ex.project, capsys)
    before = snapshot(ex.project)
    code, _, err = run("--fork-repo", str(clone), "check", "--onto", "v1.3.0", expect=None)
    assert code == 1, err
    assert "shallow" in err and "v1.3.0" in err and "--unshallow" in err, err
    assert "--shallow-since=2026-06-23" in err, err  # the base's date: deep enough
    assert "Traceback" not in err and "Failed to traverse" not in err
    assert snapshot(ex.project) == before


def test_shallow_clone_without_the_base_says_so(tmp_path, capsys, monkeypatch):
    ex = copy_example(tmp_path, capsys)
    monkeypatch.delenv("FORKPATCH_FORK_REPO", raising=False)
    clone = _shallow_clone(ex.fork.path, tmp_path / "tip.git", "--depth=1", "--branch=v1.3.0")
    run = Runner(ex.project, capsys)
    for command in (["status"], ["apply"], ["check", "--onto", "v1.3.0"]):
        code, _, err = run("--fork-repo", str(clone), *command, expect=None)
        assert code == 1, err
        assert "shallow" in err and "--unshallow" in err and str(clone) in err, err
        assert ex.fork.rev("v1.2.1^{commit}") in err


# --------------------------------------------------------------------------- read-only fork


def _fingerprint(root: Path) -> dict[str, tuple[int, str]]:
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            p = Path(dirpath, f)
            out[str(p.relative_to(root))] = (
                p.stat().st_mode,
                hashlib.sha256(p.read_bytes()).hexdigest(),
            )
    return out


def _make_read_only(root: Path) -> None:
    for dirpath, dirs, files in os.walk(root):
        for name in [*files, *dirs]:
            p = Path(dirpath, name)
            p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    root.chmod(root.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def _make_writable(root: Path) -> None:
    root.chmod(root.stat().st_mode | stat.S_IWUSR)
    for dirpath, dirs, files in os.walk(root):
        for name in [*files, *dirs]:
            p = Path(dirpath, name)
            p.chmod(p.stat().st_mode | stat.S_IWUSR)


@pytest.mark.parametrize("bare", [True, False])
def test_read_only_fork_is_never_written(tmp_path, capsys, monkeypatch, bare):
    """What CI has: shared/ copied without write bits (and as root, so the test also
    compares every byte: root could write anyway)."""
    ex = copy_example(tmp_path, capsys, with_project=False)
    monkeypatch.delenv("FORKPATCH_FORK_REPO", raising=False)
    fork = tmp_path / ("ro.git" if bare else "ro")
    git(tmp_path, "clone", "-q", *(["--bare"] if bare else []), str(ex.fork.path), str(fork))
    _make_read_only(fork)
    try:
        before = _fingerprint(fork)
        ex.run("--fork-repo", str(fork), "init", "--fork-url", REMOTE, "--base", "v1.2.1")
        run = Runner(ex.project, capsys)
        pre = ["--fork-repo", str(fork)]
        run(*pre, "import", *map(str, ex.incoming))
        run(*pre, "apply", "--sparse")
        run(*pre, "edit", "odd-width-padding")
        target = ex.wt / "vllm" / "model_executor" / "layers" / "quantization" / "online" / "fp8.py"
        target.write_text(target.read_text() + "# note\n")
        run(*pre, "refresh")
        run(*pre, "check", "--onto", "v1.3.0")
        run(*pre, "rebase", "--onto", "v1.3.0")
        assert _fingerprint(fork) == before
    finally:
        _make_writable(fork)
