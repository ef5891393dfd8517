"""Processes as the tests see them from outside."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


def alive(pid: int) -> bool:
    """Whether ``pid`` runs: a zombie whose parent (init or a subreaper) has not reaped
    it yet is gone too."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


_HOLD = """
import os, sys
fd = os.open(sys.argv[1], os.O_CREAT | os.O_EXCL | os.O_WRONLY)
print("held", flush=True)
sys.stdin.readline()
if sys.argv[2] == "release":
    os.unlink(sys.argv[1])
os.close(fd)
"""


class LockHolder:
    """A process that holds ``path`` open as git holds a lock file, until told to let
    go: ``release()`` removes the file first, as git does when it is done; ``kill()``
    leaves it behind, as a killed git does."""

    def __init__(self, path: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _HOLD, str(path), "release"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline() == b"held\n"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def release(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"go\n")
        self.proc.stdin.close()
        self.proc.wait(timeout=30)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


def killed_at(project: Path, point: str, *args: str) -> None:
    """``python -m forkpatch ARGS`` in ``project``, stopped at the test hook's ``point``
    (FORKPATCH_TEST_PAUSE_AFTER: it SIGSTOPs itself there), then SIGKILLed."""
    env = {**os.environ, "FORKPATCH_TEST_PAUSE_AFTER": point}
    env.pop("FORKPATCH_FORK_REPO", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "forkpatch", *args],
        cwd=project,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        _, status = os.waitpid(proc.pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status), f"forkpatch ended before {point}: " + (
            proc.stderr.read().decode() if proc.stderr else ""
        )
        os.kill(proc.pid, signal.SIGKILL)
        os.waitpid(proc.pid, 0)
    finally:
        proc.returncode = -9
        if proc.stderr:
            proc.stderr.close()
