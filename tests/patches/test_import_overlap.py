"""A patch made against the base that overlaps the series: what import says and offers.

The patches are made by ``git format-patch`` and ``diff -u`` on a checkout of the
base, so each applies to the base alone but not on top of the patch below it.
"""

from __future__ import annotations

import subprocess

import pytest

from support.cli import Runner
from support.git import ScratchRepo, git
from support.projects import load, snapshot

LINES = "".join(f"line {i}\n" for i in range(1, 31))


@pytest.fixture
def setup(tmp_path, capsys):
    fork = ScratchRepo(tmp_path / "fork")
    fork.add_file("src/n.txt", LINES)
    fork.add_file("other.txt", "other\n")
    fork.commit("base")
    fork.tag("v1")
    co = tmp_path / "co"
    git(tmp_path, "clone", "-q", "--branch", "v1", str(fork.path), str(co))
    project = tmp_path / "project"
    project.mkdir()
    run = Runner(project, capsys)
    run("init", "--fork-url", str(fork.path), "--base", "v1")
    return tmp_path, co, project, run


def _format_patch(co, name: str, old: str, new: str, out) -> object:
    """A format-patch mail of one edit of src/n.txt made on the base (then undone)."""
    path = co / "src/n.txt"
    path.write_text(path.read_text().replace(old, new, 1))
    git(co, "commit", "-q", "-am", name)
    data = subprocess.run(
        ["git", "-C", str(co), "format-patch", "-1", "--stdout"], capture_output=True, check=True
    ).stdout
    git(co, "reset", "-q", "--hard", "HEAD^")
    target = out / f"{name}.patch"
    target.write_bytes(data)
    return target


def test_an_overlapping_patch_is_refused_with_a_true_tip_and_merges_on_request(setup):
    tmp, co, project, run = setup
    first = _format_patch(co, "first", "line 10\n", "line ten\n", tmp)
    # Next to the first one's line: the context differs, a 3-way merge resolves it.
    near = _format_patch(co, "near", "line 12\n", "line twelve\n", tmp)
    run("import", str(first))
    before = snapshot(project)
    _, _, err = run("import", str(near), expect=3)
    assert "nothing was imported" in err
    assert "right base" not in err  # it is made against the right base
    assert "it applies to v1 alone; 'first' below it change its files" in err and "--merge" in err
    assert snapshot(project) == before
    run("import", "--merge", str(near))
    assert load(project).names() == ["first", "near"]
    run("apply")
    text = (project / ".forkpatch/worktree/src/n.txt").read_text()
    assert "line ten\n" in text and "line twelve\n" in text
    # Stored with the hunk it has on top of the series (its mail headers kept).
    stored = (project / "patches/near.patch").read_text()
    assert stored.startswith(near.read_text().split("\n---\n")[0])


def test_a_conflicting_patch_is_imported_for_push_merge(setup):
    tmp, co, project, run = setup
    first = _format_patch(co, "first", "line 10\n", "line ten\n", tmp)
    same = _format_patch(co, "same", "line 10\n", "line TEN\n", tmp)
    run("import", str(first))
    _, _, err = run("import", "--merge", str(same), expect=3)
    assert "imported same -> patches/same.patch" in err and "push --merge" in err
    # As it is: it applies to v1, and `git apply` there still takes it.
    assert (project / "patches/same.patch").read_bytes() == same.read_bytes()
    assert load(project).names() == ["first", "same"]
    # No work tree yet: apply stops below it, push --merge brings it in with markers.
    run("apply", expect=3)
    _, _, err = run("push", "--merge", expect=3)
    assert "conflict markers" in err
    wt = project / ".forkpatch/worktree"
    text = (wt / "src/n.txt").read_text()
    assert "<<<<<<<" in text and "line ten\n" in text and "line TEN\n" in text
    resolved = LINES.replace("line 10\n", "line TEN\n")
    (wt / "src/n.txt").write_text(resolved)
    run("refresh")
    run("apply", "--force")
    assert (wt / "src/n.txt").read_text() == resolved


def test_merge_refusals_are_named(setup):
    tmp, co, project, run = setup
    first = _format_patch(co, "first", "line 10\n", "line ten\n", tmp)
    run("import", str(first))
    # Made against another tree: it does not apply to the base either.
    stray = tmp / "stray.diff"
    stray.write_text("--- a/src/n.txt\n+++ b/src/n.txt\n@@ -1,2 +1,2 @@\n-nope\n+yes\n line 2\n")
    before = snapshot(project)
    for args in (["import", str(stray)], ["import", "--merge", str(stray)]):
        _, _, err = run(*args, expect=3)
        assert "does not apply to v1 alone either" in err and "--merge" not in err
    second = _format_patch(co, "second", "line 20\n", "line 20!\n", tmp)
    _, _, err = run("import", "--merge", str(stray), str(second), expect=2)
    assert "--merge imports a single patch" in err
    assert snapshot(project) == before
    # Imported below a patch it breaks (second's context holds line 19).
    nineteen = _format_patch(co, "nineteen", "line 19\n", "line 19 (x)\n", tmp)
    run("import", str(second))
    _, _, err = run("import", "--after", "first", str(nineteen), expect=3)
    assert "patch 'second' does not apply" in err
    assert "import them above it (`--after second`, or at the end)" in err
    _, _, err = run("import", str(nineteen), expect=3)
    assert "'first', 'second' below it change its files" in err
    run("import", "--merge", str(nineteen), expect=3)  # next to line 20: markers
    assert load(project).names() == ["first", "second", "nineteen"]
