"""The step that ends a rebase moves the editing work tree while it writes patches/.

Where git moves the tree (more paths than the in-process move takes), its
``reset --hard`` is begun before the patch files are rendered and written, and waited
for before the journal goes. The tree it leaves is checked against git itself: the
rewritten patch files applied with ``git apply --index`` on the new base give the same
tree. Killed while the move runs beside the writes, the rebase is still finished by
``--continue`` and undone by ``--abort`` (the stack back where it was).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from forkpatch.stack.worktree import MOVE_IN_PROCESS_PATHS
from support.git import GitCalls, git, numbered, replace_once
from support.procs import killed_at
from support.projects import load, own_file_series, snapshot

N = MOVE_IN_PROCESS_PATHS + 6  # files the new base changes: git's reset moves them
LINES = numbered(40)
HEADER = "# header\n"


def _stops_once(scenario):
    """N patches, each changing line 20 of its own file; upstream v2 puts a header on
    every file and changes the line of the first patch (its one stop)."""
    files, patches = own_file_series(N, LINES)

    def upstream(fork) -> None:
        for i in range(N):
            fork.add_file(f"m{i:02d}.py", HEADER + LINES)
        fork.add_file("m00.py", HEADER + replace_once(LINES, "line 20\n", "line 20 upstream\n"))
        fork.commit("upstream headers and a fix")
        fork.tag("v2")

    s = scenario(files, patches, upstream)
    s.run("apply")
    return s


def _resolve(s) -> None:
    path = s.project / ".forkpatch" / "rebase-worktree" / "m00.py"
    assert "<<<<<<<" in path.read_text()
    path.write_text(HEADER + replace_once(LINES, "line 20\n", "line 20 both\n"))


def _oracle_tree(s, tmp_path: Path) -> str:
    """git's tree of the rewritten series: v2 with each patch file `git apply --index`ed."""
    clone = tmp_path / "oracle"
    git(tmp_path, "clone", "-q", str(s.fork.path), str(clone))
    git(clone, "checkout", "-q", "v2")
    for entry in load(s.project).patches:
        git(clone, "apply", "--index", str(s.project / "patches" / entry.file))
    return git(clone, "write-tree")


def _wait_for_index_lock(wt: Path) -> None:
    """A git that forkpatch began goes on to its end when forkpatch is killed: wait
    for it as a person's next command would find it done."""
    admin = Path(git(wt, "rev-parse", "--absolute-git-dir"))
    deadline = time.monotonic() + 30
    while (admin / "index.lock").exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def _spy_begun(monkeypatch) -> list[tuple[str, ...]]:
    """The arguments of every git command begun ahead (Git.begin) from now on."""
    import forkpatch.git

    begun: list[tuple[str, ...]] = []
    real = forkpatch.git.Git.begin

    def begin(self, *args, **kw):
        begun.append(args)
        return real(self, *args, **kw)

    monkeypatch.setattr(forkpatch.git.Git, "begin", begin)
    return begun


def _editing_tree(s) -> Path:
    return s.project / ".forkpatch" / "worktree"


@pytest.mark.parametrize("how", ["--continue", "--skip"])
def test_the_last_step_moves_the_editing_tree_with_gits_reset_begun_ahead(
    scenario, tmp_path, monkeypatch, how
):
    s = _stops_once(scenario)
    wt = _editing_tree(s)
    s.run("rebase", "--onto", "v2", expect=3)
    if how == "--continue":
        _resolve(s)
    calls = GitCalls(tmp_path / "calls")
    monkeypatch.setenv("PATH", calls.path)
    begun = _spy_begun(monkeypatch)
    s.run("rebase", how)
    monkeypatch.undo()
    resets = [c for c in calls.take() if " reset " in f" {c} " and str(wt) in c]
    assert len(resets) == 1 and "--hard" in resets[0], resets
    assert [a[:3] for a in begun if a[0] == "reset"] == [("reset", "-q", "--hard")], begun
    assert git(wt, "status", "--porcelain", "--untracked-files=all") == ""
    assert git(wt, "rev-parse", "HEAD^{tree}") == _oracle_tree(s, tmp_path)
    assert load(s.project).base.tag == "v2"
    text = (wt / "m00.py").read_text()
    assert ("line 20 both" in text) == (how == "--continue")
    assert all((wt / f"m{i:02d}.py").read_text().startswith(HEADER) for i in range(N))
    _, out, _ = s.run("status")
    assert "p29" in out


def test_a_rebase_with_no_stop_moves_the_editing_tree_the_same_way(scenario, tmp_path, monkeypatch):
    """The first call ends the rebase: the same begun move, the same tree as git's."""
    s = _stops_once(scenario)
    wt = _editing_tree(s)
    s.run("delete", "p00")  # the patch that would stop it
    calls = GitCalls(tmp_path / "calls")
    monkeypatch.setenv("PATH", calls.path)
    begun = _spy_begun(monkeypatch)
    s.run("rebase", "--onto", "v2")
    monkeypatch.undo()
    resets = [c for c in calls.take() if " reset " in f" {c} " and str(wt) in c]
    assert len(resets) == 1, resets
    assert any(a[0] == "reset" for a in begun), begun
    assert git(wt, "status", "--porcelain", "--untracked-files=all") == ""
    assert git(wt, "rev-parse", "HEAD^{tree}") == _oracle_tree(s, tmp_path)


@pytest.mark.parametrize("point", ["files", "report"])
@pytest.mark.parametrize("how", ["--continue", "--abort"])
def test_a_finish_killed_while_the_tree_moves_is_recovered(scenario, tmp_path, point, how):
    s = _stops_once(scenario)
    wt = _editing_tree(s)
    head = git(wt, "rev-parse", "HEAD")
    before = snapshot(s.project)
    s.run("rebase", "--onto", "v2", expect=3)
    _resolve(s)
    killed_at(s.project, point, "rebase", "--continue")
    _wait_for_index_lock(wt)
    s.run("rebase", how)
    assert not (s.project / ".forkpatch" / "rebase").exists()
    assert git(wt, "status", "--porcelain", "--untracked-files=all") == ""
    if how == "--abort":
        assert snapshot(s.project) == before
        assert git(wt, "rev-parse", "HEAD") == head
        assert load(s.project).base.tag == "v1"
    else:
        assert load(s.project).base.tag == "v2"
        assert git(wt, "rev-parse", "HEAD^{tree}") == _oracle_tree(s, tmp_path)
