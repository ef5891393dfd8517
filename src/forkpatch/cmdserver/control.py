"""``forkpatch server``: whether this installation's command server runs, and stopping it."""

from __future__ import annotations

import fcntl
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from forkpatch.cmdserver import wire
from forkpatch.errors import StateError

STOP_WAIT_S = 10.0


@dataclass(frozen=True)
class Running:
    """A server that holds its lock: its pid and its socket."""

    pid: int
    socket: Path
    key: str


def running(*, every: bool = False) -> list[Running]:
    """This installation's server (every one of this user's with ``every``), if it runs."""
    directory = wire.runtime_dir(create=False)
    if directory is None:
        return []
    keys = [wire.key()]
    if every:
        keys = sorted(p.stem for p in Path(directory).glob("*.lock"))
    out = []
    for key in keys:
        pid = _holder(wire.lock_path(directory, key))
        if pid is not None:
            out.append(Running(pid, Path(wire.socket_path(directory, key)), key))
    return out


def _holder(lock: str) -> int | None:
    """The pid written in a server's lock file while a server holds it locked."""
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            text = os.read(fd, 32).decode("ascii", "replace").strip()
            return int(text) if text.isdigit() else None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None  # nobody holds it: no server
    finally:
        os.close(fd)


def stop(servers: list[Running]) -> None:
    """Ask each server to stop (it finishes the commands it runs first) and wait until it
    lets go of its lock."""
    for server in servers:
        try:
            os.kill(server.pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
    deadline = time.monotonic() + STOP_WAIT_S
    directory = wire.runtime_dir(create=False)
    for server in servers:
        while directory is not None and _holder(wire.lock_path(directory, server.key)):
            if time.monotonic() > deadline:
                raise StateError(
                    f"the command server (pid {server.pid}) did not stop within "
                    f"{STOP_WAIT_S:.0f} s",
                    tip=f"it may be finishing a long command; `kill {server.pid}` again later",
                )
            time.sleep(0.02)
