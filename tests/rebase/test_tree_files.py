"""The engine's lazily read tree (``TreeFiles``, ``TreeState``) against git's listing.

A state reads a directory at a time; what it answers must be what the whole listing
(``git ls-tree -r``, the oracle) says: every file found with its mode and blob, every
other path absent, and a symlink on a path's way found whatever its case, in the tree
or among the state's own changes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from forkpatch.engine import TreeFiles, TreeState
from forkpatch.git import Git
from support.git import ScratchRepo, ls_tree


def _repo(tmp_path: Path) -> tuple[Git, str]:
    repo = ScratchRepo(tmp_path / "r")
    repo.add_file("top.txt", "t\n")
    repo.add_file("a/b/c.py", "c\n")
    repo.add_file("a/b/d/e.py", "e\n", mode=0o755)
    repo.add_file("a/Mixed/f.txt", "f\n")
    repo.add_file("real/inside.txt", "i\n")
    repo.add_file("deep/x/y/z/w.txt", "w\n")
    os.symlink("real", repo.path / "Link")
    os.symlink("../real", repo.path / "a/b/ln")
    os.symlink("nowhere", repo.path / "deep/x/dangling")
    commit = repo.commit("tree")
    return Git(repo.path / ".git"), commit


def _oracle_link(files: dict[str, tuple[str, object]], path: str) -> str | None:
    """The first leading directory of ``path`` that is a link, from the whole listing."""
    links = {p.casefold(): p for p, (mode, _o) in files.items() if mode == "120000"}
    parts = path.split("/")
    for i in range(1, len(parts)):
        found = links.get("/".join(parts[:i]).casefold())
        if found is not None:
            return found
    return None


ASKED = [
    "top.txt",
    "a/b/c.py",
    "a/b/d/e.py",
    "a/mixed/f.txt",
    "a/Mixed/f.txt",
    "A/b/c.py",
    "a/b",
    "a",
    "a/b/c.py/x",
    "missing",
    "a/missing/x.py",
    "Link/inside.txt",
    "link/inside.txt",
    "LINK/new/deeper.txt",
    "a/b/ln/inside.txt",
    "A/B/LN/x",
    "a/b/LN",
    "deep/x/dangling/y",
    "deep/X/Dangling/y",
    "deep/x/y/z/w.txt",
    "real/inside.txt",
]


def test_lookups_and_links_are_the_whole_listings(tmp_path):
    git, commit = _repo(tmp_path)
    listing = ls_tree(git.git_dir, commit)
    assert git.ls_tree(commit) == listing
    files = TreeFiles(git, commit)
    with git.reader() as reader:
        state = TreeState(git, reader, commit, files=files)
        for path in [*ASKED, *listing]:
            assert files.get(path) == listing.get(path), path
            assert state.has(path) == (path in listing), path
            assert state.symlink_prefix(path) == _oracle_link(listing, path), path


@pytest.mark.parametrize(
    "edits",
    [
        {"Link": None},  # the link deleted: nothing goes through it now
        {"Link": None, "link/inside.txt": ("100644", b"now a directory\n")},
        {"new/ln": ("120000", b"../real")},  # a link the changes add
        {"a/b/ln": ("100644", b"a file now\n")},
        {"a/b": None, "a/b/c.py": None, "A/B": ("120000", b"real")},
        {"deep/x/y/z/w.txt": None, "deep/x/y": ("120000", b"z")},
    ],
    ids=["deleted", "replaced-by-dir", "added", "link-made-file", "case-variant", "deep"],
)
def test_a_states_own_changes_count_as_the_listing_would(tmp_path, edits):
    git, commit = _repo(tmp_path)
    listing: dict[str, tuple[str, object]] = dict(ls_tree(git.git_dir, commit))
    with git.reader() as reader:
        state = TreeState(git, reader, commit)
        copy = state.copy()
        for path, change in edits.items():
            if change is None:
                copy.delete(path)
                listing.pop(path, None)
            else:
                copy.set(path, change[0], change[1])
                listing[path] = (change[0], None)
        for path in [*ASKED, *edits, "new/ln/x", "A/B/c", "deep/x/y/q"]:
            assert copy.has(path) == (path in listing), path
            assert copy.symlink_prefix(path) == _oracle_link(listing, path), path
        # The copy's changes are its own: the state it was made from is the tree's.
        for path in edits:
            assert state.entry(path) == TreeFiles(git, commit).get(path), path
        for path, change in edits.items():
            if change is not None:
                assert copy.get(path) == (change[0], change[1]), path
