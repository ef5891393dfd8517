"""The work tree's changes staged in process (``worktree.stage``) give the tree and the
index ``git add -A -f -- PATHS`` and ``git write-tree`` give, on a twin work tree with
the same edits: files changed, gone, new in new directories, an exec bit set and
dropped, a link made, a file become a link, a non-ASCII name, an ignored file named.
Where git must do it (something staged already, an attributes file, a directory, a
repository inside, a file mode git does not trust, a sparse tree, a large file),
nothing is staged."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from forkpatch.git import Git
from forkpatch.stack import worktree
from forkpatch.stackstate import Layout
from support.git import ScratchRepo, git, index_entries, twin_worktree


def _repo(tmp_path: Path) -> ScratchRepo:
    repo = ScratchRepo(tmp_path / "store-src")
    repo.add_file("keep.txt", "k\n")
    repo.add_file("mod.py", "one\n")
    repo.add_file("gone/only.txt", "bye\n")
    repo.add_file("x/run.sh", "#!/bin/sh\n", mode=0o755)
    repo.add_file("x/plain.sh", "#!/bin/sh\n")
    repo.add_file("ä.txt", "u\n")
    repo.add_file("becomes-link", "was a file\n")
    repo.add_file(".gitignore", "*.log\n")
    repo.commit("base")
    repo.git("branch", "stack")
    return repo


def _worktree(repo: ScratchRepo, tmp_path: Path, name: str) -> Git:
    return worktree.open_worktree(twin_worktree(repo, tmp_path, name))


def _edit(root: Path) -> list[str]:
    """The same edits in a work tree; the paths a refresh names (status's, and an
    ignored file forkpatch wrote itself)."""
    (root / "mod.py").write_text("two\n")
    (root / "gone/only.txt").unlink()
    (root / "gone").rmdir()
    (root / "new/deep").mkdir(parents=True)
    (root / "new/deep/made.sh").write_text("#!/bin/sh\necho\n")
    (root / "new/deep/made.sh").chmod(0o755)
    (root / "x/run.sh").chmod(0o644)
    (root / "x/plain.sh").chmod(0o755)
    os.symlink("keep.txt", root / "ln")
    (root / "becomes-link").unlink()
    os.symlink("mod.py", root / "becomes-link")
    (root / "ä.txt").write_text("v\n")
    (root / "wrote.log").write_text("forkpatch's own, ignored\n")
    return [c.path for c in worktree.status(worktree.open_worktree(root))] + ["wrote.log"]


def test_staging_in_process_is_git_add_and_write_tree(tmp_path):
    repo = _repo(tmp_path)
    store = Git(repo.path / ".git")
    ours, theirs = _worktree(repo, tmp_path, "ours"), _worktree(repo, tmp_path, "theirs")
    assert ours.work_tree and theirs.work_tree
    paths = _edit(ours.work_tree)
    assert _edit(theirs.work_tree) == paths
    assert {"mod.py", "gone/only.txt", "new/deep/made.sh", "ln", "becomes-link"} <= set(paths)
    tree = worktree.stage(ours, store, paths, worktree.status(ours), Layout())
    git(theirs.work_tree, "add", "-A", "-f", "--", *paths)
    want = git(theirs.work_tree, "write-tree")
    assert tree == want
    assert index_entries(ours.work_tree) == index_entries(theirs.work_tree)
    assert git(ours.work_tree, "write-tree") == want  # the index is the tree
    assert git(ours.work_tree, "diff", "--name-only") == ""  # and the files are it
    assert git(repo.path, "fsck", "--no-dangling", "--connectivity-only") == ""


def _nothing_staged(wt: Git, store: Git, paths: list[str], layout: Layout) -> None:
    assert wt.work_tree is not None
    index = index_entries(wt.work_tree)
    assert worktree.stage(wt, store, paths, worktree.status(wt), layout) is None
    assert index_entries(wt.work_tree) == index


@pytest.mark.parametrize(
    "case",
    [
        "staged already",
        "attributes on disk",
        "attributes in the tree",
        "info attributes",
        "a directory where a file was",
        "a repository inside",
        "file modes not trusted",
        "sparse",
        "a link on the way",
        "a large file",
    ],
)
def test_what_git_must_stage_is_left_to_git(tmp_path, case):
    repo = _repo(tmp_path)
    store = Git(repo.path / ".git")
    wt = _worktree(repo, tmp_path, "ours")
    root = wt.work_tree
    assert root is not None
    (root / "mod.py").write_text("two\n")
    paths = ["mod.py"]
    layout = Layout()
    if case == "staged already":
        (root / "keep.txt").write_text("staged\n")
        git(root, "add", "keep.txt")
        paths.append("keep.txt")
    elif case == "attributes on disk":
        (root / ".gitattributes").write_text("*.py text eol=crlf\n")
    elif case == "attributes in the tree":
        (root / "x/.gitattributes").write_text("* -text\n")
        git(root, "add", "x/.gitattributes")
        git(root, "commit", "-q", "-m", "attributes")
        (root / "x/run.sh").write_text("changed\n")
        paths = ["x/run.sh"]
    elif case == "info attributes":
        (store.git_dir / "info").mkdir(exist_ok=True)
        (store.git_dir / "info" / "attributes").write_text("*.py filter=x\n")
    elif case == "a directory where a file was":
        (root / "keep.txt").unlink()
        (root / "keep.txt").mkdir()
        (root / "keep.txt" / "inside").write_text("i\n")
        paths += ["keep.txt", "keep.txt/inside"]
    elif case == "a repository inside":
        git(root, "init", "-q", "inner")
        (root / "inner" / "f").write_text("f\n")
        paths = [c.path for c in worktree.status(wt)]
        assert "inner/" in paths
    elif case == "file modes not trusted":
        git(root, "config", "core.fileMode", "false")
    elif case == "sparse":
        layout = Layout(dirs=("x",))
    elif case == "a large file":
        with (root / "mod.py").open("wb") as fh:
            fh.truncate(worktree.STAGE_IN_PROCESS_BYTES + 1)
    else:
        (root / "real").mkdir()
        (root / "real" / "f").write_text("f\n")
        (root / "through").symlink_to("real")
        paths = ["through/f"]
    _nothing_staged(wt, store, paths, layout)
