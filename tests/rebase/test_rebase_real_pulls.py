"""The fork's own pull-request branches, rebased by forkpatch and by git, verdict for
verdict.

Each hop takes a pull request's commits (from where it left its line of history) to
a release tag: ``git rebase`` (each stop skipped), ``git am -3`` and forkpatch
(``check``, then ``rebase`` with ``--skip`` at each stop) run on the same commits
(:mod:`support.gittools`). forkpatch's verdict must be git rebase's for every
commit, and its tree at the end git rebase's.

The hops include the two where forkpatch once stopped and both git tools applied:
PR 58's "vendor SM70 CUDA extension source" onto v0.0.3 (files v0.0.3 already has,
byte for byte) and PR 25's kernel-registry commit onto v1.2.2 and v1.3.0 (a file
moved among too many others for ``git diff -M``).

The pull-request refs are not in the CI fixture: these run with FORKPATCH_FORK_REPO
set to a full clone of 1Cat-vLLM that has them (``git fetch origin
'+refs/pull/*/head:refs/pull/*/head'``; a snapshot with missing blobs repaired by
``shared/tools/repair-fork-snapshot``). Each hop takes about a minute.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from support import realfork
from support.gittools import compare, scratch_view

pytestmark = [pytest.mark.real_fork, pytest.mark.slow]

#: (pull request, the tag whose history the request left from, target tag).
HOPS = [
    (58, "v0.0.3", "v0.0.3"),
    (25, "v0.0.3", "v1.2.2"),
    (25, "v0.0.3", "v1.3.0"),
    (104, "v1.2.1", "v1.2.2"),
    (104, "v1.2.1", "v1.3.0"),
    (96, "v1.2.1", "v1.3.0"),
    (100, "v1.2.1", "v1.2.2"),
    (235, "v1.3.0", "v1.3.0"),
]


def _git(fork: str, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", fork, *args], capture_output=True, text=True, check=False
    ).stdout.strip()


@pytest.fixture(scope="module")
def fork_with_pulls() -> str:
    fork = realfork.fork_or_skip()
    if not _git(fork, "for-each-ref", "--count=1", "refs/pull/"):
        pytest.skip(
            f"{realfork.FORK_SOURCE} has no pull-request refs (refs/pull/*/head): set "
            "FORKPATCH_FORK_REPO to a clone of 1Cat-vLLM that has them (git fetch origin "
            "'+refs/pull/*/head:refs/pull/*/head')"
        )
    if _git(fork, "rev-parse", "--is-shallow-repository") == "true":
        pytest.skip(f"{realfork.FORK_SOURCE} is shallow: the pull requests' history is cut")
    return fork


@pytest.mark.parametrize(("pr", "left_from", "onto"), HOPS, ids=lambda v: str(v))
def test_a_pull_request_gets_git_rebases_verdicts(
    tmp_path: Path, fork_with_pulls, pr, left_from, onto
):
    fork = fork_with_pulls
    head = _git(fork, "rev-parse", "-q", "--verify", f"refs/pull/{pr}/head^{{commit}}")
    target = _git(fork, "rev-parse", "-q", "--verify", f"{onto}^{{commit}}")
    line = _git(fork, "rev-parse", "-q", "--verify", f"{left_from}^{{commit}}")
    if not (head and target and line):
        pytest.skip(f"the fork lacks refs/pull/{pr}/head, {onto} or {left_from}")
    base = _git(fork, "merge-base", head, line)
    view = scratch_view(
        Path(fork),
        tmp_path / "fork.git",
        {"refs/tags/pr-base": base, f"refs/tags/{onto}": target, "refs/heads/pr": head},
    )
    got = compare(view, "pr-base", head, onto, tmp_path / "cmp")
    names = [p["name"] for p in got.check["patches"]]
    assert got.differing() == [], [(names[i], *v) for i, *v in got.differing()]
    assert got.forkpatch.tree == got.rebase.tree
