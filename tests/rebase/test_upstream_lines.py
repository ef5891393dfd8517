"""The changed lines of an upstream commit, counted straight from git's diff.

The search for a patch's change made upstream under another id compares added and
removed lines. An upstream commit's are counted in one pass over the diff git printed
(``lines_of_git_diff``), not by parsing it as a patch; the parse
(``lines_of_patch(parse_patch(...))``) is the oracle, on commits made to have every
kind of section git writes, under a global git configuration that changes how git
prints diffs, and on the real fork's history.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from forkpatch.git import DIFF_OPTIONS, Git
from forkpatch.patchfile import parse_patch
from forkpatch.rebase.upstream import lines_of_git_diff, lines_of_patch
from support import realfork
from support.git import ScratchRepo, numbered


def _nonempty(lines: dict) -> dict:
    return {path: n for path, n in lines.items() if n}


def _diffs(git: Git, revs: list[str]) -> list[tuple[str, bytes]]:
    out = []
    for rev in revs:
        raw = git.run("diff-tree", *DIFF_OPTIONS, "--root", "--no-commit-id", rev).stdout
        out.append((rev, raw))
    return out


def _assert_same(diffs: list[tuple[str, bytes]]) -> int:
    counted = 0
    for rev, raw in diffs:
        parsed = _nonempty(lines_of_patch(parse_patch(raw, source=rev)))
        assert _nonempty(lines_of_git_diff(raw)) == parsed, rev
        counted += sum(sum(n.values()) for n in parsed.values())
    return counted


@pytest.fixture
def hostile_home(tmp_path, monkeypatch):
    """A global git configuration that would change every diff git prints for forkpatch
    if forkpatch let it: no prefixes, other prefixes, colour, other context, renames off."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(
        "[diff]\n\tnoprefix = true\n\tmnemonicPrefix = true\n\trenames = false\n"
        "\tcontext = 9\n\tsrcPrefix = x/\n\tdstPrefix = y/\n"
        "[color]\n\tui = always\n\tdiff = always\n[core]\n\tquotePath = false\n"
    )
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    return home


def test_every_kind_of_section_counts_as_the_parse_does(tmp_path: Path, hostile_home) -> None:
    r = ScratchRepo(tmp_path / "r")
    r.add_file("a.py", numbered(40))
    r.add_file("gone.c", numbered(6, "gone"))
    r.add_file("moved.txt", numbered(30, "moved"))
    r.add_file("dir with space/f.txt", numbered(5))
    r.add_file("ünï/çødé.py", numbered(5))
    r.add_file("tab\there.txt", numbered(3))
    (r.path / "bin.dat").write_bytes(bytes(range(256)) * 4)
    revs = [r.commit("base")]
    # Changes in two places, lines that look like headers, blank and space-only lines.
    text = numbered(40).replace("line 3\n", "--- a/x\n+++ b/y\n").replace("line 30\n", "\n   \n")
    r.add_file("a.py", text + "@@ -1 +1 @@\n")
    revs.append(r.commit("headers in hunks"))
    r.remove_file("gone.c")
    r.add_file("new/made.py", numbered(4, "made"))
    revs.append(r.commit("created and deleted"))
    r.git("mv", "moved.txt", "renamed.txt")
    (r.path / "renamed.txt").write_text(numbered(30, "moved").replace("moved 9", "changed 9"))
    revs.append(r.commit("renamed with a change"))
    r.add_file("dir with space/f.txt", numbered(5).replace("line 1", "LINE 1"))
    r.add_file("ünï/çødé.py", numbered(5).replace("line 2", "LÏNE 2"))
    r.add_file("tab\there.txt", "no newline at the end")
    revs.append(r.commit("names git quotes or ends with a tab"))
    (r.path / "bin.dat").write_bytes(bytes(range(255, -1, -1)) * 4)
    (r.path / "a.py").chmod(0o755)
    revs.append(r.commit("binary and a mode change"))
    (r.path / "renamed.txt").write_bytes(b"crlf 1\r\ncrlf 2\r\n")
    revs.append(r.commit("CRLF lines"))
    git = Git(r.path / ".git")
    assert _assert_same(_diffs(git, revs)) > 60


def test_the_real_forks_commits_count_as_the_parse_does(hostile_home) -> None:
    fork = realfork.fork_or_skip()
    realfork.tags_or_skip("v1.2.1", "v1.2.2")
    git = Git(Path(realfork.git_dir(fork)))
    revs = git.out("rev-list", "--no-merges", "--max-count=80", "v1.2.1..v1.2.2").split()
    assert revs
    assert _assert_same(_diffs(git, revs)) > 0
