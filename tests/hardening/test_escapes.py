"""Writes and deletes never leave the project: work trees, state files, patches/, copies.

Issue 12, items 1-4. Each class is tried with several variants; every case checks that
nothing outside the project (a directory ``outside/`` next to it, the fork's clone, the
original of a copied project) changed, byte for byte, links included.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from forkpatch.fsutil import dump_state
from support.cli import fp_in
from support.git import file_diff, git, tree_state
from support.projects import project_with_patches
from support.reliability import Row

X_OLD = "a\nb\nc\nd\ne\n"
X_MID = "a\nB\nc\nd\ne\n"
X_NEW = "a\nB\nc\nD\ne\n"
FILES = {"vllm/x.py": X_OLD, "vllm/y.py": "1\n2\n3\n", "README": "fork\n"}
PATCHES = [
    ("p1", file_diff("vllm/x.py", X_OLD, X_MID)),
    ("p2", file_diff("vllm/x.py", X_MID, X_NEW)),
]


def _ok(project: Path, *args: str) -> str:
    code, out, err = fp_in(project, *args)
    assert code == 0, f"forkpatch {' '.join(args)} -> {code}\n{out}\n{err}"
    return err


def _outside(tmp_path: Path) -> Path:
    out = tmp_path / "outside"
    out.mkdir(exist_ok=True)
    (out / "victim").write_text("keep me\n")
    (out / "sub").mkdir(exist_ok=True)
    (out / "sub" / "x.py").write_text("outside x\n")
    return out


def _applied(tmp_path: Path) -> tuple[Path, Path, Path]:
    project, fork = project_with_patches(tmp_path, FILES, PATCHES)
    _ok(project, "apply")
    return project, fork, _outside(tmp_path)


# ----------------------------------------------------------------------------- 1. work trees

# Where a hand-made commit on top of p1 points vllm/x.py (a link the tree now carries).
LINK_TARGETS: dict[str, Callable[[Path, Path], str]] = {
    "absolute link to a file outside": lambda out, wt: str(out / "victim"),
    "relative link to a file outside": lambda out, wt: os.path.relpath(out / "victim", wt / "vllm"),
    "dangling absolute link outside": lambda out, wt: str(out / "created-by-forkpatch"),
    "dangling relative link outside": lambda out, wt: os.path.relpath(
        out / "created-too", wt / "vllm"
    ),
    "link to the project's series.yaml": lambda out, wt: str(wt.parent.parent / "series.yaml"),
    "link to the fork's clone": lambda out, wt: str(wt.parent.parent.parent / "fork/vllm/x.py"),
}


def _link_x(project: Path, target: str) -> Path:
    """Pop p2, then commit (by hand, on top of p1) vllm/x.py as a link to ``target``."""
    _ok(project, "pop")
    wt = project / ".forkpatch" / "worktree"
    (wt / "vllm" / "x.py").unlink()
    os.symlink(target, wt / "vllm" / "x.py")
    git(wt, "add", "-A")
    git(wt, "commit", "-q", "-m", "hand-made: x.py becomes a link")
    return wt


def _guarded(tmp_path: Path, project: Path) -> dict[str, object]:
    return {
        "outside": tree_state(tmp_path / "outside"),
        "fork": tree_state(tmp_path / "fork"),
        "series": (project / "series.yaml").read_bytes(),
    }


@pytest.mark.parametrize("variant", sorted(LINK_TARGETS))
def test_conflict_markers_are_never_written_through_a_link(tmp_path: Path, variant: str) -> None:
    project, _fork, out = _applied(tmp_path)
    wt = project / ".forkpatch" / "worktree"
    _link_x(project, LINK_TARGETS[variant](out, wt))
    before = _guarded(tmp_path, project)
    code, _, err = fp_in(project, "push", "--merge")
    assert code == 3, err
    assert "conflict markers" in err
    assert _guarded(tmp_path, project) == before
    x = wt / "vllm" / "x.py"
    assert not x.is_symlink() and b"<<<<<<<" in x.read_bytes()
    assert not (out / "created-by-forkpatch").exists() and not (out / "created-too").exists()


@pytest.mark.parametrize("link", ["absolute", "relative"])
def test_a_linked_directory_in_the_stack_is_refused(tmp_path: Path, link: str) -> None:
    """vllm/ itself a link out of the tree: the patch's paths go through it, refused."""
    project, _fork, out = _applied(tmp_path)
    _ok(project, "pop")
    wt = project / ".forkpatch" / "worktree"
    shutil.rmtree(wt / "vllm")
    os.symlink(out / "sub" if link == "absolute" else os.path.relpath(out / "sub", wt), wt / "vllm")
    git(wt, "add", "-A")
    git(wt, "commit", "-q", "-m", "hand-made: vllm/ becomes a link")
    before = _guarded(tmp_path, project)
    code, _, err = fp_in(project, "push", "--merge")
    assert code == 1 and "symlink" in err, err
    assert _guarded(tmp_path, project) == before


STACK_COMMANDS = [
    ("refresh",),
    ("pop",),
    ("push",),
    ("push", "--merge"),
    ("apply", "--force"),
    ("export",),
    ("new", "extra"),
    ("pop", "--all"),
]


@pytest.mark.parametrize("args", STACK_COMMANDS, ids=[" ".join(a) for a in STACK_COMMANDS])
@pytest.mark.parametrize("variant", ["absolute link to a file outside", "link to the fork's clone"])
def test_stack_commands_never_follow_a_link_out(
    tmp_path: Path, args: tuple[str, ...], variant: str
) -> None:
    project, _fork, out = _applied(tmp_path)
    wt = project / ".forkpatch" / "worktree"
    _link_x(project, LINK_TARGETS[variant](out, wt))
    before = _guarded(tmp_path, project)
    before.pop("series")
    code, _, err = fp_in(project, *args)
    assert code in (0, 1, 2, 3) and "Traceback" not in err and "internal error" not in err, err
    after = _guarded(tmp_path, project)
    after.pop("series")
    assert after == before


# ----------------------------------------------------------------------------- 2. state files


def _journal(ops: list[list[str]]) -> bytes:
    return dump_state("commit-journal", 1, {"ops": ops})


# (name, builder(project, outside) -> bytes of .forkpatch/commit.json)
JOURNALS: dict[str, Callable[[Path, Path], bytes]] = {
    "old unversioned journal deleting outside": lambda p, o: json.dumps(
        {"ops": [["delete", str(o / "victim")]]}
    ).encode(),
    "delete an absolute path outside": lambda p, o: _journal([["delete", str(o / "victim")]]),
    "delete through ..": lambda p, o: _journal([["delete", "../outside/victim"]]),
    "delete through .. in the middle": lambda p, o: _journal(
        [["delete", "patches/../../outside/victim"]]
    ),
    "delete through a linked directory": lambda p, o: _journal([["delete", "patches/out/victim"]]),
    "delete a file forkpatch does not own": lambda p, o: _journal([["delete", "src/keep.py"]]),
    "delete in the store": lambda p, o: _journal([["delete", ".forkpatch/repo.git/HEAD"]]),
    "move an outside file in": lambda p, o: _journal(
        [["rename", str(o / "victim"), "patches/p1.patch"]]
    ),
    "move a project file out": lambda p, o: _journal(
        [["rename", "patches/.p1.patch.x.forkpatch-tmp", "../outside/victim"]]
    ),
    "rename from a file that is not a temporary": lambda p, o: _journal(
        [["rename", "series.yaml", "patches/p1.patch"]]
    ),
    "backslash path": lambda p, o: _journal([["delete", "..\\outside\\victim"]]),
    "edited after it was written": lambda p, o: _journal([["delete", "patches/p1.patch"]]).replace(
        b"p1.patch", b"p2.patch"
    ),
    "newer version": lambda p, o: dump_state("commit-journal", 2, {"ops": []}),
    "another kind of state file": lambda p, o: dump_state("stack", 1, {"ops": []}),
    "ops not a list": lambda p, o: dump_state("commit-journal", 1, {"ops": "delete"}),
    "an op with extra fields": lambda p, o: _journal([["delete", "patches/p1.patch", "x"]]),
    "not JSON": lambda p, o: b"{ops: [",
}


def _crafted_project(tmp_path: Path) -> tuple[Path, Path]:
    project, _fork = project_with_patches(tmp_path, FILES, PATCHES)
    out = _outside(tmp_path)
    (project / "src").mkdir()
    (project / "src" / "keep.py").write_text("user code\n")
    (project / "patches" / "out").symlink_to(out)
    (project / "patches" / ".p1.patch.x.forkpatch-tmp").write_text("staged\n")
    _ok(project, "status")
    return project, out


@pytest.mark.parametrize("variant", sorted(JOURNALS))
def test_a_crafted_commit_journal_is_refused(tmp_path: Path, variant: str) -> None:
    project, out = _crafted_project(tmp_path)
    journal = project / ".forkpatch" / "commit.json"
    journal.write_bytes(JOURNALS[variant](project, out))
    before = {"outside": tree_state(out), "project": tree_state(project)}
    for args in (("status",), ("apply",)):
        code, _, err = fp_in(project, *args)
        assert code == 1, err
        assert "commit.json" in err and "Traceback" not in err, err
        assert {"outside": tree_state(out), "project": tree_state(project)} == before


def test_a_genuine_journal_is_still_rolled_forward(tmp_path: Path) -> None:
    project, out = _crafted_project(tmp_path)
    new = (project / "series.yaml").read_text().replace("summary: p2", "summary: p2 (new)")
    tmp = project / ".series.yaml.abc123.forkpatch-tmp"
    tmp.write_text(new)
    (project / ".forkpatch" / "commit.json").write_bytes(
        _journal([["rename", tmp.name, "series.yaml"]])
    )
    err = _ok(project, "status")
    assert "finished writing series.yaml" in err
    assert (project / "series.yaml").read_text() == new and not tmp.exists()
    assert not (project / ".forkpatch" / "commit.json").exists()
    assert (out / "victim").read_text() == "keep me\n"


def _stack_state(data: dict[str, object]) -> bytes:
    return dump_state("stack", 1, data)


STATES: dict[str, Callable[[Path, Path, Path], bytes]] = {
    "work tree is the fork's clone": lambda p, f, o: _stack_state(
        {"root": str(p), "worktree": str(f)}
    ),
    "work tree is another project's": lambda p, f, o: _stack_state(
        {"root": str(p), "worktree": str(o / "other-project" / ".forkpatch" / "worktree")}
    ),
    "work tree through ..": lambda p, f, o: _stack_state({"root": str(p), "worktree": "../fork"}),
    "work tree through a linked directory": lambda p, f, o: _stack_state(
        {"root": str(p), "worktree": "patches/out"}
    ),
    "merge base path with ..": lambda p, f, o: _stack_state(
        {
            "root": str(p),
            "worktree": ".forkpatch/worktree",
            "merge_bases": {"p2": {"../../outside/victim": [None, None]}},
        }
    ),
    "editing a name that is a path": lambda p, f, o: _stack_state(
        {"root": str(p), "worktree": ".forkpatch/worktree", "editing": {"patch": "../x"}}
    ),
    "unknown field": lambda p, f, o: _stack_state(
        {"root": str(p), "worktree": ".forkpatch/worktree", "delete": [str(o)]}
    ),
    "synced record naming a file with ..": lambda p, f, o: dump_state(
        "stack",
        2,
        {
            "root": str(p),
            "worktree": ".forkpatch/worktree",
            "synced": {
                "patches": {"p2": {"file": "../../outside/victim", "blob": None, "commit": None}},
                "order": ["p2"],
            },
        },
    ),
    "synced record with a blob that is not an id": lambda p, f, o: dump_state(
        "stack",
        2,
        {
            "root": str(p),
            "worktree": ".forkpatch/worktree",
            "synced": {
                "patches": {"p2": {"file": "p2.patch", "blob": "HEAD", "commit": None}},
                "order": ["p2"],
            },
        },
    ),
    "old unversioned state": lambda p, f, o: json.dumps(
        {"worktree": str(f), "base": "0" * 40}
    ).encode(),
    "edited after it was written": lambda p, f, o: _stack_state(
        {"root": str(p), "worktree": ".forkpatch/worktree"}
    ).replace(b".forkpatch/worktree", str(f).encode()),
}


@pytest.mark.parametrize("variant", sorted(STATES))
def test_a_crafted_stack_state_never_reaches_another_repository(
    tmp_path: Path, variant: str
) -> None:
    project, fork, out = _applied(tmp_path)
    other = out / "other-project" / ".forkpatch" / "worktree"
    other.mkdir(parents=True)
    shutil.copytree(fork, other, dirs_exist_ok=True, symlinks=True)
    (project / "patches" / "out").symlink_to(out)
    (project / ".forkpatch" / "state.json").write_bytes(STATES[variant](project, fork, out))
    (fork / "untracked.txt").write_text("the user's own work\n")
    before = {"fork": tree_state(fork), "outside": tree_state(out)}
    head = git(fork, "rev-parse", "HEAD")
    for args in (("apply", "--force"), ("pop", "--force"), ("refresh",), ("status",)):
        code, _, err = fp_in(project, *args)
        assert "Traceback" not in err and "internal error" not in err, err
        if args != ("status",):
            assert code == 1 and ("state.json" in err or "not linked" in err), (args, err)
        assert {"fork": tree_state(fork), "outside": tree_state(out)} == before
        assert git(fork, "rev-parse", "HEAD") == head


# ----------------------------------------------------------------------------- 3. patches/


def _link_patches(project: Path, out: Path, layout: str) -> None:
    """Move the patch files behind a symbolic link (and rewrite series.yaml to match)."""
    patches = project / "patches"
    target = out / "patches"
    if layout in ("patches is an absolute link", "patches is a relative link"):
        shutil.move(str(patches), str(target))
        patches.symlink_to(target if "absolute" in layout else os.path.relpath(target, project))
        return
    sub = "sub" if layout == "patches/sub is a link" else "a/b"
    target.mkdir()
    for name in ("p1", "p2"):
        shutil.move(str(patches / f"{name}.patch"), str(target / f"{name}.patch"))
    link = patches / sub
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
    series = project / "series.yaml"
    series.write_text(
        series.read_text()
        .replace("file: p1.patch", f"file: {sub}/p1.patch")
        .replace("file: p2.patch", f"file: {sub}/p2.patch")
    )


LAYOUTS = [
    "patches is an absolute link",
    "patches is a relative link",
    "patches/sub is a link",
    "patches/a/b is a link (nested)",
]
PATCH_COMMANDS = [
    ("status",),
    ("delete", "p2"),
    ("import", "NEW"),
    ("export",),
    ("refresh",),
    ("rename", "p2", "p9"),
    ("apply", "--force"),
]


@pytest.mark.parametrize("args", PATCH_COMMANDS, ids=[" ".join(a) for a in PATCH_COMMANDS])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_linked_patch_directories_are_refused(
    tmp_path: Path, layout: str, args: tuple[str, ...]
) -> None:
    project, _fork, out = _applied(tmp_path)
    wt = project / ".forkpatch" / "worktree"
    (wt / "vllm" / "y.py").write_text("1\n2\n3\nedited\n")
    git(wt, "commit", "-q", "-a", "--amend", "--no-edit")
    _link_patches(project, out, layout)
    new = tmp_path / "new.diff"
    new.write_text("New.\n\n" + file_diff("vllm/y.py", "1\n2\n3\n", "1\n2\n3\n4\n"))
    args = tuple(str(new) if a == "NEW" else a for a in args)
    before = tree_state(out)
    code, _, err = fp_in(project, *args)
    assert code == 1, err
    assert "symbolic link" in err and "Traceback" not in err, err
    assert tree_state(out) == before


# ----------------------------------------------------------------------------- 4. copies and moves


def _sh(*argv: str) -> None:
    subprocess.run(argv, check=True)


COPY_COMMANDS = [
    ("status",),
    ("pop",),
    ("push",),
    ("new", "extra"),
    ("refresh",),
    ("delete", "extra"),
    ("apply", "--force"),
    ("export",),
]


def _work_tree_links(project: Path) -> tuple[str, str]:
    wt = project / ".forkpatch" / "worktree"
    admin = (wt / ".git").read_text().split(":", 1)[1].strip()
    return admin, (Path(admin) / "gitdir").read_text().strip()


@pytest.mark.parametrize("how", ["cp -a", "mv"])
def test_a_copied_or_moved_project_uses_its_own_work_tree(tmp_path: Path, how: str) -> None:
    project, _fork, _out = _applied(tmp_path)
    original = tree_state(project)
    moved = tmp_path / "elsewhere" / "project"
    moved.parent.mkdir()
    _sh(*how.split(), str(project), str(moved))
    for args in COPY_COMMANDS:
        _ok(moved, *args)
        if how == "cp -a":
            assert tree_state(project) == original, f"{args} changed the original"
    admin, back = _work_tree_links(moved)
    assert admin.startswith(str(moved / ".forkpatch" / "repo.git" / "worktrees"))
    assert back == str(moved / ".forkpatch" / "worktree" / ".git")
    assert _ok(moved, "top") == "" and "p2" in fp_in(moved, "top")[1]


@pytest.mark.parametrize("how", ["cp -a", "mv"])
def test_an_outside_work_tree_after_a_copy_or_move(tmp_path: Path, how: str) -> None:
    project, _fork = project_with_patches(tmp_path, FILES, PATCHES)
    external = tmp_path / "external-wt"
    _ok(project, "apply", "--worktree", str(external))
    ext_before = tree_state(external)
    original = tree_state(project)
    moved = tmp_path / "elsewhere"
    _sh(*how.split(), str(project), str(moved))
    code, _, err = fp_in(moved, "status")
    assert code == 0, err
    if how == "cp -a":
        # The external work tree is the original's: the copy forgets it, never touches it.
        assert "copied from" in err and str(external) in err
        assert tree_state(project) == original and tree_state(external) == ext_before
        code, _, err = fp_in(moved, "pop")
        assert code == 1 and "no work tree" in err
        _ok(moved, "apply")
        assert tree_state(project) == original and tree_state(external) == ext_before
    else:
        assert "re-linked" in err
        _ok(moved, "pop")
        assert "p1" in fp_in(moved, "top")[1]
        admin = (external / ".git").read_text().split(":", 1)[1].strip()
        assert admin.startswith(str(moved / ".forkpatch" / "repo.git"))


def test_a_copy_during_a_rebase_never_touches_the_original(tmp_path: Path) -> None:
    project, fork, _out = _applied(tmp_path)
    (fork / "vllm" / "x.py").write_text("a\nb!\nc\nd\ne\n")  # conflicts with p1
    git(fork, "commit", "-q", "-a", "-m", "v2")
    git(fork, "tag", "-a", "v2", "-m", "v2")
    code, _, err = fp_in(project, "rebase", "--onto", "v2")
    assert code == 3, err
    # The conflict is resolved, then the project copied, and the rebase goes on in the copy.
    (project / ".forkpatch" / "rebase-worktree" / "vllm" / "x.py").write_text("a\nB!\nc\nd\ne\n")
    original = tree_state(project)
    copy = tmp_path / "copy"
    _sh("cp", "-a", str(project), str(copy))
    for args in (("status",), ("rebase", "--continue"), ("rebase", "--abort")):
        code, _, err = fp_in(copy, *args)
        assert "Traceback" not in err and "internal error" not in err, err
        assert tree_state(project) == original, f"{args} changed the original"
    assert not (copy / ".forkpatch" / "rebase").exists()


RELIABILITY = [
    Row(
        "writes outside the project",
        "push --merge writing conflict markers where the stack has a link (file links "
        "in and out of the tree, dangling links, a linked directory)",
        f"{len(LINK_TARGETS) + 2} cases",
        f"{len(LINK_TARGETS)} written as a plain file in the tree (the link replaced), 2 "
        "refused (the path goes through a linked directory)",
        refused="2",
        outside=f"nothing (checked in {len(LINK_TARGETS) + 2})",
    ),
    Row(
        "writes outside the project",
        "stack commands with a link out of the tree in the stack",
        f"{len(STACK_COMMANDS)} commands x 2 links",
        "done or refused with an error, never a traceback; git's own writes never follow a link",
        outside=f"nothing (checked in {2 * len(STACK_COMMANDS)})",
    ),
    Row(
        "writes outside the project",
        "crafted .forkpatch/commit.json (paths outside, .., linked directories, files "
        "forkpatch does not own, bad version or checksum, old format)",
        f"{len(JOURNALS)} journals x (status, apply)",
        "refused naming commit.json, nothing renamed or deleted in the project either; a "
        "genuine journal is still finished",
        refused=str(2 * len(JOURNALS)),
        outside=f"nothing (checked in {2 * len(JOURNALS)})",
    ),
    Row(
        "writes outside the project",
        "crafted .forkpatch/state.json (work tree = the fork's clone or another project, "
        ".., links, bad names, unknown fields, a record of patch files naming .. or bad "
        "ids, old format, edited)",
        f"{len(STATES)} states x (apply --force, pop, refresh, status)",
        "refused naming state.json or the unlinked work tree; status still answers",
        refused=str(3 * len(STATES)),
        outside=f"nothing; the other repository unchanged (checked in {4 * len(STATES)})",
    ),
    Row(
        "writes outside the project",
        "patches/ or a directory below it a symbolic link",
        f"{len(LAYOUTS)} layouts x {len(PATCH_COMMANDS)} commands",
        "refused naming the link",
        refused=str(len(LAYOUTS) * len(PATCH_COMMANDS)),
        outside=f"nothing (checked in {len(LAYOUTS) * len(PATCH_COMMANDS)})",
    ),
    Row(
        "writes outside the project",
        "a project copied (cp -a) or moved (mv), work tree inside or outside it, or mid-rebase",
        f"{2 * len(COPY_COMMANDS) + 4 + 3} commands",
        "the copy re-linked to its own store, or it forgets the original's outside work "
        "tree; a rebase in the copy is refused or done in the copy",
        outside=f"the original unchanged (checked in {len(COPY_COMMANDS) + 4 + 3})",
    ),
]
