"""atomic_write (no-op when equal, no temp files left) and the project lock."""

from __future__ import annotations

import os

import pytest

from forkpatch.errors import LockError
from forkpatch.fsutil import atomic_write, project_lock


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
