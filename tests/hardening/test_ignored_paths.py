"""A patch's files are the patch's files, whatever the fork's ignore rules say.

When forkpatch writes a patch's files into a work tree itself (a rebase stopped at a
conflict, ``push --merge``), a new file under a path the fork's ``.gitignore`` (or a
nested one), the store's ``info/exclude`` or the user's ``core.excludesFile``
ignores used to be left out by ``git add -A``: the patch lost the file and the
command exited 0. They are staged explicitly now. A file the user makes under an
ignored path is not taken in silence either: ``refresh`` names it and says how to
put it in the patch.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from support.cli import fp_in
from support.git import ScratchRepo, git, numbered, replace_once
from support.projects import project_with_patches
from support.reliability import Row

A = numbered(12)
NEW = "build/gen/config.py"  # the patch's new file, under an ignored path

# where the rule that ignores NEW lives: (fork files, what to do after init)
RULES: dict[str, tuple[dict[str, str], str]] = {
    "the fork's .gitignore": ({".gitignore": "build/\n"}, ""),
    "a nested .gitignore": ({"build/.gitignore": "gen/\n", "build/keep.txt": "k\n"}, ""),
    "a pattern on file names": ({".gitignore": "*.py\n"}, ""),
    "the store's info/exclude": ({}, "info/exclude"),
    "the user's core.excludesFile": ({}, "excludesFile"),
}


def _diff(path: str, old: str | None, new: str) -> str:
    """A git diff of ``path`` from ``old`` (None: a new file) to ``new``."""
    a = [] if old is None else old.splitlines(keepends=True)
    b = new.splitlines(keepends=True)
    head = f"diff --git a/{path} b/{path}\n"
    if old is None:
        head += "new file mode 100644\n"
    body = "".join(
        difflib.unified_diff(a, b, "/dev/null" if old is None else f"a/{path}", f"b/{path}")
    )
    return head + body


def _setup(tmp_path: Path, rule: str, monkeypatch, patches: list[tuple[str, str]]) -> Path:
    files, after = RULES[rule]
    project, _fork = project_with_patches(tmp_path, {"a.txt": A, **files}, patches)
    if after == "info/exclude":
        exclude = project / ".forkpatch" / "repo.git" / "info" / "exclude"
        exclude.parent.mkdir(parents=True, exist_ok=True)
        exclude.write_text("build/\n")
    elif after == "excludesFile":
        (tmp_path / "ignore").write_text("build/\n")
        (tmp_path / "gitconfig").write_text(f"[core]\n\texcludesFile = {tmp_path / 'ignore'}\n")
        monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "gitconfig"))
    return project


def _ok(project: Path, *args: str, expect: int = 0) -> str:
    code, out, err = fp_in(project, *args)
    assert code == expect, f"forkpatch {' '.join(args)} -> {code}\n{out}\n{err}"
    return err


def _resolve(path: Path, text: str) -> None:
    assert "<<<<<<<" in path.read_text()
    path.write_text(text)


PATCH = _diff("a.txt", A, replace_once(A, "line 5\n", "line 5 patched\n")) + _diff(
    NEW, None, "GENERATED = True\n"
)


@pytest.mark.parametrize("rule", list(RULES))
def test_a_rebase_stopped_at_a_conflict_keeps_the_patchs_ignored_file(rule, tmp_path, monkeypatch):
    project = _setup(tmp_path, rule, monkeypatch, [("p", PATCH)])
    fork = ScratchRepo(tmp_path / "fork", init=False)
    fork.add_file("a.txt", replace_once(A, "line 5\n", "line 5 upstream\n"))
    fork.commit("upstream")
    fork.tag("v2")
    _ok(project, "rebase", "--onto", "v2", expect=3)
    tree = project / ".forkpatch" / "rebase-worktree"
    assert (tree / NEW).read_text() == "GENERATED = True\n"
    _resolve(tree / "a.txt", replace_once(A, "line 5\n", "line 5 upstream patched\n"))
    _ok(project, "rebase", "--continue")
    text = (project / "patches" / "p.patch").read_text()
    assert f"+++ b/{NEW}" in text and "+GENERATED = True" in text, text
    assert "+line 5 upstream patched" in text


@pytest.mark.parametrize("rule", list(RULES))
def test_push_merge_then_refresh_keeps_the_patchs_ignored_file(rule, tmp_path, monkeypatch):
    below = _diff("a.txt", A, replace_once(A, "line 9\n", "line 9 below\n"))
    project = _setup(tmp_path, rule, monkeypatch, [("below", below), ("p", PATCH)])
    _ok(project, "apply")
    wt = project / ".forkpatch" / "worktree"
    _ok(project, "edit", "below")
    (wt / "a.txt").write_text(replace_once(A, "line 5\n", "line 5 below\n"))
    _ok(project, "refresh", expect=3)  # p no longer applies above it
    _ok(project, "push", "--merge", expect=3)
    assert (wt / NEW).read_text() == "GENERATED = True\n"
    _resolve(wt / "a.txt", replace_once(A, "line 5\n", "line 5 below patched\n"))
    _ok(project, "refresh")
    text = (project / "patches" / "p.patch").read_text()
    assert f"+++ b/{NEW}" in text and "+GENERATED = True" in text, text


USER_RULES = list(RULES)[:3]


@pytest.mark.parametrize("rule", USER_RULES)
def test_refresh_names_a_new_file_the_ignore_rules_leave_out(rule, tmp_path, monkeypatch):
    project = _setup(tmp_path, rule, monkeypatch, [])
    _ok(project, "apply")
    _ok(project, "new", "mine")
    wt = project / ".forkpatch" / "worktree"
    (wt / "a.txt").write_text(A + "mine\n")
    (wt / NEW).parent.mkdir(parents=True, exist_ok=True)
    (wt / NEW).write_text("MINE = 1\n")
    err = _ok(project, "refresh")
    assert "are ignored (by the fork's .gitignore, or as editor files)" in err, err
    assert "build/" in err, err
    assert "add -f PATH" in err
    text = (project / "patches" / "mine.patch").read_text()
    assert NEW not in text
    # The way in it names works: the file is in the patch after it.
    git(wt, "add", "-f", NEW)
    assert "ignored" not in _ok(project, "refresh")
    assert f"+++ b/{NEW}" in (project / "patches" / "mine.patch").read_text()


@pytest.mark.parametrize("users_excludes", [False, True], ids=["no-excludes", "excludes-nothing"])
def test_editor_files_in_the_work_tree_are_neither_taken_nor_deleted(
    tmp_path, monkeypatch, users_excludes
):
    """An editor's swap file or an IDE's folder in the editing work tree, on any machine
    (whatever the user's own core.excludesFile says): refresh leaves them out of the
    patch (and names them), and pop, which removes the files of popped patches, leaves
    them where they are."""
    project = _setup(tmp_path, "the fork's .gitignore", monkeypatch, [])
    if users_excludes:
        (tmp_path / "ignore").write_text("nothing-of-this\n")
        (tmp_path / "gitconfig").write_text(f"[core]\n\texcludesFile = {tmp_path / 'ignore'}\n")
        monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "gitconfig"))
    _ok(project, "apply")
    _ok(project, "new", "mine")
    wt = project / ".forkpatch" / "worktree"
    (wt / "a.txt").write_text(A + "mine\n")
    (wt / ".a.txt.swp").write_bytes(b"\x00vim swap")
    (wt / ".idea").mkdir()
    (wt / ".idea" / "workspace.xml").write_text("<project/>\n")
    err = _ok(project, "refresh")
    text = (project / "patches" / "mine.patch").read_text()
    assert ".swp" not in text and ".idea" not in text, text
    assert ".a.txt.swp" in err and ".idea/" in err
    _ok(project, "pop")
    assert (wt / ".a.txt.swp").read_bytes() == b"\x00vim swap"
    assert (wt / ".idea" / "workspace.xml").is_file()


RELIABILITY = [
    Row(
        "the user's environment",
        "an editor's swap file or an IDE folder in the editing work tree, then refresh, pop",
        "2 user configurations (no excludes file, one that ignores nothing of them)",
        "never put into a patch, named by refresh, kept by pop: one ignore list of editor "
        "files on every machine",
    ),
    Row(
        "the user's environment",
        "a patch's new file under an ignored path (.gitignore, nested, by name, "
        "info/exclude, core.excludesFile) written by forkpatch",
        f"{len(RULES)} rules x (rebase stop + --continue, push --merge + refresh)",
        "the file stays in the patch (it was dropped with exit 0)",
    ),
    Row(
        "the user's environment",
        "a new file the user makes under an ignored path, then refresh",
        f"{len(USER_RULES)} rules (in the fork's tree) x refresh, then the way in it names",
        "named in a warning with `git add -f` as the way in; never dropped in silence",
    ),
]
