"""Where git's own rebase applies a commit, forkpatch applies it, to the same tree.

A pull request made on v1 is carried as ``git format-patch`` mails; v2 changed the
tree under it. Each case runs the real ``git rebase`` and ``git am -3`` on the
same commits (:mod:`support.gittools`) and holds forkpatch's verdicts equal to
git rebase's, commit for commit, and its tree at the end equal to git's:

* files the commit creates that v2 has already, byte for byte and with the same
  mode (a vendored directory that upstream took first); a different content or
  mode is git's add/add conflict, and forkpatch's conflict too;
* a file the commit deletes that v2 deleted too;
* a file v2 moved among more files than ``diff.renameLimit`` lets ``git diff -M``
  pair, which git's merges still follow (by the file's name, or by its content);
* binary members among them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.git import ScratchRepo, git
from support.gittools import compare
from support.projects import LINES

KERNEL = "".join(f"__global__ void k{i}() {{ /* {i} */ }}\n" for i in range(40))
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4


def _fork(tmp_path: Path) -> ScratchRepo:
    fork = ScratchRepo(tmp_path / "fork")
    fork.add_file("a.py", LINES)
    fork.add_file("b.py", LINES)
    fork.add_file("old.txt", "to be removed\n")
    fork.commit("initial")
    fork.tag("v1")
    return fork


def _pr(fork: ScratchRepo, commits) -> str:
    """A branch ``pr`` on v1 with ``commits`` ([(message, {path: text or None}, modes)])."""
    fork.git("checkout", "-q", "-b", "pr", "v1")
    for message, files, *modes in commits:
        for path, text in files.items():
            if text is None:
                fork.remove_file(path)
            else:
                fork.add_file(path, text, mode=(modes[0].get(path) if modes else None))
        fork.commit(message)
    head = fork.git("rev-parse", "HEAD")
    fork.git("checkout", "-q", "main")
    return head


def _upstream(fork: ScratchRepo, files, message="upstream", modes=None) -> None:
    for path, text in files.items():
        if text is None:
            fork.remove_file(path)
        else:
            fork.add_file(path, text, mode=(modes or {}).get(path))
    fork.commit(message)


def _same(tmp_path, fork, head, onto="v2"):
    got = compare(fork.path, "v1", head, onto, tmp_path / "cmp")
    assert got.forkpatch.verdicts == got.rebase.verdicts, (got.rebase, got.am, got.check)
    assert got.forkpatch.tree == got.rebase.tree
    return got


VENDORED = {
    "vendor/ext/AUTHORS": "the authors\n",
    "vendor/ext/kernel/k.cu": KERNEL,
    "vendor/ext/setup.py": "from setuptools import setup\nsetup()\n",
    "vendor/ext/logo.png": PNG,
}


def test_a_vendored_tree_upstream_took_first_applies_as_in_git(tmp_path):
    """Upstream vendored the same files; the commit adds one more and changes a.py:
    both git tools apply it, so does forkpatch (the files already there merge), and
    its patch file is rewritten so that it applies exactly to v2."""
    fork = _fork(tmp_path)
    head = _pr(
        fork,
        [
            ("edit b", {"b.py": LINES.replace("line 3\n", "line 3 pr\n")}),
            (
                "vendor ext",
                {
                    **VENDORED,
                    "vendor/ext/.gitignore": "build/\n",
                    "a.py": LINES.replace("line 9\n", "line 9 pr\n"),
                },
            ),
        ],
    )
    _upstream(fork, VENDORED, "vendor ext upstream")
    fork.tag("v2")
    got = _same(tmp_path, fork, head)
    assert got.rebase.verdicts == got.am.verdicts == ("applied", "applied")
    vendor = got.check["patches"][1]
    assert vendor["status"] == "merged"
    assert any("vendor/ext/kernel/k.cu: merged" in d for d in vendor["detail"])
    text = (tmp_path / "cmp" / "project" / "patches" / "0002.patch").read_text()
    assert "vendor/ext/.gitignore" in text and "vendor/ext/AUTHORS" not in text


def test_every_file_already_there_is_dropped_as_git_drops_it(tmp_path):
    fork = _fork(tmp_path)
    head = _pr(fork, [("vendor ext", dict(VENDORED))])
    _upstream(fork, {**VENDORED, "a.py": LINES.replace("line 1\n", "line 1 up\n")})
    fork.tag("v2")
    got = _same(tmp_path, fork, head)
    assert got.rebase.verdicts == got.am.verdicts == ("dropped",)
    assert "content already present" in got.check["patches"][0]["evidence"]


@pytest.mark.parametrize(
    "theirs",
    [
        pytest.param({"vendor/ext/setup.py": "from setuptools import setup\n"}, id="content"),
        pytest.param({"vendor/ext/logo.png": PNG + b"\0"}, id="binary content"),
    ],
)
def test_a_created_file_upstream_has_otherwise_conflicts_as_in_git(tmp_path, theirs):
    fork = _fork(tmp_path)
    head = _pr(fork, [("vendor ext", dict(VENDORED))])
    _upstream(fork, {**VENDORED, **theirs})
    fork.tag("v2")
    got = _same(tmp_path, fork, head)
    assert got.rebase.verdicts == got.am.verdicts == ("conflict",)
    (path,) = theirs
    assert f"{path} already exists" in got.check["patches"][0]["conflicts"][0]["reason"]


def test_the_same_file_with_another_mode_conflicts_as_in_git(tmp_path):
    fork = _fork(tmp_path)
    head = _pr(fork, [("add tool", {"tool.sh": "#!/bin/sh\necho hi\n"}, {"tool.sh": 0o755})])
    _upstream(fork, {"tool.sh": "#!/bin/sh\necho hi\n"}, modes={"tool.sh": 0o644})
    fork.tag("v2")
    got = _same(tmp_path, fork, head)
    assert got.rebase.verdicts == got.am.verdicts == ("conflict",)


def test_a_file_deleted_on_both_sides_applies_as_in_git(tmp_path):
    fork = _fork(tmp_path)
    head = _pr(
        fork, [("drop old", {"old.txt": None, "a.py": LINES.replace("line 4\n", "line 4 pr\n")})]
    )
    _upstream(fork, {"old.txt": None, "b.py": LINES.replace("line 30\n", "line 30 up\n")})
    fork.tag("v2")
    got = _same(tmp_path, fork, head)
    assert got.rebase.verdicts == got.am.verdicts == ("applied",)


def _many_modules(fork: ScratchRepo, n: int = 1100) -> None:
    """``n`` small modules (v2 moves each into another directory under another name
    with its own edit: more inexact renames than ``diff.renameLimit``, 1,000, lets
    ``git diff`` pair)."""
    for i in range(n):
        fork.add_file(f"lib/m{i:04d}.py", "".join(f"m{i}_{j} = {j}\n" for j in range(12)))


@pytest.mark.parametrize("new_name", ["src/lib/k.cu", "src/lib/kernel_v2.cu"], ids=str)
def test_a_file_moved_past_the_rename_limit_is_followed_as_in_git(tmp_path, new_name):
    """git's merges look for the files the commit changes only, so they follow the
    moved file where ``git diff -M`` over the whole tree gave up (too many files, its
    name not unique); so does forkpatch, to the same tree."""
    fork = ScratchRepo(tmp_path / "fork")
    _many_modules(fork)
    fork.add_file("lib/k.cu", KERNEL)
    fork.commit("initial")
    fork.tag("v1")
    head = _pr(fork, [("tune k", {"lib/k.cu": KERNEL.replace("/* 7 */", "/* 7 tuned */")})])
    for i in range(1100):
        old = fork.path / "lib" / f"m{i:04d}.py"
        fork.add_file(f"src/lib/mod_{i:04d}.py", old.read_text() + f"moved_{i} = True\n")
        old.unlink()
    fork.remove_file("lib/k.cu")
    fork.add_file(new_name, KERNEL.replace("/* 30 */", "/* 30 up */"))
    # Another k.cu: git diff pairs files by their name only where it is unique.
    fork.add_file("third_party/k.cu", "__global__ void other() {}\n")
    fork.commit("move lib under src")
    fork.tag("v2")
    listed = git(fork.path, "diff-tree", "-r", "-M", "--name-status", "v1", "v2").split("\n")
    assert "D\tlib/k.cu" in listed  # git diff -M gave up on it
    got = _same(tmp_path, fork, head)
    assert got.rebase.verdicts == got.am.verdicts == ("applied",)
    outcome = got.check["patches"][0]
    assert outcome.get("moved") == {"lib/k.cu": new_name}, json.dumps(outcome)
