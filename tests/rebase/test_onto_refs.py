"""`check` and `rebase` take any ref of the fork, and a fork clone without tags still
works from the commit series.yaml records.

A CI checkout (`actions/checkout`, `git clone --no-tags`) has no tags; a developer
tries a series on `main` or `origin/main` before a release is tagged; a reviewer
names a commit. Each must work and say what the name resolved to.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

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


@pytest.fixture
def fork(example_project, example_fork) -> Path:
    return example_fork.path


@pytest.mark.parametrize(
    ("make_ref", "kind"),
    [
        (lambda fork: ("next", _git(fork, "branch", "-f", "next", "v1.3.0")), "branch"),
        (lambda fork: ("refs/heads/next", _git(fork, "branch", "-f", "next", "v1.3.0")), "branch"),
        (
            lambda fork: (
                "up/next",
                _git(fork, "update-ref", "refs/remotes/up/next", "v1.3.0^{commit}"),
            ),
            "remote branch",
        ),
        (lambda fork: (_git(fork, "rev-parse", "--short=10", "v1.3.0^{commit}"), None), "commit"),
        (lambda fork: (_git(fork, "rev-parse", "v1.3.0^{commit}"), None), "commit"),
    ],
    ids=["branch", "full-ref", "remote-branch", "short-commit", "full-commit"],
)
def test_check_takes_any_ref_and_names_what_it_resolved(example_project, fork, make_ref, kind):
    _project, run = example_project
    ref, _ = make_ref(fork)
    target = _git(fork, "rev-parse", "v1.3.0^{commit}")
    _, out, err = run("check", "--onto", ref, "--json", expect=0)
    plan = json.loads(out)
    assert plan["onto_commit"] == target
    assert kind in plan["onto_resolved"] and target[:12] in plan["onto_resolved"]
    assert f"--onto {ref}: " in err
    # Same verdicts as on the tag that names the same commit.
    _, tag_out, _ = run("check", "--onto", "v1.3.0", "--json", expect=0)
    verdicts = [(p["name"], p["status"]) for p in json.loads(tag_out)["patches"]]
    assert [(p["name"], p["status"]) for p in plan["patches"]] == verdicts
    assert "onto_resolved" not in json.loads(tag_out)


def test_rebase_onto_a_branch_records_its_commit_and_later_commands_use_it(example_project, fork):
    project, run = example_project
    _git(fork, "branch", "-f", "next", "v1.3.0")
    target = _git(fork, "rev-parse", "v1.3.0^{commit}")
    _, out, _ = run("rebase", "--onto", "next")
    assert out.startswith(f"rebased onto next ({target[:12]}): ")
    series = load_series(project / "series.yaml")
    # The branch's head is tagged v1.3.0: the tag is what the series is on.
    assert (series.base.tag, series.base.commit, series.base.branch) == ("v1.3.0", target, "next")
    # The branch moves on; the series stays on the commit it was rebased onto.
    later = _git(fork, "commit-tree", "-m", "later", "-p", target, f"{target}^{{tree}}")
    _git(fork, "update-ref", "refs/heads/next", later)
    _, _, err = run("status")
    assert "warning" not in err and "next" not in err


def test_rebase_onto_a_commit_names_it_in_full(example_project, fork):
    project, run = example_project
    target = _git(fork, "rev-parse", "v1.3.0^{commit}")
    run("rebase", "--onto", target[:9])
    series = load_series(project / "series.yaml")
    # The commit is tag v1.3.0: that is recorded, not the commit id as a "tag".
    assert series.base == type(series.base)("v1.3.0", target)
    _, _, err = run("status")
    assert "no tag" not in err and "warning" not in err


@pytest.mark.parametrize("name", ["v1.3.1", "nxet", "deadbeef99"])
def test_an_unknown_ref_lists_the_nearest_tags_and_branches(example_project, fork, name):
    _project, run = example_project
    _git(fork, "branch", "-f", "next", "v1.3.0")
    _, _, err = run("check", "--onto", name, expect=1)
    assert f"'{name}' is not a tag, branch or commit of the fork" in err
    assert "nearest tags: v1.3.0" in err or "nearest tags: v1.2" in err
    if name == "nxet":
        assert "branches: next" in err


@pytest.mark.parametrize("name", ["-v", "--all", "v1 .3", "a\x1bb"])
def test_a_name_that_is_not_a_ref_is_a_usage_error(example_project, name):
    _project, run = example_project
    _, _, err = run("check", "--onto", name, expect=2)
    assert "is not a ref name" in err


# --------------------------------------------------------------------------- no tags


def _tagless_copy(fork: Path, dest: Path) -> Path:
    """A clone of the fork as `git clone --no-tags` (or a CI checkout) leaves it."""
    subprocess.run(
        ["git", "clone", "-q", "--no-tags", str(fork), str(dest)],
        check=True,
        env={**GIT_ENV, "PATH": "/usr/bin:/bin"},
    )
    assert _git(dest, "tag") == ""
    return dest


@pytest.mark.parametrize("bare", [False, True], ids=["clone", "bare-clone"])
def test_a_fork_clone_without_tags_uses_the_recorded_commit(example_project, fork, tmp_path, bare):
    project, run = example_project
    clone = _tagless_copy(fork, tmp_path / "tagless")
    if bare:
        shutil.move(clone / ".git", tmp_path / "tagless.git")
        shutil.rmtree(clone)
        clone = tmp_path / "tagless.git"
        _git(clone, "config", "core.bare", "true")
    _, out, err = run("--fork-repo", str(clone), "status")
    assert "capability-floor" in out + err
    recorded = load_series(project / "series.yaml").base.commit
    assert err.count("has no tag 'v1.2.1'") == 1
    assert recorded[:12] in err
    assert f"git -C {clone} fetch --tags" in err
    run("--fork-repo", str(clone), "apply")
    # A target tag the clone lacks: the tip says how to bring tags, not ls-remote.
    _, _, err = run("--fork-repo", str(clone), "check", "--onto", "v1.3.0", expect=1)
    assert "'v1.3.0' is not a tag, branch or commit" in err
    assert f"`git -C {clone} fetch --tags`" in err and "ls-remote" not in err
    # ... and its commit works.
    run("--fork-repo", str(clone), "check", "--onto", _git(fork, "rev-parse", "v1.3.0^{commit}"))


def test_a_tagless_clone_of_another_fork_is_still_refused(example_project, tmp_path):
    _project, run = example_project
    other = tmp_path / "other"
    other.mkdir()
    _git(other, "init", "-q")
    (other / "f").write_text("x\n")
    _git(other, "add", "f")
    _git(other, "commit", "-qm", "other")
    _, _, err = run("--fork-repo", str(other), "status", expect=1)
    assert "does not contain series.yaml's base" in err
