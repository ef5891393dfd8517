"""Small filesystem primitives: atomic writes and the project lock."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from forkpatch.errors import LockError


def atomic_write(path: Path, data: bytes, *, mode: int | None = None) -> bool:
    """Write ``data`` to ``path`` via a temporary file and ``rename``.

    Returns False (and touches nothing) when the file already holds exactly
    ``data``: a no-op write must not even change the mtime, so that export and
    refresh are churn-free.
    """
    path = Path(path)
    try:
        if path.read_bytes() == data:
            return False
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        raise
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        elif path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o7777)
        else:
            os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)
    return True


def atomic_write_text(path: Path, text: str) -> bool:
    return atomic_write(path, text.encode("utf-8"))


def _fsync_dir(directory: Path) -> None:
    try:
        dfd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError as exc:
        return exc.errno == errno.EPERM
    return True


@contextlib.contextmanager
def project_lock(lock_path: Path, *, command: str = "forkpatch") -> Iterator[None]:
    """Hold an exclusive lock for the duration of a mutating command.

    The lock is an ``flock`` on ``lock_path``, so a killed process releases
    it automatically (no stale lock can block anyone); the file also records
    the holder's pid and command so that the refusal can name it.
    """
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
            pid_text, _, what = holder.partition(" ")
            who = f"pid {pid_text}" if pid_text.isdigit() else "unknown pid"
            if pid_text.isdigit() and not _pid_alive(int(pid_text)):
                who += ", which is no longer running; its lock is held by a child process"
            raise LockError(
                f"another forkpatch ({who}: {what or 'unknown command'}) is working on this "
                "project",
                tip="wait for it to finish, then run your command again",
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {command}\n".encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
