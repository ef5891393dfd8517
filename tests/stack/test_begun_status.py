"""A `git status` begun ahead (`Git.begin`, `StackModel.begin_status`): it answers as
the plain one would, a failure is the plain call's failure, one not asked for is
ended (never left running), and anything the command writes drops it."""

from __future__ import annotations

import pytest

from forkpatch.errors import GitError
from forkpatch.git import Git
from forkpatch.project import Project
from forkpatch.stack import worktree
from forkpatch.stack.model import StackModel
from support.git import ScratchRepo
from support.projects import copy_example


@pytest.fixture
def repo(tmp_path):
    r = ScratchRepo(tmp_path / "r")
    r.add_file("a.py", "a = 1\n")
    r.add_file("b/c.py", "c = 1\n")
    r.commit("base")
    return r


def _git(repo: ScratchRepo) -> Git:
    return Git(repo.path / ".git", work_tree=repo.path)


@pytest.mark.parametrize(
    "edit",
    [
        lambda r: None,
        lambda r: r.add_file("a.py", "a = 2\n"),
        lambda r: r.add_file("new.txt", "new\n"),
        lambda r: r.remove_file("b/c.py"),
    ],
    ids=["clean", "modified", "untracked", "deleted"],
)
def test_a_begun_status_answers_as_the_plain_one(repo, edit):
    edit(repo)
    wt = _git(repo)
    begun = worktree.begin_status(wt)
    assert worktree.status(wt, begun) == worktree.status(wt)


def test_a_begun_command_that_fails_fails_as_run_does(repo):
    wt = _git(repo)
    begun = wt.begin("rev-parse", "--verify", "no-such-ref")
    with pytest.raises(GitError) as got:
        begun.result()
    assert "rev-parse --verify no-such-ref" in got.value.message


def test_a_begun_status_not_asked_for_is_ended(repo):
    wt = _git(repo)
    begun = worktree.begin_status(wt)
    begun.drop()
    assert begun.proc.returncode is not None


def test_the_model_drops_a_begun_status_when_the_tree_is_written(tmp_path, capsys, monkeypatch):
    ex = copy_example(tmp_path, capsys)
    ex.run("apply")
    begun = []
    real = worktree.begin_status
    monkeypatch.setattr(worktree, "begin_status", lambda wt: begun.append(real(wt)) or begun[-1])
    model = StackModel(Project(ex.project))
    wt = model.wt()
    model.begin_status(wt)
    (ex.wt / "mine.txt").write_text("written after the status began\n")
    model.forget()  # what every write of the tree does first
    assert len(begun) == 1 and begun[0].proc.returncode is not None
    assert [c.path for c in model.changes(wt)] == ["mine.txt"]  # asked again
    model.begin_status(wt)  # asked already: nothing begun
    assert len(begun) == 1


def _many_commits(repo: ScratchRepo, n: int) -> list[str]:
    commits = []
    for i in range(n):
        repo.add_file(f"f{i % 7}.txt", "".join(f"line {i} {k}\n" for k in range(300)))
        commits.append(repo.commit(f"c{i}"))
    return commits


def test_a_begun_command_with_input_answers_as_run_does_however_large(repo):
    """Its input is fed, and its output read, beside the caller: an answer far larger
    than a pipe holds never waits on the caller (which reads nothing until it asks)."""
    commits = _many_commits(repo, 40)
    wt = _git(repo)
    stdin = ("\n".join(commits) + "\n").encode()
    begun = wt.begin("diff-tree", "--stdin", "-p", input=stdin)
    plain = wt.run("diff-tree", "--stdin", "-p", input=stdin)
    assert len(plain.stdout) > 4 * 65536  # well past what a pipe holds
    got = begun.result()
    assert begun.done()
    assert got.stdout == plain.stdout and got.returncode == 0


def test_a_begun_command_with_input_that_fails_fails_as_run_does(repo):
    wt = _git(repo)
    begun = wt.begin("hash-object", "--stdin", "-t", "no-such-type", input=b"x\n")
    with pytest.raises(GitError) as got:
        begun.result()
    assert "hash-object --stdin -t no-such-type" in got.value.message


def test_a_begun_command_with_input_not_asked_for_is_ended(repo):
    commits = _many_commits(repo, 20)
    wt = _git(repo)
    begun = wt.begin("diff-tree", "--stdin", "-p", input=("\n".join(commits) + "\n").encode())
    begun.drop()
    assert begun.done() and begun.proc.returncode is not None
