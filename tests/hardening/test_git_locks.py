"""git's own lock files: a writer waits out a reader's short lock and a live holder,
and a tip about a lock says whether a process holds it.

`forkpatch status --json` beside a `refresh` (an editor's status bar, a watch loop) used
to take the work tree's index lock with its `git status` and make the refresh fail
with "index.lock: File exists", whose tip said to delete a lock another process
really held. A lock that is gone again when the writer looks (a reader's `git
status` writing back its refreshed index) is tried again; a lock another live process holds (the user's own git in the work tree) is waited
for, up to ``LOCK_WAIT_S``; a tip names the holder's pid and says not to remove it,
or says no process holds it (a killed git left it) and that it may go.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from forkpatch import gitlocks
from forkpatch.gitlocks import LOCK_WAIT_S, lock_holders
from support.cli import env, fp
from support.procs import LockHolder
from support.projects import copy_example
from support.reliability import Row

MAIN = "vllm/entrypoints/cli/main.py"
ROUNDS = 10
READERS = ("status", "--json"), ("top",)


def _index_lock(project: Path) -> Path:
    return project / ".forkpatch" / "repo.git" / "worktrees" / "worktree" / "index.lock"


@pytest.fixture
def applied(tmp_path, capsys):
    ex = copy_example(tmp_path, capsys)
    ex.run("apply")
    return ex


def _reader_loop(project: Path, args: tuple[str, ...], stop: threading.Event, codes: list) -> None:
    while not stop.is_set():
        proc = subprocess.run(
            [sys.executable, "-m", "forkpatch", *args],
            cwd=project,
            env=env(),
            capture_output=True,
            text=True,
        )
        codes.append((proc.returncode, proc.stderr[-400:]))


@pytest.mark.slow
@pytest.mark.parametrize("reader", READERS, ids=[" ".join(r) for r in READERS])
def test_refresh_beside_a_read_only_loop_never_meets_a_lock(applied, reader):
    """A writer in a loop, a reader in a loop beside it: every refresh succeeds."""
    ex = applied
    stop = threading.Event()
    codes: list[tuple[int, str]] = []
    threads = [
        threading.Thread(target=_reader_loop, args=(ex.project, reader, stop, codes))
        for _ in range(1)
    ]
    for t in threads:
        t.start()
    failures = []
    try:
        f = ex.wt / MAIN
        for n in range(ROUNDS):
            f.write_text(f.read_text() + f"# round {n}\n")
            proc = fp(ex.project, "refresh")
            if proc.returncode != 0:
                failures.append(proc.stderr)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert failures == [], failures[0]
    assert codes and all(c in (0, 3) for c, _ in codes), codes
    assert not any("index.lock" in e for _, e in codes)
    assert not _index_lock(ex.project).exists()


def _hold(path: Path, seconds: float) -> subprocess.Popen[bytes]:
    """A process that holds ``path`` open as git holds a lock file, then removes it."""
    code = (
        "import os, sys, time\n"
        "p = sys.argv[1]\n"
        "fd = os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY)\n"
        "print('held', flush=True)\n"
        "time.sleep(float(sys.argv[2]))\n"
        "os.unlink(p)\n"
        "os.close(fd)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(path), str(seconds)], stdout=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stdout.readline() == b"held\n"
    return proc


@pytest.mark.parametrize("command", [("refresh",), ("pop",), ("apply", "--force")])
def test_a_writer_waits_for_a_live_lock_holder(applied, command):
    ex = applied
    lock = _index_lock(ex.project)
    (ex.wt / MAIN).write_text((ex.wt / MAIN).read_text() + "# mine\n")
    if command != ("refresh",):
        fp(ex.project, "refresh")
    holder = _hold(lock, 1.5)
    try:
        assert lock_holders(lock) == [holder.pid]
        started = time.monotonic()
        proc = fp(ex.project, *command)
        assert proc.returncode == 0, proc.stderr
        assert time.monotonic() - started < LOCK_WAIT_S + 5
    finally:
        holder.wait(timeout=30)
    assert not lock.exists()


def test_a_stale_lock_is_named_as_stale(applied):
    """No process holds it: a killed git left it; the tip says so and that it may go."""
    ex = applied
    lock = _index_lock(ex.project)
    lock.write_bytes(b"")
    assert lock_holders(lock) == []
    (ex.wt / MAIN).write_text((ex.wt / MAIN).read_text() + "# mine\n")
    proc = fp(ex.project, "refresh")
    assert proc.returncode == 1
    assert f"no running process holds {lock}" in proc.stderr
    assert "remove that file" in proc.stderr
    lock.unlink()
    assert fp(ex.project, "refresh").returncode == 0


@pytest.mark.slow
def test_a_lock_held_past_the_wait_is_never_called_removable(applied):
    ex = applied
    lock = _index_lock(ex.project)
    (ex.wt / MAIN).write_text((ex.wt / MAIN).read_text() + "# mine\n")
    holder = _hold(lock, LOCK_WAIT_S + 8)
    try:
        proc = fp(ex.project, "refresh")
    finally:
        holder.kill()
        holder.wait()
        lock.unlink(missing_ok=True)
    assert proc.returncode == 1
    assert f"held by pid {holder.pid}" in proc.stderr
    assert "do not remove the lock" in proc.stderr
    assert "remove that file" not in proc.stderr
    assert fp(ex.project, "refresh").returncode == 0


def test_lock_holders_sees_only_open_files(tmp_path):
    path = tmp_path / "x.lock"
    path.write_bytes(b"")
    assert lock_holders(path) == []
    fd = os.open(path, os.O_RDONLY)
    try:
        assert lock_holders(path) == [os.getpid()]
    finally:
        os.close(fd)
    assert lock_holders(tmp_path / "absent.lock") == []


RELIABILITY = [
    Row(
        "concurrency",
        "a read-only command in a loop beside `refresh` in a loop",
        f"{len(READERS)} readers x {ROUNDS} refreshes",
        "no refresh fails: a writer waits out a reader's short index lock",
    ),
    Row(
        "concurrency",
        "git's index lock held by a live process, left by a killed git, or held past the wait",
        "5 cases",
        f"a writer waits for a live holder (up to {LOCK_WAIT_S:.0f} s); the tip names the "
        "holder's pid and says not to remove it, or says no process holds it",
    ),
]


def _git_lock_error(lock: Path) -> bytes:
    return f"fatal: Unable to create '{lock}': File exists.\n".encode()


def test_a_lock_released_during_the_holder_scan_is_tried_again(tmp_path, monkeypatch):
    """The holder lets go between "the file exists" and the /proc scan: the scan finds
    no holder (an unlinked file reads as "(deleted)"), which is a release, not a stale
    lock the writer should give up on."""
    lock = tmp_path / "index.lock"
    holder = LockHolder(lock)
    real = gitlocks.lock_holders

    def releasing_during_scan(path):
        holder.release()
        return real(path)

    monkeypatch.setattr(gitlocks, "lock_holders", releasing_during_scan)
    assert gitlocks.held_lock(_git_lock_error(lock)) == str(lock)


def test_the_held_lock_verdicts(tmp_path):
    lock = tmp_path / "index.lock"
    assert gitlocks.held_lock(_git_lock_error(lock)) == str(lock)  # gone: try again
    lock.write_bytes(b"")
    assert gitlocks.held_lock(_git_lock_error(lock)) is None  # stale: no holder, stays
    lock.unlink()
    holder = LockHolder(lock)
    try:
        assert gitlocks.held_lock(_git_lock_error(lock)) == str(lock)  # live holder
    finally:
        holder.kill()
    assert gitlocks.held_lock(_git_lock_error(lock)) is None  # its holder was killed
    assert gitlocks.held_lock(b"fatal: something else\n") is None
