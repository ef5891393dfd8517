"""Two forkpatch processes on one project, stale locks, and a fork that moves or stalls."""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from forkpatch.example import make_fork, write_example_patches
from support.cli import env, fp, fp_in
from support.git import git
from support.projects import visible
from support.reliability import Row
from support.servers import free_port


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("conc")
    make_fork(root / "fork")
    write_example_patches(root / "fork", "v1.2.1", root / "incoming")
    return root


@pytest.fixture
def project(made: Path, tmp_path: Path) -> Path:
    import shutil

    shutil.copytree(made / "fork", tmp_path / "fork", symlinks=True)
    project = tmp_path / "project"
    project.mkdir()
    code, _, err = fp_in(project, "init", "--fork-url", str(tmp_path / "fork"), "--base", "v1.2.1")
    assert code == 0, err
    return project


def _incoming(made: Path) -> list[Path]:
    return sorted((made / "incoming").glob("*.patch"))


# ----------------------------------------------------------------------------- the lock


def _paused(project: Path, *args: str, point: str = "journal") -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "forkpatch", *args],
        cwd=project,
        env=env(FORKPATCH_TEST_PAUSE_AFTER=point),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _, status = os.waitpid(proc.pid, os.WUNTRACED)
    assert os.WIFSTOPPED(status), "forkpatch ended before its pause point"
    return proc


def _reap(proc: subprocess.Popen[bytes]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    os.waitpid(proc.pid, 0)
    proc.returncode = -9


WHILE_LOCKED = (("apply",), ("import", "INCOMING"), ("new", "x"), ("rebase", "--abort"))
RACES = 2  # pairs of imports started together


def test_second_process_is_refused_with_the_holders_pid(project: Path, made: Path) -> None:
    code, _, err = fp_in(project, "import", *map(str, _incoming(made)))
    assert code == 0, err
    holder = _paused(project, "rebase", "--onto", "v1.3.0")
    try:
        for args in WHILE_LOCKED:
            args = tuple(str(_incoming(made)[0]) if a == "INCOMING" else a for a in args)
            before = visible(project)
            got = fp(project, *args)
            assert got.returncode == 1, got.stderr
            assert f"another forkpatch (pid {holder.pid}) is running" in got.stderr, got.stderr
            assert "`forkpatch rebase`" in got.stderr, got.stderr
            assert "tip: wait for it to finish" in got.stderr
            assert visible(project) == before
    finally:
        _reap(holder)
    # kill -9 of the holder: the flock went with it; the next command explains the rebase.
    _, _, err = fp_in(project, "status")
    assert "forkpatch rebase --continue" in err and "--abort" in err
    code, _, err = fp_in(project, "rebase", "--abort")
    assert code == 0, err


def test_lock_file_with_a_dead_pid_is_not_a_lock(project: Path) -> None:
    lock = project / ".forkpatch" / "lock"
    lock.parent.mkdir(exist_ok=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    lock.write_text(f"{dead.pid} apply\n")
    code, _, err = fp_in(project, "apply")
    assert code == 0, err
    assert lock.read_text() == ""  # emptied again when released


def test_racing_processes_never_interleave(project: Path, made: Path) -> None:
    """Pairs of imports started together: each is done whole or refused whole."""
    incoming = _incoming(made)
    code, _, err = fp_in(project, "apply")
    assert code == 0, err
    done: list[str] = []
    for a, b in [(incoming[2 * i], incoming[2 * i + 1]) for i in range(RACES)]:
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "forkpatch", "import", str(f)],
                cwd=project,
                env=env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for f in (a, b)
        ]
        for f, p in zip((a, b), procs, strict=True):
            _, err = p.communicate(timeout=120)
            if p.returncode == 0:
                done.append(f.name)
            else:
                assert (
                    "another forkpatch (pid" in err
                    or "already exists" in err
                    or "does not apply" in err
                ), err
    names = [
        ln.split(":", 1)[1].strip()
        for ln in (project / "series.yaml").read_text().splitlines()
        if ln.startswith("  - name:")
    ]
    files = sorted(p.name for p in (project / "patches").iterdir())
    assert sorted(f"{n}.patch" for n in names) == files  # no orphan, no missing file
    assert len(names) == len(done)
    code, _, err = fp_in(project, "status")
    assert code == 0, err


# ----------------------------------------------------------------------------- the fork moves


def test_base_tag_moved_upstream_is_refused(project: Path, made: Path) -> None:
    fork = project.parent / "fork"
    code, _, err = fp_in(project, "import", *map(str, _incoming(made)))
    assert code == 0, err
    before = visible(project)
    git(fork, "tag", "-f", "-a", "v1.2.1", "-m", "moved", "v1.3.0^{commit}")
    for args in (
        ("status",),
        ("apply",),
        ("build-wheel", "--mode", "overlay", "--base-wheel", "/nonexistent.whl"),
    ):
        code, _, err = fp_in(project, *args)
        assert code == 1, err
        assert "tag 'v1.2.1'" in err and "the tag was moved; nothing was changed" in err, err
        assert visible(project) == before


def test_force_pushed_branch_changes_nothing(project: Path, made: Path) -> None:
    """The fork's main branch is rewritten (force-push): the series follows tags only."""
    fork = project.parent / "fork"
    code, _, err = fp_in(project, "import", *map(str, _incoming(made)))
    assert code == 0, err
    before = visible(project)
    code, status_before, _ = fp_in(project, "status", "--json")
    git(fork, "checkout", "-q", "main")
    git(fork, "reset", "-q", "--hard", "v1.2.0")
    (fork / "README.md").write_text("rewritten history\n")
    git(fork, "commit", "-q", "-a", "-m", "force-pushed")
    git(fork, "gc", "-q", "--prune=now")
    code, status_after, err = fp_in(project, "status", "--json")
    assert code == 0, err
    assert status_after == status_before and visible(project) == before
    code, _, err = fp_in(project, "check", "--onto", "v1.3.0")
    assert code in (0, 3), err


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP server on 127.0.0.1 that accepts connections and never answers."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(32)
    conns: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conns.append(srv.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join()
    for c in conns:
        c.close()
    srv.close()


def test_unreachable_fork_url_fails_fast(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/1Cat-vLLM.git"
    start = time.monotonic()
    got = fp(tmp_path, "init", "--fork-url", url, "--base", "v1.2.1")
    took = time.monotonic() - start
    assert got.returncode == 1, got.stderr
    assert f"cannot list tags of the fork at {url}" in got.stderr, got.stderr
    assert "Traceback" not in got.stderr and took < 30
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written


def test_slow_fork_url_wait_is_bounded(tmp_path: Path, silent_server: int) -> None:
    url = f"http://127.0.0.1:{silent_server}/1Cat-vLLM.git"
    start = time.monotonic()
    got = fp(
        tmp_path,
        "init",
        "--fork-url",
        url,
        "--base",
        "v1.2.1",
        extra_env={"FORKPATCH_FETCH_TIMEOUT": "3"},
        timeout=60,
    )
    took = time.monotonic() - start
    assert got.returncode == 1, got.stderr
    assert "did not finish within 3s" in got.stderr, got.stderr
    assert took < 3 + 20, took
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_fork_unreachable_after_init_keeps_working_offline(
    project: Path, made: Path, silent_server: int
) -> None:
    """The store has the base: status works; a rebase onto a tag it must fetch fails
    clearly within the timeout and changes nothing."""
    code, _, err = fp_in(project, "import", *map(str, _incoming(made)))
    assert code == 0, err
    series = project / "series.yaml"
    url = f"http://127.0.0.1:{silent_server}/1Cat-vLLM.git"
    series.write_text(series.read_text().replace(str(project.parent / "fork"), url))
    before = visible(project)
    got = fp(project, "status", extra_env={"FORKPATCH_FETCH_TIMEOUT": "3"})
    assert got.returncode == 0, got.stderr
    start = time.monotonic()
    got = fp(project, "rebase", "--onto", "v9.9.9", extra_env={"FORKPATCH_FETCH_TIMEOUT": "3"})
    assert got.returncode == 1 and "did not finish within 3s" in got.stderr, got.stderr
    assert time.monotonic() - start < 25
    assert visible(project) == before
    assert not (project / ".forkpatch" / "rebase").exists()


# ----------------------------------------------------------------- the lock's own race


def _hold(lock: Path, content: bytes) -> int:
    """Another holder of ``lock`` (an open file description of its own) with ``content``."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.ftruncate(fd, 0)
    os.pwrite(fd, content, 0)
    return fd


# The moments a command started together with another one can meet the lock in:
# (record the holder has, what it does 50 ms later, what the loser must see).
LOCK_RACES = {
    "holder still writing its record": (b"", "write", "refused, naming it"),
    "holder ending (record cleared)": (b"", "release", "runs"),
    "holder with no record": (b"", None, "refused"),
    "holder with a garbage record": (b"garbage", None, "refused"),
    "holder with a record cut short": (b"12", None, "refused"),
}


@pytest.mark.parametrize("case", list(LOCK_RACES))
def test_the_lock_never_reports_a_half_written_holder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """Two commands started together (the race `test_racing_processes_never_interleave`
    once lost): the loser must not read an empty or partial record and report an
    "unknown pid", nor refuse a holder that is letting go."""
    from forkpatch import fsutil
    from forkpatch.errors import LockError

    content, then, expect = LOCK_RACES[case]
    monkeypatch.setattr(fsutil, "LOCK_SETTLE_S", 0.5)
    lock = tmp_path / "s" / "lock"
    fd = _hold(lock, content)
    actions = {
        "write": lambda: os.pwrite(fd, f"{os.getpid()} import\n".encode(), 0),
        "release": lambda: fcntl.flock(fd, fcntl.LOCK_UN),
    }
    timer = threading.Timer(0.05, actions[then]) if then else None
    if timer:
        timer.start()
    try:
        if expect == "runs":
            with fsutil.project_lock(lock, command="push") as left:
                assert left is None
                assert lock.read_text() == f"{os.getpid()} push\n"
            return
        with pytest.raises(LockError) as exc, fsutil.project_lock(lock, command="push"):
            pass
        assert "another forkpatch" in exc.value.message
        if expect == "refused, naming it":
            assert f"pid {os.getpid()}" in exc.value.message
            assert "`forkpatch import`" in exc.value.message
    finally:
        if timer:
            timer.join()
        os.close(fd)


RELIABILITY = [
    Row(
        "concurrency",
        "a second forkpatch while one holds the lock (paused mid-rebase)",
        f"{len(WHILE_LOCKED)} commands",
        "each refused, naming the holder's pid and command; nothing changed",
    ),
    Row(
        "concurrency",
        "kill -9 of the lock holder; a lock file naming a dead pid",
        "2 cases",
        "neither blocks the next command; the killed rebase is continued or aborted",
    ),
    Row(
        "concurrency",
        "two imports started together",
        f"{RACES} races",
        "each import done whole or refused whole; series.yaml and patches/ agree",
    ),
    Row(
        "concurrency",
        "the loser of a start-up race reads the lock record while the holder writes it, "
        "after it cleared it, or a record that is garbage",
        f"{len(LOCK_RACES)} cases",
        "it waits up to 1 s for the record (then names the holder's pid and command) or "
        "for the lock (then runs); an unreadable record is still refused, never as "
        "'unknown pid' for a live writer",
    ),
    Row(
        "fork moving",
        "base tag re-pointed upstream",
        "3 commands",
        "status, apply and build-wheel refuse it; nothing changed",
    ),
    Row(
        "fork moving",
        "force-pushed branch, unreachable URL, silent server, fork gone after init",
        "4 cases",
        "unaffected or a clear, bounded error (FORKPATCH_FETCH_TIMEOUT); nothing written",
    ),
]
