"""Issue 12 items 1-2 inside the rebase: a journal is trusted only once it validates,
and the conflict work tree is written without following a symbolic link.

Each test tries several variants of its class; after each, nothing outside the
project has changed (an ``outside`` directory next to it, with files a crafted
journal or symlink points at) and, where the command is refused, the project's
files are as they were.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from forkpatch.fsutil import dump_state, parse_state
from forkpatch.rebase.state import ORIGINAL_VERSION, VERSION
from support.git import numbered, replace_once
from support.projects import LINES, snapshot

BASE_FILES = {"a.py": LINES, "b.py": LINES.replace("line", "bee"), "pkg/mod.py": LINES}


def _tree(root: Path) -> dict[str, tuple[str, bytes]]:
    """Everything under ``root`` (not following links): path -> (kind, bytes or target)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p).encode())
            elif p.is_file():
                out[rel] = ("file", p.read_bytes())
            else:
                out[rel] = ("dir", b"")
    return out


@pytest.fixture
def outside(tmp_path):
    """A directory outside the project that nothing may touch."""
    d = tmp_path / "outside"
    (d / "pkg").mkdir(parents=True)
    for rel in ("a.py", "b.py", "victim.txt", "pkg/mod.py", "x.patch"):
        (d / rel).write_text(f"outside: {rel}\n")
    return d


def _stopped(scenario):
    """A rebase stopped at p1 (upstream changed the line it changes); p0 and p2 are fine."""

    def upstream(fork):
        fork.add_file("a.py", replace_once(LINES, "line 9\n", "line 9 upstream\n"))
        fork.commit("Upstream edits line 9")
        fork.tag("v2")

    s = scenario(
        BASE_FILES,
        [
            ("p0", {"b.py": "bee 0\n" + BASE_FILES["b.py"]}),
            ("p1", {"a.py": replace_once(LINES, "line 9\n", "line 9 ours\n")}),
            ("p2", {"pkg/mod.py": replace_once(LINES, "line 30\n", "line 30 p2\n")}),
        ],
        upstream,
    )
    s.run("rebase", "--onto", "v2", expect=3)
    return s


# --------------------------------------------------------------------------- the journal


def _journal(project: Path) -> Path:
    return project / ".forkpatch" / "rebase" / "state.json"


def _rewrite(path: Path, edit) -> None:
    """Change a state file's data and seal it again with a valid checksum (a crafted file)."""
    kind, version = (
        ("rebase", VERSION) if path.name == "state.json" else ("rebase-original", ORIGINAL_VERSION)
    )
    data = parse_state(path.read_bytes(), path=path, kind=kind, version=version)
    edit(data)
    path.write_bytes(dump_state(kind, version, data))


def _bundle_sha(project: Path) -> str:
    import hashlib

    return hashlib.sha256((project / ".forkpatch/rebase/original.json").read_bytes()).hexdigest()


def _tamper_cases(outside: Path):
    """(label, function(project) that tampers with the journal, text the refusal names)."""

    def edited(project):  # changed by hand: the checksum no longer matches
        p = _journal(project)
        p.write_text(p.read_text().replace('"onto": "v2"', '"onto": "v3"'))

    def old_version(project):  # the journal format of forkpatch before this one
        _journal(project).write_text(
            json.dumps({"version": 1, "phase": "conflict", "original": ["../outside/victim.txt"]})
        )

    def newer_version(project):
        p = _journal(project)
        doc = json.loads(p.read_text())
        doc["version"] = VERSION + 1
        p.write_text(json.dumps(doc))

    def dotdot(project):
        _rewrite(
            _journal(project), lambda d: d["original"].append("patches/../../outside/victim.txt")
        )

    def absolute(project):
        _rewrite(_journal(project), lambda d: d["original"].append(str(outside / "victim.txt")))

    def not_a_project_file(project):
        _rewrite(_journal(project), lambda d: d["original"].append(".forkpatch/lock"))

    def bundle_outside(project):
        """A crafted original.json naming a file outside, and a state.json that agrees."""

        def add(d):
            d["files"]["../outside/victim.txt"] = "cHduZWQK"  # "pwned\n"

        _rewrite(project / ".forkpatch/rebase/original.json", add)
        sha = _bundle_sha(project)

        def agree(d):
            d["original"].append("../outside/victim.txt")
            d["original_sha256"] = sha

        _rewrite(_journal(project), agree)

    def other_bundle(project):  # original.json of another rebase: the checksum differs
        _rewrite(project / ".forkpatch/rebase/original.json", lambda d: d["files"].popitem())

    def conflict_path(project):
        def bad(d):
            d["plan"]["outcomes"][1]["conflicts"][0]["path"] = "../../outside/victim.txt"

        _rewrite(_journal(project), bad)

    def commit_not_an_id(project):
        _rewrite(_journal(project), lambda d: d["plan"].update(head="HEAD~1; rm -rf /"))

    def reference_not_an_id(project):  # a resolved upstream reference, crafted
        _rewrite(
            _journal(project), lambda d: d["memo"].update(references=[["abc1234", "HEAD~1", "s"]])
        )

    def wrong_types(project):
        def edit(d):
            d["options"].update(fuzz="2")
            d["plan"].update(outcomes={"p0": "clean"})

        _rewrite(_journal(project), edit)

    def phase_not_of_the_plan(project):  # "writing" while a patch still conflicts
        _rewrite(_journal(project), lambda d: d.update(phase="writing", conflict=None))

    def journal_symlink(project):
        p = _journal(project)
        target = outside / "state.json"
        target.write_bytes(p.read_bytes())
        p.unlink()
        p.symlink_to(target)

    def patches_symlink(project):
        """patches/ replaced by a link to a directory outside: --abort would write there."""
        patches = project / "patches"
        for f in patches.iterdir():
            (outside / f.name).write_bytes(b"outside copy\n")
        import shutil

        shutil.rmtree(patches)
        patches.symlink_to(outside)

    return [
        ("edited", edited, "does not match its checksum"),
        ("old version", old_version, "state.json"),
        ("newer version", newer_version, f"has version {VERSION + 1}"),
        ("dotdot", dotdot, "not a plain relative path"),
        ("absolute", absolute, "not a plain relative path"),
        ("not a project file", not_a_project_file, "neither series.yaml nor under patches/"),
        ("bundle outside", bundle_outside, "not a plain relative path"),
        ("other bundle", other_bundle, "does not match"),
        ("conflict path", conflict_path, "not a plain relative path"),
        ("commit", commit_not_an_id, "is not a commit id"),
        ("reference", reference_not_an_id, "expected a commit id and its subject"),
        ("types", wrong_types, "must be a whole number"),
        ("phase", phase_not_of_the_plan, "does not follow from its patches' outcomes"),
        ("journal symlink", journal_symlink, "symbolic link"),
        ("patches symlink", patches_symlink, "symbolic link"),
    ]


@pytest.mark.parametrize("how", ["--abort", "--continue", "--skip"])
def test_a_journal_that_does_not_validate_is_refused(scenario, outside, how, tmp_path):
    base = _stopped(scenario)
    pristine = tmp_path / "pristine"
    import shutil

    shutil.copytree(base.project, pristine, symlinks=True)
    tried = 0
    for label, tamper, needle in _tamper_cases(outside):
        shutil.rmtree(base.project)
        shutil.copytree(pristine, base.project, symlinks=True)
        before_outside = _tree(outside)
        tamper(base.project)
        after_tamper = _tree(outside)
        before = (
            _tree(base.project / "patches") if not (base.project / "patches").is_symlink() else {}
        )
        series = (base.project / "series.yaml").read_bytes()
        code, _out, err = base.run("rebase", how, expect=None)
        assert code not in (0, 3), f"{label}: {how} accepted it\n{err}"
        assert needle in err, f"{label}: {err}"
        assert ".forkpatch/rebase/" in err, f"{label}: the file is not named: {err}"
        # Nothing touched: outside, patches/, series.yaml.
        assert _tree(outside) == after_tamper, label
        if before:
            assert _tree(base.project / "patches") == before, label
        assert (base.project / "series.yaml").read_bytes() == series, label
        # A read-only command says the journal cannot be used, and touches nothing either.
        code, _out, err = base.run("status", expect=None)
        assert "cannot be used" in err or "refused" in err or code != 0, f"{label}: {err}"
        assert _tree(outside) == after_tamper, label
        del before_outside
        tried += 1
    assert tried == len(_tamper_cases(outside))


def test_a_valid_journal_still_works_after_the_checks(scenario, outside):
    s = _stopped(scenario)
    before = snapshot(s.project)
    s.run("rebase", "--abort")
    assert snapshot(s.project) == before


# --------------------------------------------------------------------------- the conflict work tree


def _link(fork, rel: str, target: str) -> None:
    p = fork.path / rel
    if p.exists() or p.is_symlink():
        if p.is_dir() and not p.is_symlink():
            import shutil

            shutil.rmtree(p)
        else:
            p.unlink()
    p.parent.mkdir(parents=True, exist_ok=True)
    p.symlink_to(target)


def _symlink_cases(outside: Path):
    """(label, upstream change making v2, the series, what the rebase must do)."""
    ours = replace_once(LINES, "line 9\n", "line 9 ours\n")

    def leaf_absolute(fork):
        _link(fork, "a.py", str(outside / "a.py"))
        fork.commit("a.py becomes a link to a file outside")
        fork.tag("v2")

    def leaf_relative(fork):
        _link(fork, "a.py", "../../../../outside/a.py")
        fork.commit("a.py becomes a relative link leading outside")
        fork.tag("v2")

    def parent_dir(fork):
        _link(fork, "pkg", str(outside / "pkg"))
        fork.commit("pkg becomes a link to a directory outside")
        fork.tag("v2")

    def leaf_and_edit(fork):
        # Upstream edits the patched line (a conflict) and links the other file out.
        fork.add_file("a.py", replace_once(LINES, "line 9\n", "line 9 upstream\n"))
        _link(fork, "b.py", str(outside / "b.py"))
        fork.commit("conflict on a.py, b.py a link")
        fork.tag("v2")

    return [
        ("leaf absolute", leaf_absolute, [("p1", {"a.py": ours})], "conflict"),
        ("leaf relative", leaf_relative, [("p1", {"a.py": ours})], "conflict"),
        ("parent dir", parent_dir, [("p1", {"pkg/mod.py": ours})], "refused"),
        (
            "two files",
            leaf_and_edit,
            [("p1", {"a.py": ours, "b.py": "bee 0\n" + BASE_FILES["b.py"]})],
            "conflict",
        ),
    ]


@pytest.mark.parametrize("case", range(4))
def test_conflicts_are_never_written_through_a_symlink(scenario, outside, case):
    label, upstream, patches, expected = _symlink_cases(outside)[case]
    s = scenario(BASE_FILES, patches, upstream)
    before_outside = _tree(outside)
    before = snapshot(s.project)
    code, _out, err = s.run("rebase", "--onto", "v2", expect=None)
    assert _tree(outside) == before_outside, f"{label}: written outside\n{err}"
    assert snapshot(s.project) == before
    wt = s.project / ".forkpatch" / "rebase-worktree"
    if expected == "refused":
        assert code == 1 and "symlink" in err, f"{label}: {err}"
        return
    assert code == 3, f"{label}: {err}"
    for rel, _text in patches[0][1].items():
        p = wt / rel
        # The conflicting file is a plain file in the work tree (the link was replaced,
        # not written through), or left as upstream has it when nothing could merge.
        assert p.is_file() or p.is_symlink(), f"{label}: {rel} missing"
    got = wt / "a.py"
    assert not got.is_symlink() and b"<<<<<<<" in got.read_bytes(), label
    # Resolving and going on still writes nothing outside.
    got.write_text(LINES)
    s.run("rebase", "--skip", expect=None)
    assert _tree(outside) == before_outside, label


def test_a_tampered_conflict_work_tree_is_made_again(scenario, outside):
    """Between rebases the kept work tree is replaced by a link to a directory outside,
    or a directory in it by such a link: the next stop writes nothing there."""
    s = _stopped(scenario)
    s.run("rebase", "--abort")
    wt = s.project / ".forkpatch" / "rebase-worktree"
    assert (wt / ".git").is_file()
    before_outside = _tree(outside)
    # 1. a directory inside it becomes a link to outside
    import shutil

    shutil.rmtree(wt / "pkg")
    (wt / "pkg").symlink_to(outside / "pkg")
    (wt / "a.py").unlink()
    (wt / "a.py").symlink_to(outside / "a.py")
    s.run("rebase", "--onto", "v2", expect=3)
    assert _tree(outside) == before_outside
    assert not (wt / "a.py").is_symlink() and b"<<<<<<<" in (wt / "a.py").read_bytes()
    assert not (wt / "pkg").is_symlink()
    s.run("rebase", "--abort")
    # 2. the work tree itself becomes a link to a directory outside
    shutil.rmtree(wt)
    wt.symlink_to(outside)
    s.run("rebase", "--onto", "v2", expect=3)
    assert _tree(outside) == before_outside
    assert not wt.is_symlink() and (wt / ".git").is_file()
    s.run("rebase", "--abort")
    # 3. its .git file points at another repository's work tree admin directory
    (wt / ".git").write_text(f"gitdir: {outside}\n")
    s.run("rebase", "--onto", "v2", expect=3)
    assert _tree(outside) == before_outside
    s.run("rebase", "--abort")
    assert _tree(outside) == before_outside


def test_a_rebase_undone_with_git_is_not_exported_onto_the_old_base(scenario):
    """series.yaml and patches/ put back with git after a rebase (the work tree stays on
    the new tag): every command that would write from the work tree refuses, naming
    both bases; status warns; `apply --force` rebuilds, after which nothing changed."""
    lines = numbered(30)

    def upstream(fork):
        fork.add_file("a.txt", lines.replace("line 5\n", "line 5 upstream\n"))
        fork.commit("upstream edit")
        fork.tag("v2")

    s = scenario(
        {"a.txt": lines, "b.txt": lines},
        [
            ("near", {"a.txt": lines.replace("line 7\n", "line seven\n")}),
            ("far", {"b.txt": lines.replace("line 20\n", "line twenty\n")}),
        ],
        upstream,
    )
    s.run("apply")
    before = snapshot(s.project)
    s.run("rebase", "--onto", "v2")
    assert snapshot(s.project) != before
    # The user throws the rebase away with git: series.yaml and patches/ as they were.
    for rel, data in before.items():
        (s.project / rel).write_bytes(data)
    for rel in set(snapshot(s.project)) - set(before):
        (s.project / rel).unlink()
    assert snapshot(s.project) == before

    for args in (
        ("export",),
        ("refresh",),
        ("pop",),
        ("push",),
        ("new", "x"),
        ("rebase", "--onto", "v2"),
        ("apply",),
    ):
        code, _, err = s.run(*args, expect=None)
        assert code not in (0, 3), (args, err)
        assert "is built on" in err and "names base v1" in err, (args, err)
        assert "apply --force" in err, (args, err)
        assert snapshot(s.project) == before, args
    _, _, err = s.run("status")
    assert "is built on" in err and "apply --force" in err
    s.run("apply", "--force")
    s.run("export")
    assert snapshot(s.project) == before
    s.run("status")
