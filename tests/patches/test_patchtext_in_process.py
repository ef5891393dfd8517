"""What a patch file's render reads in process, with git's CLI as the oracle.

A rebase keeps a file's diffstat block when the counts it shows still hold, and asks
git to write a new block only when they do not: :func:`diff_stat_counts` must say
exactly what git's ``--stat=72`` would, or nothing. The entries of the paths an old
diff touches are read from the trees, as ``git ls-tree`` lists them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from forkpatch.engine import canonical_diff
from forkpatch.git import Git
from forkpatch.patchtext import diff_stat_counts, stat_counts
from support.git import GitCalls, ScratchRepo, ls_tree


def _lines(n: int, tag: str = "line") -> str:
    return "".join(f"{tag} {i}\n" for i in range(n))


def _oracle(git: Git, a: str, b: str) -> tuple[object, object]:
    stat = git.run("diff-tree", "--stat=72", "--summary", "-M", "--no-color", a, b).stdout
    return diff_stat_counts(canonical_diff(git.diff_trees(a, b))), stat_counts(
        stat.decode("utf-8", "surrogateescape")
    )


# Each case: the files before, the files after (None: deleted), and whether the diff
# alone can say what git's stat says.
CASES: dict[str, tuple[dict[str, str], dict[str, str | None], bool]] = {
    "one change": ({"a.py": _lines(9)}, {"a.py": _lines(9).replace("line 4", "LINE 4")}, True),
    "insertions only": ({"a.py": _lines(3)}, {"a.py": _lines(3) + "more\n" * 4}, True),
    "one insertion": ({"a.py": _lines(3)}, {"a.py": _lines(3) + "more\n"}, True),
    "deletions only": ({"a.py": _lines(9)}, {"a.py": _lines(4)}, True),
    "one deletion": ({"a.py": _lines(9)}, {"a.py": _lines(8)}, True),
    "created and deleted": (
        {"gone.c": _lines(5)},
        {"gone.c": None, "new.c": _lines(7, "other")},
        True,
    ),
    "empty file created": ({"a": "x\n"}, {"e/empty": ""}, True),
    "lines like headers": (
        {"m.txt": "--- a\n+++ b\n" + _lines(5)},
        {"m.txt": "+++ b\n-- x\n" + _lines(5) + "--- c\n"},
        True,
    ),
    "many files, wide counts": (
        {f"d{i}/f.c": _lines(3) for i in range(12)},
        {f"d{i}/f.c": _lines(1500 * (i + 1), "new") for i in range(12)},
        True,
    ),
    "a 40-character name, large counts": (
        {"a" * 36 + ".txt": _lines(2)},
        {"a" * 36 + ".txt": _lines(4000, "x")},
        True,
    ),
    "a long name git shortens": (
        {"very/" * 12 + "deep.txt": _lines(2)},
        {"very/" * 12 + "deep.txt": _lines(90, "x")},
        False,
    ),
    "a rename": ({"old/name.c": _lines(30)}, {"old/name.c": None, "new/name.c": _lines(31)}, False),
    "a name git quotes": ({'say "hi".txt': "a\n"}, {'say "hi".txt': "b\n"}, False),
    "a name with a space": ({"two words.txt": "a\n"}, {"two words.txt": "b\nc\n"}, True),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_counts_from_the_diff_are_gits_or_none(tmp_path: Path, case: str) -> None:
    before, after, known = CASES[case]
    repo = ScratchRepo(tmp_path / "r")
    for path, text in before.items():
        repo.add_file(path, text)
    old = repo.commit("before")
    for path, text in after.items():
        if text is None:
            repo.remove_file(path)
        else:
            repo.add_file(path, text)
    new = repo.commit("after")
    ours, gits = _oracle(Git(repo.path / ".git"), old, new)
    if known:
        assert ours == gits
    else:
        assert ours is None


def test_a_binary_file_or_a_mode_change_alone(tmp_path: Path) -> None:
    """A binary file is git's to show; a mode change alone counts no line, as git's does."""
    repo = ScratchRepo(tmp_path / "r")
    repo.add_file("run.sh", "echo\n")
    repo.add_file("blob.bin", b"\0\1\2" * 50)
    old = repo.commit("old")
    (repo.path / "run.sh").chmod(0o755)
    mode = repo.commit("mode")
    repo.add_file("blob.bin", b"\0\3\2" * 60)
    binary = repo.commit("binary")
    git = Git(repo.path / ".git")
    ours, gits = _oracle(git, old, mode)
    assert ours == gits == ([("run.sh", "0")], [("1", "0", "")])
    assert _oracle(git, mode, binary)[0] is None
    assert diff_stat_counts(b"") is None


def test_a_trees_entries_for_paths_are_git_ls_trees(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The (mode, id) of named paths in a revision, read in process, as `git ls-tree -r
    --full-tree REV -- PATHS` lists them: nested files, an executable, a link, a
    submodule, odd names; a directory, a path under a file and a missing path are not
    there; a revision with no tree gives nothing."""
    from forkpatch.patchtext import PatchTexts

    repo = ScratchRepo(tmp_path / "r")
    repo.add_file("top.txt", "t\n")
    repo.add_file("a/b/c.py", "c\n")
    repo.add_file("a/run.sh", "echo\n", mode=0o755)
    repo.add_file("two words/x y.txt", "s\n")
    repo.add_file("caf\u00e9/n\u00e4me.txt", "u\n")
    (repo.path / "link").symlink_to("top.txt")
    first = repo.commit("first")
    repo.git("update-index", "--add", "--cacheinfo", f"160000,{first},sub")
    second = repo.commit("second")
    paths = {
        "top.txt",
        "a/b/c.py",
        "a/run.sh",
        "two words/x y.txt",
        "caf\u00e9/n\u00e4me.txt",
        "link",
        "sub",
        "a",
        "a/b",
        "top.txt/under",
        "missing.txt",
        "a/missing",
    }
    git = Git(repo.path / ".git")
    revs = (first, second, f"{second}^")
    want = {rev: {p: e for p, e in ls_tree(git.git_dir, rev).items() if p in paths} for rev in revs}
    calls = GitCalls(tmp_path)
    monkeypatch.setenv("PATH", calls.path)
    with PatchTexts(git) as texts:
        for rev in revs:
            assert texts.entries_at(rev, paths) == want[rev], rev
        assert texts.entries_at(f"{first}^", paths) == {}
        assert texts.entries_at(second, set()) == {}
    assert calls.take() == []  # no git process
