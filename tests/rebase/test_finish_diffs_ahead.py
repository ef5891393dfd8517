"""The step that ends a rebase reads the diffs of the commits made before its stop
from a git process begun with the step (beside the recording of the work tree).

The patch files it writes are checked against git: each one touches its own file,
and the rewritten series ``git apply --index``ed on the new base gives the rebase's
tree. The begun process reads exactly the commits before the stop; the finish asks
git for the others only.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import forkpatch.git
from forkpatch.engine import BegunDiffs, diffs_and_stats_of_commits
from forkpatch.errors import GitError
from support.git import GitCalls, ScratchRepo, git, numbered, replace_once
from support.projects import load, own_file_series

N = 8
STOP = 4  # the patch upstream's change stops
LINES = numbered(40)
HEADER = "# header\n"  # upstream's, on every file: every patch file is rewritten


def _stops_at(scenario, stop: int = STOP):
    files, patches = own_file_series(N, LINES)

    def upstream(fork) -> None:
        for i in range(N):
            fork.add_file(f"m{i:02d}.py", HEADER + LINES)
        name = f"m{stop:02d}.py"
        fork.add_file(name, HEADER + replace_once(LINES, "line 20\n", "line 20 upstream\n"))
        fork.add_file("other.py", "upstream\n")
        fork.commit("upstream fix")
        fork.tag("v2")

    s = scenario(files, patches, upstream)
    s.run("apply")
    return s


def _resolve(s, stop: int = STOP) -> None:
    path = s.project / ".forkpatch" / "rebase-worktree" / f"m{stop:02d}.py"
    assert "<<<<<<<" in path.read_text()
    path.write_text(HEADER + replace_once(LINES, "line 20\n", "line 20 both\n"))


def _spy(monkeypatch) -> list[tuple[tuple[str, ...], bytes | None]]:
    begun: list[tuple[tuple[str, ...], bytes | None]] = []
    real = forkpatch.git.Git.begin

    def begin(self, *args, input=None):
        begun.append((args, input))
        return real(self, *args, input=input)

    monkeypatch.setattr(forkpatch.git.Git, "begin", begin)
    return begun


def _check_against_git(s, tmp_path: Path) -> None:
    series = load(s.project)
    for entry in series.patches:
        text = (s.project / "patches" / entry.file).read_text()
        touched = {ln.split()[-1] for ln in text.splitlines() if ln.startswith("diff --git ")}
        assert touched == {f"b/m{entry.name[1:]}.py"}, (entry.name, touched)
    clone = tmp_path / "oracle"
    git(tmp_path, "clone", "-q", str(s.fork.path), str(clone))
    git(clone, "checkout", "-q", "v2")
    for entry in series.patches:
        git(clone, "apply", "--index", str(s.project / "patches" / entry.file))
    wt = s.project / ".forkpatch" / "worktree"
    assert git(wt, "rev-parse", "HEAD^{tree}") == git(clone, "write-tree")


@pytest.mark.parametrize("how", ["--continue", "--skip"])
def test_the_last_step_reads_the_diffs_before_its_stop_from_a_begun_git(
    scenario, tmp_path, monkeypatch, how
):
    s = _stops_at(scenario)
    s.run("rebase", "--onto", "v2", expect=3)
    if how == "--continue":
        _resolve(s)
    state = (s.project / ".forkpatch" / "rebase" / "state.json").read_text()
    begun = _spy(monkeypatch)
    calls = GitCalls(tmp_path / "calls")
    monkeypatch.setenv("PATH", calls.path)
    s.run("rebase", how)
    monkeypatch.undo()
    diffs = [(args, data) for args, data in begun if args[:2] == ("diff-tree", "--stdin")]
    assert len(diffs) == 1, begun
    commits = (diffs[0][1] or b"").decode().split()
    assert len(commits) == STOP and all(c in state for c in commits), commits
    # One more diff-tree for the patches after the stop (and the resolved one): the
    # begun one's commits are not read again.
    assert sum(1 for c in calls.take() if " diff-tree --stdin " in f" {c} ") == 2
    _check_against_git(s, tmp_path)
    assert len(load(s.project).patches) == (N if how == "--continue" else N - 1)


def test_a_stop_at_the_first_patch_begins_no_diff(scenario, tmp_path, monkeypatch):
    """No commit before the stop: nothing to begin, the finish reads them all."""
    s = _stops_at(scenario, stop=0)
    s.run("rebase", "--onto", "v2", expect=3)
    _resolve(s, stop=0)
    begun = _spy(monkeypatch)
    s.run("rebase", "--continue")
    monkeypatch.undo()
    assert not [a for a, _ in begun if a[:2] == ("diff-tree", "--stdin")], begun


def _commits(tmp_path: Path, n: int) -> tuple[ScratchRepo, list[str]]:
    repo = ScratchRepo(tmp_path / "repo")
    repo.add_file("base.txt", "base\n")
    repo.commit("base")
    out = []
    for i in range(n):
        repo.add_file(f"f{i}.txt", f"file {i}\n" * (i + 1))
        out.append(repo.commit(f"c{i}"))
    return repo, out


def test_begun_diffs_equal_the_plain_ones(tmp_path):
    repo, commits = _commits(tmp_path, 5)
    store = forkpatch.git.Git(repo.path / ".git")
    plain = diffs_and_stats_of_commits(store, commits)
    for ahead_of in ([], commits[:2], commits, commits[3:]):
        ahead = BegunDiffs(store, ahead_of)
        assert diffs_and_stats_of_commits(store, commits, ahead=ahead) == plain
        ahead.drop()  # read already: nothing to end
    assert set(plain) == set(commits)
    assert all(f"f{i}.txt" in plain[c][0].decode() for i, c in enumerate(commits))


def test_a_begun_diff_answers_as_the_plain_run(tmp_path):
    """A commit git does not know (it skips the line) and a repository that is not one
    (it fails: run again the plain way, which raises)."""
    repo, commits = _commits(tmp_path, 2)
    store = forkpatch.git.Git(repo.path / ".git")
    asked = [commits[0], "0" * 40]
    plain = diffs_and_stats_of_commits(store, asked)
    assert diffs_and_stats_of_commits(store, asked, ahead=BegunDiffs(store, asked)) == plain
    assert plain["0" * 40] == (b"", "")
    gone = forkpatch.git.Git(tmp_path / "not-a-repo" / ".git")
    with pytest.raises(GitError) as plain_error:
        diffs_and_stats_of_commits(gone, commits)
    with pytest.raises(GitError) as begun_error:
        diffs_and_stats_of_commits(gone, commits, ahead=BegunDiffs(gone, commits))
    assert begun_error.value.message == plain_error.value.message


def test_a_begun_diff_not_read_is_ended(tmp_path, monkeypatch):
    repo, commits = _commits(tmp_path, 3)
    store = forkpatch.git.Git(repo.path / ".git")
    begun = _spy(monkeypatch)
    procs = []
    real = forkpatch.git.Begun.__init__

    def init(self, *args, **kw):
        real(self, *args, **kw)
        procs.append(self.proc)

    monkeypatch.setattr(forkpatch.git.Begun, "__init__", init)
    ahead = BegunDiffs(store, commits)
    assert len(begun) == len(procs) == 1
    ahead.drop()
    assert procs[0].poll() is not None
