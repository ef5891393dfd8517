"""Diffs made by hand with ``diff -u`` (not git's a/ b/ convention) are kept byte for
byte when they apply exactly, whatever their header style, with their description.

Each diff is GNU ``diff -u`` run by hand in the layout a person uses: both names on
one side (``a/x.orig`` and ``a/x``), timestamps, ``-U1`` hunks without function
context; ``git apply`` of the same file is the reference tree.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from support.cli import Runner
from support.git import ScratchRepo, git, tree_files
from support.projects import load, mtimes, snapshot

TEXT = "".join(f"line {i}\n" for i in range(1, 21))
# Blank lines in a row, leading spaces, a blank line before the diff: all kept.
DESCRIPTION = "  Fix the counter, by hand.\n\nWhy it was wrong.\n\n\nWhat changed.\n\n\n"


def _fork(tmp_path) -> ScratchRepo:
    fork = ScratchRepo(tmp_path / "fork")
    fork.add_file("sub/n.txt", TEXT)
    fork.add_file("top.txt", TEXT)
    fork.commit("base")
    fork.tag("v1")
    return fork


def _diff(cwd, *argv: str) -> bytes:
    proc = subprocess.run(["diff", *argv], cwd=cwd, capture_output=True)
    assert proc.returncode == 1, proc.stderr
    return proc.stdout


def _hand_made(tmp_path, style: str) -> bytes:
    """``diff`` of sub/n.txt (line 5 changed) the way a person runs it in ``style``."""
    work = tmp_path / "by-hand"
    shutil.rmtree(work, ignore_errors=True)
    for side in ("a", "b"):
        (work / side / "sub").mkdir(parents=True)
        (work / side / "sub/n.txt").write_text(TEXT)
    new = TEXT.replace("line 5\n", "line five\n")
    if style in ("a-side", "b-side"):  # cp x x.orig; edit x; diff -u x.orig x, from above
        side = style[0]
        (work / side / "sub/n.txt.orig").write_text(TEXT)
        (work / side / "sub/n.txt").write_text(new)
        return _diff(work, "-u", f"{side}/sub/n.txt.orig", f"{side}/sub/n.txt")
    if style == "same-name":  # the same name on both headers, -U1: no function context
        (work / "b/sub/n.txt").write_text(new)
        out = _diff(work, "-U1", "a/sub/n.txt", "b/sub/n.txt")
        return out.replace(b"+++ b/sub/n.txt", b"+++ a/sub/n.txt", 1)
    assert style == "p0-orig"  # diff -u sub/n.txt.orig sub/n.txt in the tree itself
    (work / "a/sub/n.txt.orig").write_text(TEXT)
    (work / "a/sub/n.txt").write_text(new)
    return _diff(work / "a", "-u", "sub/n.txt.orig", "sub/n.txt")


STYLES = ["a-side", "b-side", "same-name", "p0-orig"]


@pytest.mark.parametrize("style", STYLES)
def test_a_hand_made_diff_is_kept_byte_for_byte(tmp_path, capsys, style):
    fork = _fork(tmp_path)
    data = DESCRIPTION.encode() + _hand_made(tmp_path, style)
    patch = tmp_path / "fix-counter.diff"
    patch.write_bytes(data)
    project = tmp_path / "project"
    project.mkdir()
    run = Runner(project, capsys)
    run("init", "--fork-url", str(fork.path), "--base", "v1")
    run("import", str(patch))
    assert (project / "patches/fix-counter.diff").read_bytes() == data
    assert load(project).get("fix-counter").summary == "Fix the counter, by hand."
    run("apply")
    wt = project / ".forkpatch/worktree"
    ref = tmp_path / "ref"
    git(tmp_path, "clone", "-q", "-b", "v1", str(fork.path), str(ref))
    subprocess.run(
        ["git", "-C", str(ref), "apply", "-p1" if style != "p0-orig" else "-p0", str(patch)],
        check=True,
    )
    assert tree_files(wt) == tree_files(ref)
    body = git(wt, "log", "-1", "--format=%B")
    assert "Why it was wrong.\n\n\nWhat changed." in body
    before, m1 = snapshot(project), mtimes(project)
    run("export")
    assert snapshot(project) == before and mtimes(project) == m1


@pytest.mark.parametrize("style", ["a-side", "b-side", "same-name"])
def test_in_a_quilt_series_it_is_kept_too(tmp_path, capsys, style):
    """quilt reads them at -p1 as git apply does: no reason to rewrite them."""
    fork = _fork(tmp_path)
    quilt = tmp_path / "quilt"
    quilt.mkdir()
    data = DESCRIPTION.encode() + _hand_made(tmp_path, style)
    (quilt / "fix.diff").write_bytes(data)
    (quilt / "series").write_text("fix.diff\n")
    project = tmp_path / "project"
    project.mkdir()
    run = Runner(project, capsys)
    run("init", "--fork-url", str(fork.path), "--base", "v1")
    _, _, err = run("import", "--quilt", str(quilt))
    assert "git's form" not in err
    assert (project / "patches/fix.diff").read_bytes() == data


def test_a_p1_file_stored_in_git_form_keeps_its_description_bytes(tmp_path, capsys):
    """quilt -p1 names with one top directory (pkg/x.orig, pkg/x) read otherwise
    without the level: the diff goes to git's form, the text above it stays."""
    fork = _fork(tmp_path)
    quilt = tmp_path / "quilt"
    (quilt / "pkg/sub").mkdir(parents=True)
    (quilt / "pkg/sub/n.txt.orig").write_text(TEXT)
    (quilt / "pkg/sub/n.txt").write_text(TEXT.replace("line 5\n", "line five\n"))
    diff = _diff(quilt, "-u", "pkg/sub/n.txt.orig", "pkg/sub/n.txt")
    shutil.rmtree(quilt / "pkg")
    (quilt / "fix.diff").write_bytes(DESCRIPTION.encode() + diff)
    (quilt / "series").write_text("fix.diff\n")
    project = tmp_path / "project"
    project.mkdir()
    run = Runner(project, capsys)
    run("init", "--fork-url", str(fork.path), "--base", "v1")
    _, _, err = run("import", "--quilt", str(quilt))
    assert "fix.diff is a -p1 patch; stored in git's form" in err
    stored = (project / "patches/fix.diff").read_bytes()
    assert stored.startswith(DESCRIPTION.encode() + b"diff --git a/sub/n.txt b/sub/n.txt\n")
    run("apply")
    assert "line five\n" in (project / ".forkpatch/worktree/sub/n.txt").read_text()
    before = snapshot(project)
    run("export")
    assert snapshot(project) == before
