"""Lock files git leaves while it writes (``index.lock``, a ref's ``.lock``): who holds
one, whether a failed command should wait for it, and the next step when it stays."""

from __future__ import annotations

import os
import re
from pathlib import Path

LOCK_EXISTS = re.compile(r"Unable to create '([^']+\.lock)': File exists")

#: How long a git command waits for a lock file another live process holds.
LOCK_WAIT_S = 10.0


def lock_holders(path: str | Path) -> list[int]:
    """The pids of the processes that have ``path`` (a git lock file) open: git keeps
    a lock file open for as long as it holds it. Read from /proc (empty where there
    is none, or for processes of other users, which cannot be read)."""
    target = os.path.abspath(path)
    found: list[int] = []
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return found
    for pid in pids:
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"{fd_dir}/{fd}") == target:
                    found.append(pid)
                    break
            except OSError:
                continue
    return found


def held_lock(stderr: bytes) -> str | None:
    """The lock file git failed on when a live process holds it (None otherwise)."""
    m = LOCK_EXISTS.search(stderr.decode("utf-8", "replace"))
    if m is None:
        return None
    path = m.group(1)
    if not os.path.exists(path) or lock_holders(path):
        return path  # held, or released meanwhile: try again
    # No holder found: a stale lock, unless its holder let go during the scan (the
    # file is gone now; /proc shows an unlinked file as "(deleted)", not its path).
    return None if os.path.exists(path) else path


def _command_of(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            raw = fh.read(400)
    except OSError:
        return "?"
    return " ".join(p.decode("utf-8", "replace") for p in raw.split(b"\0") if p)[:120]


def lock_tip(stderr: str) -> str | None:
    """The next step when git found a lock file: wait for a live holder (named), remove
    a lock no process holds (left by a killed git)."""
    m = LOCK_EXISTS.search(stderr)
    if m is None:
        return None
    path = m.group(1)
    holders = lock_holders(path) if os.path.exists(path) else []
    if holders:
        who = ", ".join(f"pid {pid} ({_command_of(pid)})" for pid in holders[:3])
        return (
            f"{path} is held by {who}, still running after {LOCK_WAIT_S:.0f}s: let it "
            "finish (do not remove the lock), then run the command again"
        )
    if not os.path.exists(path):
        return f"{path} was released meanwhile: run the command again"
    return (
        f"no running process holds {path}: a git process was killed and left it; "
        "remove that file and run the command again"
    )
