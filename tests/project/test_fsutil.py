"""atomic_write, the project lock, writes that never follow symlinks, state files."""

from __future__ import annotations

import json
import os

import pytest

from forkpatch.errors import LockError, PathSafetyError, StateError
from forkpatch.fsutil import (
    atomic_write,
    atomic_write_each,
    check_inside,
    check_relpath,
    dump_state,
    load_state,
    project_lock,
)
from forkpatch.intree import remove_in_tree, write_in_tree


def test_atomic_write_creates_and_skips_equal(tmp_path):
    p = tmp_path / "d" / "f"
    assert atomic_write(p, b"one") is True
    assert p.read_bytes() == b"one" and (p.stat().st_mode & 0o777) == 0o644
    os.utime(p, ns=(1, 1))
    assert atomic_write(p, b"one") is False
    assert p.stat().st_mtime_ns == 1
    p.chmod(0o600)
    assert atomic_write(p, b"two") is True
    assert p.read_bytes() == b"two" and (p.stat().st_mode & 0o777) == 0o600
    assert sorted(x.name for x in p.parent.iterdir()) == ["f"]


def test_atomic_write_failure_leaves_old_content(tmp_path, monkeypatch):
    p = tmp_path / "f"
    p.write_bytes(b"old")

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        atomic_write(p, b"new")
    assert p.read_bytes() == b"old"
    assert [x.name for x in tmp_path.iterdir()] == ["f"]


@pytest.mark.parametrize("durable", [True, False])
def test_atomic_write_not_durable_is_still_whole_and_churn_free(tmp_path, durable):
    p = tmp_path / "cache" / "f"
    assert atomic_write(p, b"one", durable=durable) is True
    os.utime(p, ns=(1, 1))
    assert atomic_write(p, b"one", durable=durable) is False
    assert p.stat().st_mtime_ns == 1
    assert atomic_write(p, b"two", durable=durable) is True
    assert p.read_bytes() == b"two"
    assert sorted(x.name for x in p.parent.iterdir()) == ["f"]


def test_atomic_write_each_writes_what_differs_in_several_directories(tmp_path):
    a, b, c = tmp_path / "x" / "a", tmp_path / "y" / "b", tmp_path / "y" / "c"
    c.parent.mkdir(parents=True)
    c.write_bytes(b"same")
    os.utime(c, ns=(1, 1))
    assert atomic_write_each({a: b"A", b: b"B", c: b"same"}) == [a, b]
    assert (a.read_bytes(), b.read_bytes(), c.stat().st_mtime_ns) == (b"A", b"B", 1)
    assert atomic_write_each({a: b"A", b: b"B"}) == []
    assert sorted(x.name for x in b.parent.iterdir()) == ["b", "c"]


@pytest.mark.parametrize("failing", [0, 1, 2])
def test_atomic_write_each_failing_rename_leaves_each_file_old_or_new(
    tmp_path, monkeypatch, failing
):
    paths = [tmp_path / f"f{i}" for i in range(3)]
    for p in paths:
        p.write_bytes(b"old")
    real, calls = os.replace, []

    def replace(src, dst):
        calls.append(dst)
        if len(calls) == failing + 1:
            raise OSError("disk full")
        real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_each({p: b"new" for p in paths})
    assert [p.read_bytes() for p in paths] == [b"new"] * failing + [b"old"] * (3 - failing)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["f0", "f1", "f2"]  # no temp left


def test_lock_is_exclusive_and_names_holder(tmp_path):
    lock = tmp_path / "s" / "lock"
    with project_lock(lock, command="apply"):
        assert lock.read_text() == f"{os.getpid()} apply\n"
        with pytest.raises(LockError) as exc, project_lock(lock, command="push"):
            pass
        assert f"pid {os.getpid()}" in exc.value.message and "apply" in exc.value.message
    with project_lock(lock, command="push"):
        pass
    assert lock.read_text() == ""


def test_a_longer_earlier_record_is_cut_to_the_new_one(tmp_path):
    lock = tmp_path / "s" / "lock"
    lock.parent.mkdir(parents=True)
    lock.write_text("999999 a-very-long-command-that-was-killed --with --options\n")
    with project_lock(lock, command="pop") as left:
        assert left is not None and left.startswith("999999 ")
        assert lock.read_text() == f"{os.getpid()} pop\n"


# --------------------------------------------------------------------------- writes inside a tree


def _tree(tmp_path):
    root = tmp_path / "tree"
    outside = tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "victim").write_bytes(b"keep")
    return root, outside


@pytest.mark.parametrize(
    "link_at, rel",
    [
        ("a", "a/victim"),  # a parent directory is a link out
        ("a/b", "a/b/victim"),  # a deeper parent
        ("a", "a/b/c/new"),  # a parent of a directory that does not exist yet
    ],
)
def test_write_in_tree_refuses_a_symlinked_parent(tmp_path, link_at, rel):
    root, outside = _tree(tmp_path)
    link = root / link_at
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside)
    with pytest.raises(PathSafetyError, match="symbolic link"):
        write_in_tree(root, rel, b"evil")
    assert (outside / "victim").read_bytes() == b"keep"
    assert sorted(p.name for p in outside.iterdir()) == ["victim"]
    with pytest.raises(PathSafetyError):
        remove_in_tree(root, rel)
    assert (outside / "victim").read_bytes() == b"keep"


@pytest.mark.parametrize("target", ["abs", "rel"])
def test_write_in_tree_replaces_a_symlink_instead_of_following_it(tmp_path, target):
    root, outside = _tree(tmp_path)
    link = root / "f.py"
    link.symlink_to(outside / "victim" if target == "abs" else "../outside/victim")
    write_in_tree(root, "f.py", b"new\n", mode=0o755)
    assert not link.is_symlink() and link.read_bytes() == b"new\n"
    assert link.stat().st_mode & 0o777 == 0o755
    assert (outside / "victim").read_bytes() == b"keep"
    # and removing a symlink removes the link, never its target
    link.unlink()
    link.symlink_to(outside / "victim")
    assert remove_in_tree(root, "f.py")
    assert (outside / "victim").read_bytes() == b"keep"


def test_write_in_tree_creates_parents_symlinks_and_leaves_no_temp(tmp_path):
    root, _ = _tree(tmp_path)
    write_in_tree(root, "x/y/z.txt", b"1")
    write_in_tree(root, "x/y/z.txt", b"2")
    write_in_tree(root, "x/link", b"y/z.txt", symlink=True)
    assert (root / "x/y/z.txt").read_bytes() == b"2"
    assert os.readlink(root / "x/link") == "y/z.txt"
    assert sorted(p.name for p in (root / "x/y").iterdir()) == ["z.txt"]
    assert not remove_in_tree(root, "x/missing") and not remove_in_tree(root, "nope/missing")


@pytest.mark.parametrize(
    "rel", ["", "/etc/passwd", "../x", "a/../../x", "a//b", "./a", "a/.", "a\\..\\b", "a\0b", 7]
)
def test_unsafe_relative_paths_are_refused(tmp_path, rel):
    root, _ = _tree(tmp_path)
    with pytest.raises(PathSafetyError):
        check_relpath(rel, where="state.json: files")
    if isinstance(rel, str) and rel:
        with pytest.raises(PathSafetyError):
            write_in_tree(root, rel, b"x")


@pytest.mark.parametrize(
    "rel",
    ["/abs", "C:/x", "c:x", "../x", "a/../../x", "a//b", "./a", "a/.", "a\\b", "a\0b", "a/b/"],
)
def test_patch_paths_wheel_members_and_state_paths_refuse_the_same_names(rel):
    """One lexical check serves patches, wheels and state files: they cannot drift apart."""
    from forkpatch.patchfile import check_path
    from forkpatch.wheels.wheelzip import member_name_problem

    with pytest.raises(PathSafetyError):
        check_relpath(rel, where="state.json: files")
    with pytest.raises(PathSafetyError, match="unsafe path"):
        check_path(rel, source="0001-x.patch")
    if not rel.endswith("/"):  # a wheel's directory entries end in '/'
        assert member_name_problem(rel) is not None
        assert member_name_problem(rel + "/") is not None
    for ok in ("vllm/x.py", "a.b/c..d/.e", "dir/"):
        assert member_name_problem(ok) is None
    check_relpath("vllm/x.py", where="state.json: files")


def test_check_inside(tmp_path):
    root, outside = _tree(tmp_path)
    (root / "d").mkdir()
    (root / "ln").symlink_to(outside)
    assert check_inside(root, root / "d" / "f", where="w") == root / "d" / "f"
    assert check_inside(root, "d/f", where="w") == root / "d" / "f"
    for bad in (outside / "victim", root / ".." / "outside", "ln/victim", root / "ln" / "x"):
        with pytest.raises(PathSafetyError, match="w: "):
            check_inside(root, bad, where="w")


# --------------------------------------------------------------------------- state files


def test_state_file_round_trip_and_refusals(tmp_path):
    path = tmp_path / "state.json"
    assert load_state(path, kind="stack", version=2) is None
    path.write_bytes(dump_state("stack", 2, {"worktree": "wt", "n": [1, 2]}))
    assert load_state(path, kind="stack", version=2) == {"worktree": "wt", "n": [1, 2]}

    good = json.loads(path.read_text())
    variants = {
        "not json": b"{",
        "not an object": b"[1]",
        "other kind": dump_state("rebase", 2, {"worktree": "wt"}),
        "older version": dump_state("stack", 1, {"worktree": "wt"}),
        "newer version": dump_state("stack", 3, {"worktree": "wt"}),
        "bool version": json.dumps({**good, "version": True}).encode(),
        "edited data": json.dumps({**good, "data": {"worktree": "/etc"}}).encode(),
        "no checksum": json.dumps({k: v for k, v in good.items() if k != "sha256"}).encode(),
        "binary": b"\xff\xfe",
    }
    for what, raw in variants.items():
        path.write_bytes(raw)
        with pytest.raises(StateError) as info:
            load_state(path, kind="stack", version=2)
        assert str(path) in str(info.value), what


@pytest.mark.parametrize("size", [0, 1, 55, 64, 4096, 65535, 65536, 65537, 1 << 20])
@pytest.mark.parametrize("name", ["sha1", "sha256"])
def test_digest_is_hashlib_s(name, size):
    """fsutil.digest: CPython's own module for small inputs, hashlib for large ones: the
    same digest either way, however the input is split."""
    import hashlib

    from forkpatch.fsutil import digest

    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    want = hashlib.new(name, data).hexdigest()
    assert digest(name, data) == want
    assert digest(name, data[:7], data[7:]) == want
    assert digest(name) == hashlib.new(name).hexdigest()
