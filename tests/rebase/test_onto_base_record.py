"""What series.yaml records after a rebase onto a branch or a commit, and that every
later command works on it.

A rebase target may be a tag, a branch or a commit id. series.yaml's ``base:`` records
what it resolved to: the tag that names the commit where one does, else no tag at all
(a commit id is no tag), and the branch it came from, for the record. ``build-wheel``
counts a commit no tag names from the nearest release tag below it, as setuptools-scm
does (``1.3.1.dev2+g<commit>``); ``track`` takes the releases past that one as newer.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from forkpatch.example import build_release_wheel
from forkpatch.series import load_series
from support.git import GIT_ENV


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args],
        check=True,
        capture_output=True,
        text=True,
        env={**GIT_ENV, "PATH": "/usr/bin:/bin"},
    ).stdout.strip()


def _later(fork: Path, parent: str, n: int) -> str:
    """``n`` commits on top of ``parent`` (same tree), the last one's id."""
    commit = _git(fork, "rev-parse", f"{parent}^{{commit}}")
    for i in range(n):
        commit = _git(fork, "commit-tree", "-m", f"later {i}", "-p", commit, f"{commit}^{{tree}}")
    return commit


# Each case: how to name the target in the fork -> (the --onto name, its commit), and
# what series.yaml must record: (tag, branch, the fork version build-wheel counts).
Case = Callable[[Path], tuple[str, str]]


def _branch_at_tag(fork: Path) -> tuple[str, str]:
    _git(fork, "branch", "-f", "next", "v1.3.0")
    return "next", _git(fork, "rev-parse", "v1.3.0^{commit}")


def _commit_of_tag(fork: Path) -> tuple[str, str]:
    commit = _git(fork, "rev-parse", "v1.3.0^{commit}")
    return commit[:10], commit


def _branch_past_tag(fork: Path) -> tuple[str, str]:
    head = _later(fork, "v1.3.0", 1)
    _git(fork, "branch", "-f", "next", head)
    return "next", head


def _commit_past_tag(fork: Path) -> tuple[str, str]:
    head = _later(fork, "v1.3.0", 2)
    return head, head


def _remote_branch_between_tags(fork: Path) -> tuple[str, str]:
    # The commit below v1.3.0 (the fork's CLI fix): 1 commit past v1.2.1.
    head = _git(fork, "rev-parse", "v1.3.0^")
    _git(fork, "update-ref", "refs/remotes/up/next", head)
    return "up/next", head


CASES = {
    "branch-at-tag": (_branch_at_tag, "v1.3.0", "next", "1.3.0"),
    "commit-of-tag": (_commit_of_tag, "v1.3.0", "", "1.3.0"),
    "branch-past-tag": (_branch_past_tag, "", "next", "1.3.1.dev1+g{c}"),
    "commit-past-tag": (_commit_past_tag, "", "", "1.3.1.dev2+g{c}"),
    "remote-branch-between-tags": (_remote_branch_between_tags, "", "up/next", "1.2.2.dev1+g{c}"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_rebase_records_what_the_target_resolved_to_and_later_commands_work(
    example_project, example_fork, tmp_path, case
):
    project, run = example_project
    fork = example_fork.path
    make, tag, branch, version = CASES[case]
    onto, commit = make(fork)
    version = version.format(c=commit[:12])
    _, _, err = run("rebase", "--onto", onto)
    if onto != "v1.3.0":
        assert "tagged v1.3.0" in err if tag else "which no tag names" in err
    text = (project / "series.yaml").read_text(encoding="utf-8")
    base = load_series(project / "series.yaml").base
    assert (base.tag, base.commit, base.branch) == (tag, commit, branch)
    # A commit id is never written as a tag.
    assert f"tag: {commit}" not in text and f"tag: {onto}\n" not in text.replace("v1.3.0", "")
    assert ("  tag: " in text) == bool(tag)

    # status: nothing to warn about, no word of tags.
    _, _, err = run("status")
    assert "warning" not in err and "fetch --tags" not in err

    # build-wheel: the version counts from the nearest release tag below the commit.
    wheel = build_release_wheel(fork, commit, tmp_path / "release", version=version)
    _, out, err = run(
        "build-wheel", "--mode", "overlay", "--base-wheel", str(wheel), "--json", expect=0
    )
    built = json.loads(out)
    assert built["version"].startswith(f"{version}.fp." if "+" in version else f"{version}+fp.")
    assert built["provenance"]["commit"] == commit and built["provenance"]["tag"] == tag
    run("verify", built["wheels"][0])
    # ... and a wheel of another version of the fork is refused, naming both.
    other = build_release_wheel(fork, "v1.2.1", tmp_path / "other")
    _, _, err = run("build-wheel", "--mode", "overlay", "--base-wheel", str(other), expect=1)
    assert f"is the fork's 1.2.1, but the series being built is on the fork's {version}" in err

    # track: releases past the one the base counts from are newer; no "set track.pattern".
    newer = version.startswith("1.2.2")
    _code, out, err = run("track", "--json", "--no-forecast", expect=10 if newer else 0)
    report = json.loads(out)
    assert [t["tag"] for t in report["newer"]] == (["v1.3.0"] if newer else [])
    assert "track.pattern" not in err

    # check and the next rebase start from it.
    run("check", "--onto", "v1.3.0")
    run("rebase", "--onto", "v1.3.0")
    after = load_series(project / "series.yaml").base
    assert (after.tag, after.branch) == ("v1.3.0", "")


@pytest.mark.parametrize("legacy", ["commit-id", "branch-name"])
def test_a_series_an_older_forkpatch_wrote_with_a_ref_under_tag_still_works(
    example_project, example_fork, tmp_path, legacy
):
    """Older forkpatch wrote the branch or the commit id under ``tag:``."""
    project, run = example_project
    fork = example_fork.path
    head = _later(fork, "v1.3.0", 1)
    _git(fork, "branch", "-f", "next", head)
    run("rebase", "--onto", "next")
    path = project / "series.yaml"
    text = path.read_text(encoding="utf-8")
    name = head if legacy == "commit-id" else "next"
    path.write_text(
        text.replace("base:\n", f"base:\n  tag: {name}\n").replace("  branch: next\n", "")
    )
    base = load_series(path).base
    assert base.tag == ("" if legacy == "commit-id" else "next")
    _, _, err = run("status")
    assert "warning" not in err and "fetch --tags" not in err
    version = f"1.3.1.dev1+g{head[:12]}"
    wheel = build_release_wheel(fork, head, tmp_path / "release", version=version)
    _, out, _ = run("build-wheel", "--mode", "overlay", "--base-wheel", str(wheel), "--json")
    assert json.loads(out)["version"].startswith(f"{version}.fp.")
    _, _, err = run("track", "--no-forecast", expect=0)
    assert "set track.pattern" not in err


def test_a_teammates_clone_with_the_branch_only_as_a_remote_branch_is_not_told_of_tags(
    example_project, example_fork, tmp_path
):
    """A series an older forkpatch rebased onto `next` (``tag: next``), read through a
    clone that has the branch as ``origin/next`` only: a branch, not a missing tag."""
    project, run = example_project
    fork = example_fork.path
    head = _later(fork, "v1.3.0", 1)
    _git(fork, "branch", "-f", "next", head)
    run("rebase", "--onto", "next")
    path = project / "series.yaml"
    text = path.read_text(encoding="utf-8").replace("  branch: next\n", "")
    path.write_text(text.replace("base:\n", "base:\n  tag: next\n"))
    clone = tmp_path / "teammate"
    subprocess.run(
        ["git", "clone", "-q", "--no-tags", str(fork), str(clone)],
        check=True,
        env={**GIT_ENV, "PATH": "/usr/bin:/bin"},
    )
    assert "origin/next" in _git(clone, "branch", "-r") and "next" not in _git(clone, "branch")
    _, _, err = run("--fork-repo", str(clone), "status")
    assert "'next' is a branch of the fork" in err
    assert "no tag" not in err and "fetch --tags" not in err
