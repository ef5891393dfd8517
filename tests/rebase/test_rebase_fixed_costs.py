"""What a rebase step pays whatever the series: the git processes of its fixed work.

A ``git`` first on PATH logs every call (real git behind it). An import of commits
starts one ``fast-import`` and nothing else; a local fork's tag is read in one process
and copied into the store only when new or moved; a ``--continue`` or ``--skip`` does
not resolve again what the start of the rebase resolved (the upstream commits the
series names), so a stop costs the same git processes however long the series.
"""

from __future__ import annotations

import shutil

import pytest

from forkpatch.forkrepo import ForkRepo
from forkpatch.git import FAST_IMPORT_REF, FastImport, FileChange, Git, init_bare
from support.git import GitCalls, ScratchRepo, git, numbered, replace_once
from support.projects import load, own_file_series, snapshot

DATE = "@1700000000 +0000"


def _queue(git: Git, case: str) -> tuple[FastImport, dict[str, str]]:
    """A fast-import with the case's objects queued, and their marks by name."""
    fi = git.fast_import(keep_pack=case == "kept pack")
    if case == "blob only":
        return fi, {"blob": fi.blob(b"data\n")}
    tree = git.run("mktree", input=b"").stdout.decode().strip()
    root = git.commit_tree(tree, [], "root\n", date=DATE)
    ref = "refs/forkpatch/other" if case == "other ref" else FAST_IMPORT_REF
    one = [FileChange("a.txt", "100644", b"one\n")]
    marks = {"first": fi.commit(parent=root, changes=one, message="one\n", date=DATE, ref=ref)}
    if case == "names":  # git's order of names (a directory as "name/"), any bytes
        many = [
            FileChange(path, mode, f"{path}\n".encode("utf-8", "surrogateescape"))
            for path, mode in [
                ("a.txt", "100644"),
                ("a/x", "100644"),
                ("a-b", "100755"),
                ("a/y/z", "100644"),
                ("ä/ö.py", "100644"),
                ("b\udcff.bin", "100644"),  # a name that is not UTF-8
                ("link", "120000"),
                ("a0", "100644"),
            ]
        ]
        marks["names"] = fi.commit(
            parent=marks["first"], changes=many, message="names\n", date=DATE, ref=ref
        )
        deep = [FileChange("a/y/z"), FileChange("a.txt"), FileChange("c/d", "100644", b"d\n")]
        marks["fewer"] = fi.commit(
            parent=marks["names"], changes=deep, message="fewer\n", date=DATE, ref=ref
        )
    if case in ("chain", "kept pack"):
        blob = fi.blob(b"two\n")
        two = [FileChange("a.txt", "100644", oid=blob), FileChange("b.txt")]
        marks["blob"] = blob
        marks["second"] = fi.commit(
            parent=marks["first"], changes=two, message="two\n", date=DATE, ref=ref
        )
    return fi, marks


CASES = ["one commit", "chain", "other ref", "kept pack", "blob only", "names"]


def _imported(tmp_path, monkeypatch, case: str, writer: str) -> tuple[Git, dict[str, str], list]:
    """The case imported into a new store by ``writer`` ("fast-import": one process;
    "in process": libgit2, no process): the store, the ids by name, the git calls made."""
    import forkpatch.git

    git = init_bare(tmp_path / writer / "store.git")
    fi, marks = _queue(git, case)
    calls = GitCalls(tmp_path / writer)
    with monkeypatch.context() as m:
        m.setattr(forkpatch.git, "IN_PROCESS_COMMITS", -1 if writer == "fast-import" else 99)
        m.setenv("PATH", calls.path)
        ids = fi.finish()
    return git, {name: ids[mark] for name, mark in marks.items()}, calls.take()


@pytest.mark.parametrize("case", CASES)
def test_an_import_starts_one_process_and_writes_no_ref(tmp_path, monkeypatch, case):
    git, got, made = _imported(tmp_path, monkeypatch, case, "fast-import")
    assert len(made) == 1 and "fast-import" in made[0].split(), made
    assert git.out("for-each-ref") == "", "no ref written or left"
    kinds = {name: git.out("cat-file", "-t", oid) for name, oid in got.items()}
    assert kinds == {n: "blob" if n == "blob" else "commit" for n in got}
    if "second" in got:
        assert git.out("rev-parse", f"{got['second']}^") == got["first"]
        assert git.out("show", f"{got['second']}:a.txt") == "two"
        assert git.run("cat-file", "-e", f"{got['second']}:b.txt", check=False).returncode


@pytest.mark.parametrize("case", CASES)
def test_a_small_import_in_process_starts_no_git_and_makes_fast_imports_ids(
    tmp_path, monkeypatch, case
):
    """Written by libgit2 (as a queue of a few is): no process, no ref, and byte for
    byte the objects fast-import makes of the same queue (the same ids, git fsck)."""
    oracle, want, _ = _imported(tmp_path, monkeypatch, case, "fast-import")
    git, got, made = _imported(tmp_path, monkeypatch, case, "in process")
    assert made == [] and got == want
    assert git.out("for-each-ref") == ""
    for oid in got.values():
        assert git.run("cat-file", "-p", oid).stdout == oracle.run("cat-file", "-p", oid).stdout
    git.run("fsck", "--strict", "--no-dangling")


@pytest.mark.parametrize("held", [40, 36, 0], ids=["all held", "most held", "none held"])
def test_blobs_the_store_holds_cost_no_process(tmp_path, monkeypatch, held):
    """More blobs than an import writes in process, of which the store holds ``held``
    already and some are queued twice: written in process when what is new is few (no
    git process), by one fast-import otherwise; each gets git's own id, the same bytes
    one mark."""
    from forkpatch.git import IN_PROCESS_COMMITS

    git = init_bare(tmp_path / "store.git")
    datas = [b"image %d\n" % i * (i + 1) for i in range(40)]
    for data in datas[:held]:
        git.run("hash-object", "-w", "--stdin", input=data)
    fi = git.fast_import()
    marks = [fi.blob(data) for data in datas]
    assert [fi.blob(data) for data in datas[:5]] == marks[:5]
    calls = GitCalls(tmp_path)
    monkeypatch.setenv("PATH", calls.path)
    ids = fi.finish()
    made = calls.take()
    monkeypatch.undo()
    assert (made == []) == (len(datas) - held <= IN_PROCESS_COMMITS), made
    for data, mark in zip(datas, marks, strict=True):
        oid = git.out("hash-object", "--stdin", input=data)
        assert ids[mark] == oid and git.run("cat-file", "blob", oid).stdout == data


LINES = numbered(60)


def _series(scenario, n: int):
    """n patches, each changing its own file; upstream v2 changes the line the first and
    the last patch change (two stops) and moves every file down (offsets)."""
    files, patches = own_file_series(n, LINES)

    def upstream(fork) -> None:
        for i in range(n):
            fork.add_file(f"m{i:02d}.py", "# header\n" + LINES)
        fork.commit("upstream headers")
        for i in (0, n - 1):  # each alone: a candidate for upstream detection
            text = replace_once("# header\n" + LINES, "line 20\n", "line 20 upstream\n")
            fork.add_file(f"m{i:02d}.py", text)
            fork.commit(f"upstream fix in m{i:02d}")
        fork.tag("v2")

    s = scenario(files, patches, upstream)
    # Each entry names its origin commit, as a series imported from `git format-patch`
    # mails does (the mail's `From <id>` line): references the rebase resolves.
    origins = s.fork.git("rev-list", "--reverse", "v1..series").split()
    text = (s.project / "series.yaml").read_text()
    for i, origin in enumerate(origins):
        entry = f"  - name: p{i:02d}\n"
        text = text.replace(entry, f"{entry}    upstream-commits: [{origin}]\n")
    (s.project / "series.yaml").write_text(text)
    return s


def _resolve(s, n: int) -> None:
    wt = s.project / ".forkpatch" / "rebase-worktree"
    for i in (0, n - 1):
        path = wt / f"m{i:02d}.py"
        if "<<<<<<<" in path.read_text():
            path.write_text("# header\n" + replace_once(LINES, "line 20\n", f"line 20 both {i}\n"))


@pytest.mark.parametrize("second", ["--continue", "--skip"])
def test_a_stop_costs_the_same_git_processes_however_long_the_series(
    scenario, tmp_path, monkeypatch, second
):
    """The first stop's --continue (or --skip) of a 3- and of a 12-patch series start the
    same git processes (besides at most one fast-import), and none of them resolves a
    reference the series names."""
    counts = {}
    for n in (3, 12):
        s = _series(scenario, n)
        calls = GitCalls(tmp_path / f"calls-{n}-{second}")
        monkeypatch.setenv("PATH", calls.path)
        s.run("rebase", "--onto", "v2", expect=3)
        started = calls.take()
        # the commits' date (the target's) is read through the walk's object reader
        dated = [c for c in started if " show " in f" {c} " or " cat-file commit " in f" {c} "]
        assert not dated, started
        # the upstream commits' and the patches' patch-ids from one process
        assert len([c for c in started if " patch-id " in f" {c} "]) == 1, started
        _resolve(s, n)
        s.run("rebase", second, expect=3)
        monkeypatch.undo()
        made = calls.take()
        # A few commits are written in process, more by one fast-import: the writer
        # depends on how many the step writes, its process count does not grow with it.
        imports = [c for c in made if " fast-import" in f" {c}"]
        assert len(imports) <= 1, made
        counts[n] = len(made) - len(imports)
        # the series' references (its patches' origin commits) were resolved at the start
        assert not [c for c in made if "--batch-check=%(objectname) %(objecttype)" in c], made
        assert not [c for c in made if " rev-list " in f" {c}" or "--no-walk" in c], made
        assert not [c for c in made if "update-ref -d" in c], made
        _resolve(s, n)
        s.run("rebase", "--continue")
        shutil.rmtree(s.project)
        shutil.rmtree(s.fork.path)
        shutil.rmtree(tmp_path / "incoming")
    assert counts[3] == counts[12], counts


@pytest.mark.parametrize(
    ("case", "most"),
    [
        ("lightweight tag", 4),
        ("annotated tag", 4),
        ("tag of a tag", 4),
        ("in the store already", 2),
        ("moved since", 4),
    ],
)
def test_a_local_forks_tag_resolves_in_a_few_processes(tmp_path, monkeypatch, case, most):
    """`rebase --onto TAG` on a local fork: the tag's commit in one process, the store's
    tag checked (and copied when new or moved) in one to three more, and the store's tag
    is the fork's afterwards."""
    fork = ScratchRepo(tmp_path / "fork")
    fork.add_file("a.txt", "one\n")
    first = fork.commit("one")
    fork.add_file("a.txt", "two\n")
    second = fork.commit("two")
    if case == "lightweight tag":
        fork.git("tag", "v2", second)
    else:
        fork.git("tag", "-a", "-m", "v2", "v2", second if case != "moved since" else first)
    if case == "tag of a tag":
        fork.git("tag", "-a", "-m", "outer", "v2-outer", "v2")
    tag = "v2-outer" if case == "tag of a tag" else "v2"
    repo = ForkRepo.open(tmp_path / "project", str(fork.path))
    if case in ("in the store already", "moved since"):
        assert repo.resolve_ref(tag).commit == fork.rev(f"{tag}^{{commit}}")
    if case == "moved since":
        fork.git("tag", "-f", "-a", "-m", "v2 moved", "v2", second)
    calls = GitCalls(tmp_path)
    monkeypatch.setenv("PATH", calls.path)
    got = repo.resolve_ref(tag)
    made = calls.take()
    monkeypatch.undo()
    assert (got.name, got.commit, got.kind) == (tag, second, "tag")
    assert len(made) <= most, made
    assert repo.store.out("rev-parse", f"refs/tags/{tag}") == fork.rev(f"refs/tags/{tag}")


def test_a_step_that_stops_again_leaves_the_editing_work_tree_alone(
    scenario, tmp_path, monkeypatch
):
    """With the series applied (an editing work tree) and two stops: the first
    --continue stops again without a `git status` of the editing work tree, whose
    untracked file does not hold it up; the step that ends the rebase (and would move
    the editing stack) refuses, changing nothing, until the edit is put aside."""
    n = 4
    s = _series(scenario, n)
    s.run("apply")
    wt = s.project / ".forkpatch" / "worktree"
    s.run("rebase", "--onto", "v2", expect=3)
    _resolve(s, n)
    (wt / "notes.txt").write_text("my notes, in no object\n")
    calls = GitCalls(tmp_path / "calls")
    monkeypatch.setenv("PATH", calls.path)
    s.run("rebase", "--continue", expect=3)
    monkeypatch.undo()
    looked = [c for c in calls.take() if f"--work-tree={wt}" in c]
    assert looked == [], looked
    _resolve(s, n)
    owned = snapshot(s.project)
    _, _, err = s.run("rebase", "--continue", expect=1)
    assert "notes.txt (new, untracked)" in err and "nothing was changed" in err, err
    assert snapshot(s.project) == owned
    assert (wt / "notes.txt").read_text() == "my notes, in no object\n"
    git(wt, "stash", "push", "-q", "-u")
    s.run("rebase", "--continue")
    git(wt, "stash", "pop", "-q")
    assert (wt / "notes.txt").read_text() == "my notes, in no object\n"
    assert load(s.project).base.tag == "v2"


def test_many_small_packs_are_rolled_up_without_rewriting_the_big_one(tmp_path, monkeypatch):
    """The store after many stops: one big pack (a fork's objects fetched into it) and a
    small pack per import (imports too big to be written in process). The repack at the
    end of a rebase merges the small ones only, leaves the big pack's file as it is, and
    keeps every object, reachable or not."""
    import forkpatch.git

    monkeypatch.setattr(forkpatch.git, "IN_PROCESS_COMMITS", -1)  # every import a pack
    git = init_bare(tmp_path / "store.git")
    pack_dir = git.git_dir / "objects" / "pack"
    fi = git.fast_import(keep_pack=True)
    blobs = [fi.blob(f"file {i}\n".encode() * 200) for i in range(300)]
    big = fi.finish()
    (big_pack,) = pack_dir.glob("*.pack")
    for i in range(45):
        fi = git.fast_import(keep_pack=True)
        fi.blob(f"import {i}\n".encode())
        fi.blob(f"import {i}, again\n".encode())  # a one-object import is unpacked
        fi.finish()
    objects = set(git.out("cat-file", "--batch-all-objects", "--batch-check=%(objectname)").split())
    assert len(list(pack_dir.glob("*.pack"))) == 46
    assert git.repack_if_many() is True
    packs = sorted(pack_dir.glob("*.pack"))
    assert len(packs) <= 2 and big_pack in packs, packs
    after = set(git.out("cat-file", "--batch-all-objects", "--batch-check=%(objectname)").split())
    assert after == objects and {big[b] for b in blobs} <= after
    assert git.repack_if_many() is False  # few packs now: nothing to do


def _subcommands(calls: list[str]) -> list[str]:
    """The git subcommand of each logged call (the word after the --git-dir/-c options)."""
    out = []
    for call in calls:
        words = call.split()
        i = 0
        while i < len(words) and (words[i].startswith("--") or words[i] == "-c"):
            i += 2 if words[i] == "-c" else 1
        out.append(words[i] if i < len(words) else "")
    return out


@pytest.mark.parametrize("second", ["--continue", "--skip"])
def test_a_stop_moves_the_conflict_work_tree_in_one_process_as_reset_and_add_would(
    scenario, tmp_path, monkeypatch, second
):
    """A --continue (or --skip) that stops again starts two git processes: `add -A` (what
    the human did, or the untracked files to remove) and one `read-tree -u --reset` to
    the stop's tree (written in process: the patches below and the conflicting patch
    with its markers); no `reset --hard` and no second `add`. The work tree is then what
    `reset --hard HEAD` and `add` of the brought-in files made before: HEAD the patches
    below, the conflicting files staged, nothing unstaged, an untracked file gone with a
    --skip (and part of the resolution with a --continue)."""
    n = 6
    s = _series(scenario, n)
    wt = s.project / ".forkpatch" / "rebase-worktree"
    s.run("rebase", "--onto", "v2", expect=3)
    path = wt / "m00.py"
    path.write_text("# header\n" + replace_once(LINES, "line 20\n", "line 20 both 0\n"))
    (wt / "scratch.txt").write_text("left behind\n")
    calls = GitCalls(tmp_path / "calls")
    monkeypatch.setenv("PATH", calls.path)
    s.run("rebase", second, expect=None)
    monkeypatch.undo()
    made = _subcommands(calls.take())
    assert (s.project / ".forkpatch" / "rebase" / "state.json").is_file()  # stopped again
    assert made.count("reset") == 0 and made.count("worktree") == 0, made
    assert made.count("add") == 1 and made.count("read-tree") == 1, made
    assert git(wt, "rev-parse", "HEAD") == git(wt, "rev-parse", "refs/forkpatch/rebase/head")
    if second == "--skip":
        assert not (wt / "scratch.txt").exists()
    else:  # the whole work tree is the resolution: the new file is in the patch below
        assert git(wt, "show", "HEAD:scratch.txt") == "left behind"
    assert git(wt, "diff", "--name-only") == ""  # nothing unstaged
    staged = git(wt, "diff", "--cached", "--name-only", "HEAD").split()
    assert staged == ["m05.py"], staged
    assert b"<<<<<<<" in (wt / "m05.py").read_bytes()


def test_loose_objects_written_in_process_are_rolled_up_once_they_are_many(tmp_path):
    """Blobs written in process are loose objects as git writes them (the ids git
    computes, readable by git, fsck clean); past the limit the repack puts them into a
    pack, keeping every one, and a store with few loose objects is left alone."""
    git = init_bare(tmp_path / "store.git")
    objects = git.git_dir / "objects"
    written: dict[str, bytes] = {}
    i = 0
    while not (objects / "17").is_dir():  # the directory the count samples
        data = f"blob {i}\n".encode() * (i % 7 + 1)
        written[git.objects.write_blob(data)] = data
        i += 1
    assert git.repack_if_many() is False  # far below the limit
    for oid, data in list(written.items())[:: max(1, len(written) // 20)]:
        assert git.run("cat-file", "blob", oid).stdout == data
        assert git.out("hash-object", "--stdin", input=data) == oid
    git.run("fsck", "--strict", "--no-dangling")
    assert git.repack_if_many(loose_limit=0) is True
    assert not list((objects / "17").glob("*"))  # none loose any more
    after = set(git.out("cat-file", "--batch-all-objects", "--batch-check=%(objectname)").split())
    assert after == set(written)
    assert git.repack_if_many(loose_limit=0) is False  # all packed now
