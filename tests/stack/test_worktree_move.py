"""A clean work tree moved in process (``worktree.move``) ends as ``git reset --hard``
leaves it: the same files, modes, links and directories, an index git finds clean,
HEAD's branch at the target; where git must do it (an attributes file on the way, a
directory where a file goes), nothing is written and git is left to it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from forkpatch.git import Git
from forkpatch.stack import worktree
from forkpatch.stackstate import Layout
from support.git import ScratchRepo, git, index_entries, tree_state, twin_worktree


def _repo(tmp_path: Path) -> tuple[ScratchRepo, str, str]:
    repo = ScratchRepo(tmp_path / "store-src")
    repo.add_file("keep.txt", "k\n")
    repo.add_file("mod.py", "one\n")
    repo.add_file("gone/only.txt", "bye\n")
    repo.add_file("x/run.sh", "#!/bin/sh\n", mode=0o755)
    repo.add_file("ä.txt", "u\n")
    old = repo.commit("old")
    repo.add_file("mod.py", "two\n")
    repo.remove_file("gone/only.txt")
    repo.add_file("new/deep/made.sh", "#!/bin/sh\necho\n", mode=0o755)
    (repo.path / "x/run.sh").chmod(0o644)
    os.symlink("keep.txt", repo.path / "ln")
    repo.add_file("ä.txt", "v\n")
    new = repo.commit("new")
    repo.git("branch", "stack", old)
    return repo, old, new


def _worktree(repo: ScratchRepo, tmp_path: Path, name: str) -> Git:
    return worktree.open_worktree(twin_worktree(repo, tmp_path, name))


def _files(path: Path) -> dict[str, tuple[str, bytes]]:
    return {k: v for k, v in tree_state(path).items() if k != ".git"}


def test_a_move_in_process_is_git_reset_hard(tmp_path):
    repo, old, new = _repo(tmp_path)
    store = Git(repo.path / ".git")
    ours, theirs = _worktree(repo, tmp_path, "ours"), _worktree(repo, tmp_path, "theirs")
    assert worktree.move(ours, store, new, Layout()) is True
    git(theirs.work_tree, "reset", "-q", "--hard", new)
    assert ours.work_tree and theirs.work_tree
    assert _files(ours.work_tree) == _files(theirs.work_tree)
    assert not (ours.work_tree / "gone").exists()  # left empty: removed, as git does
    assert git(ours.work_tree, "status", "--porcelain", "--untracked-files=all") == ""
    assert index_entries(ours.work_tree) == index_entries(theirs.work_tree)
    assert git(ours.work_tree, "rev-parse", "HEAD") == new
    assert git(ours.work_tree, "symbolic-ref", "HEAD") == "refs/heads/ours-b"
    # And back again.
    assert worktree.move(ours, store, old, Layout()) is True
    git(theirs.work_tree, "reset", "-q", "--hard", old)
    assert _files(ours.work_tree) == _files(theirs.work_tree)
    assert git(ours.work_tree, "status", "--porcelain", "--untracked-files=all") == ""


@pytest.mark.parametrize("case", ["attributes in the tree", "attributes on disk", "dir in the way"])
def test_what_git_must_do_is_left_to_git_and_nothing_is_written(tmp_path, case):
    repo, _old, new = _repo(tmp_path)
    store = Git(repo.path / ".git")
    wt = _worktree(repo, tmp_path, "ours")
    assert wt.work_tree is not None
    if case == "attributes in the tree":
        git(repo.path, "checkout", "-q", "main")
        repo.add_file("new/.gitattributes", "*.sh text eol=crlf\n")
        new = repo.commit("attributes")
    elif case == "attributes on disk":
        (wt.work_tree / ".gitattributes").write_text("* text\n")
    else:
        (wt.work_tree / "ln").mkdir()
    before = tree_state(wt.work_tree)
    head = git(wt.work_tree, "rev-parse", "HEAD")
    assert worktree.move(wt, store, new, Layout()) is False
    assert tree_state(wt.work_tree) == before
    assert git(wt.work_tree, "rev-parse", "HEAD") == head
    shutil.rmtree(tmp_path / "ours")
