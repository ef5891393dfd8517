"""The one runner for external programs other than git (git's calls are git.py's).

Every program forkpatch starts (pip, a venv's python, docker's CLI helpers, the smoke
checks, a team's own check, nvidia-smi) goes through :func:`run`, which gives the
same guarantees whatever the caller:

- **its own session and process group**: the program and everything it starts are
  one group, signalled as one (SIGTERM, then SIGKILL after a grace period) when the
  deadline passes, when forkpatch is interrupted (Ctrl-C), and when the program has
  exited but left children behind. A program that signals its own group (a shell's
  ``kill 0``) reaches only itself, never forkpatch;
- **a deadline**: a :class:`Deadline` shared by every program of one operation (a
  whole smoke run), or a timeout of its own, whichever comes first;
- **bounded output**: stdout and stderr are read as they arrive into a bounded
  tail (:data:`DEFAULT_LIMIT` bytes in memory, or a pair of rotating files on disk
  with ``log_path``); output is never read whole, whatever the program prints;
- **redaction**: secret values of the environment (:func:`forkpatch.redact.env_secrets`
  of forkpatch's and the program's) and the caller's ``secrets`` are hidden in the
  output it returns and in every line it streams;
- **a typed result**: :class:`Finished` (exit code, output, whether it timed out or
  was cut), never a raw ``CompletedProcess``; a program that cannot start raises
  ``OSError`` as ``subprocess`` does.

stdin is ``/dev/null`` unless ``stdin`` bytes are given: a program that waits for
input gets none instead of hanging.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from forkpatch.redact import env_secrets, redact

__all__ = ["DEFAULT_LIMIT", "Deadline", "Finished", "run", "tail"]

#: How many bytes of output are kept (the tail); more is dropped from the front.
DEFAULT_LIMIT = 256 * 1024
#: Seconds between SIGTERM and SIGKILL when a group is ended.
GRACE_S = 2.0
#: How often the loop wakes to check the deadline and call ``tick``.
POLL_S = 0.2
_CHUNK = 64 * 1024


class Deadline:
    """A point in time a whole operation must end by (``None`` seconds: never).

    One deadline is made per operation and handed to each program it runs, so a
    run of several programs keeps the one limit the user gave.
    """

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self._at = None if seconds is None else time.monotonic() + seconds

    def remaining(self) -> float | None:
        """Seconds left (never below 0), or None when there is no deadline."""
        return None if self._at is None else max(0.0, self._at - time.monotonic())

    @property
    def expired(self) -> bool:
        left = self.remaining()
        return left is not None and left <= 0

    def within(self, seconds: float | None) -> Deadline:
        """This deadline or ``seconds`` from now, whichever comes first."""
        if seconds is None:
            return self
        left = self.remaining()
        if left is not None and left <= seconds:
            return self
        return Deadline(seconds)


@dataclass(frozen=True)
class Finished:
    """How a program ended and the tail of what it printed (redacted)."""

    argv: tuple[str, ...]
    #: The exit status; negative: killed by that signal (as ``subprocess`` says it).
    returncode: int
    #: stdout and stderr together, in order (only stdout with ``split_stderr``).
    output: str
    #: stderr, with ``split_stderr``; else empty.
    errors: str
    #: The deadline passed and the group was ended.
    timed_out: bool
    #: More was printed than was kept (``output`` is the tail).
    truncated: bool
    #: Bytes the program printed in all.
    total_bytes: int
    duration_s: float
    #: The seconds it was given (its timeout, or what was left of the deadline).
    timeout_s: float | None = None

    @property
    def stdout(self) -> str:
        """The output (as ``CompletedProcess.stdout`` was for callers that read it)."""
        return self.output

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines of the output."""
        return tail(self.output, lines)

    def ended(self) -> str:
        """How it ended, in words ("exit status 3", "timed out after 10 s")."""
        if self.timed_out:
            return f"timed out after {self.timeout_s:.0f} s" if self.timeout_s else "timed out"
        if self.returncode < 0:
            try:
                name = signal.Signals(-self.returncode).name
            except ValueError:
                name = f"signal {-self.returncode}"
            return f"killed by {name}"
        return f"exit status {self.returncode}"


def tail(text: str, lines: int = 30) -> str:
    """The last ``lines`` lines of ``text``."""
    return "\n".join(text.rstrip("\n").splitlines()[-lines:])


class _MemoryTail:
    """The last ``limit`` bytes written, in memory."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.total = 0
        self._buf = bytearray()

    def write(self, data: bytes) -> None:
        self.total += len(data)
        self._buf += data
        if len(self._buf) > 2 * self.limit:
            del self._buf[: len(self._buf) - self.limit]

    def close(self) -> None:
        pass

    def data(self) -> bytes:
        return bytes(self._buf[-self.limit :])


class _DiskTail:
    """The last ``limit`` bytes written, on disk: ``path`` and ``path.1``, each at most
    ``limit`` bytes (the current file is moved to ``.1`` when full)."""

    def __init__(self, path: Path, limit: int) -> None:
        self.path, self.old, self.limit = path, path.with_name(path.name + ".1"), limit
        self.total = 0
        self._size = 0
        self.old.unlink(missing_ok=True)
        self._file = open(path, "wb")  # noqa: SIM115 - closed in close()

    def write(self, data: bytes) -> None:
        self.total += len(data)
        while data:
            room = self.limit - self._size
            if room <= 0:
                self._file.close()
                os.replace(self.path, self.old)
                self._file = open(self.path, "wb")  # noqa: SIM115 - closed in close()
                self._size, room = 0, self.limit
            self._file.write(data[:room])
            self._size += min(room, len(data))
            data = data[room:]
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def data(self) -> bytes:
        old = self.old.read_bytes() if self.old.is_file() else b""
        return (old + self.path.read_bytes())[-self.limit :]


def _text(sink: _MemoryTail | _DiskTail, secrets: Sequence[str]) -> tuple[str, bool]:
    data = sink.data()
    truncated = sink.total > len(data)
    if truncated:
        # Start at a line: a cut through a secret would show the half that is left.
        cut = data.find(b"\n")
        data = data[cut + 1 :] if cut >= 0 else b""
    return redact(data.decode("utf-8", "replace"), secrets), truncated


def _end_group(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM the program's group, then SIGKILL what is left of it after ``grace_s``."""
    pgid = proc.pid  # the leader of its own session: its pid is the group's id
    try:
        os.killpg(pgid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    end = time.monotonic() + grace_s
    while time.monotonic() < end:
        proc.poll()  # the leader, reaped once it ends (a zombie still counts)
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.02)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


class _Lines:
    """Splits chunks into whole lines for a streaming callback (redacted, decoded)."""

    def __init__(self, emit: Callable[[str], None], secrets: Sequence[str]) -> None:
        self.emit, self.secrets, self._rest = emit, secrets, b""

    def feed(self, data: bytes) -> None:
        data = self._rest + data
        *whole, self._rest = data.split(b"\n")
        while len(self._rest) > _CHUNK:  # a line without end: shown in pieces
            whole.append(self._rest[:_CHUNK])
            self._rest = self._rest[_CHUNK:]
        for line in whole:
            for at in range(0, max(len(line), 1), _CHUNK):  # a long line: in pieces too
                piece = line[at : at + _CHUNK]
                self.emit(redact(piece.decode("utf-8", "replace"), self.secrets) + "\n")

    def flush(self) -> None:
        if self._rest:
            self.emit(redact(self._rest.decode("utf-8", "replace"), self.secrets) + "\n")
            self._rest = b""


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    deadline: Deadline | None = None,
    secrets: Iterable[str | None] = (),
    limit: int = DEFAULT_LIMIT,
    split_stderr: bool = False,
    log_path: Path | None = None,
    on_line: Callable[[str], None] | None = None,
    tick: Callable[[], None] | None = None,
    stdin: bytes | None = None,
    inherit: bool = False,
    grace_s: float = GRACE_S,
) -> Finished:
    """Run ``argv`` to its end (or its deadline) in a session of its own.

    ``env`` is the program's whole environment (None: forkpatch's). ``timeout`` and
    ``deadline``: whichever comes first ends it (its group is ended, ``timed_out``).
    ``log_path``: the output's tail is kept on disk there (and ``.1`` beside it)
    rather than in memory. ``on_line``: each line of output, redacted, as it
    arrives. ``tick``: called every :data:`POLL_S` seconds while it runs (progress).
    ``inherit``: the program writes to forkpatch's own stdout and stderr (nothing is
    captured). Raises OSError when it cannot start.
    """
    args = [os.fspath(a) for a in argv]
    limit_at = (deadline or Deadline(None)).within(timeout)
    budget = limit_at.remaining()
    known = [s for s in secrets if s]
    known += env_secrets(os.environ)
    if env is not None:
        known += env_secrets(env)
    pipe = None if inherit else subprocess.PIPE
    t0 = time.monotonic()
    proc = subprocess.Popen(
        args,
        cwd=cwd,
        env=dict(env) if env is not None else None,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=pipe,
        stderr=None if inherit else (subprocess.PIPE if split_stderr else subprocess.STDOUT),
        start_new_session=True,
    )
    out_sink: _MemoryTail | _DiskTail = (
        _DiskTail(log_path, limit) if log_path is not None else _MemoryTail(limit)
    )
    err_sink = _MemoryTail(limit)
    lines = _Lines(on_line, known) if on_line is not None else None
    timed_out = False
    sel = selectors.DefaultSelector()
    try:
        if stdin is not None and proc.stdin is not None:
            try:
                proc.stdin.write(stdin)
                proc.stdin.close()
            except BrokenPipeError:
                pass
        for stream, sink in ((proc.stdout, out_sink), (proc.stderr, err_sink)):
            if stream is not None:
                os.set_blocking(stream.fileno(), False)
                sel.register(stream, selectors.EVENT_READ, sink)
        leader_done = False
        drain_until = 0.0
        while True:
            left = limit_at.remaining()
            wait = POLL_S if left is None else min(POLL_S, left)
            if sel.get_map():
                for key, _ in sel.select(wait):
                    try:
                        chunk = os.read(key.fd, _CHUNK)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        sel.unregister(key.fileobj)
                        continue
                    key.data.write(chunk)
                    if lines is not None and key.data is out_sink:
                        lines.feed(chunk)
            else:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=wait)
            if not leader_done and proc.poll() is not None:
                leader_done = True
                # Whatever it left running holds our pipes and outlives its program.
                _end_group(proc, grace_s)
                drain_until = time.monotonic() + 1.0
            elif not leader_done and limit_at.expired:
                timed_out = True
                _end_group(proc, grace_s)
                proc.wait()
                leader_done = True
                drain_until = time.monotonic() + 1.0
            if leader_done and (not sel.get_map() or time.monotonic() > drain_until):
                break  # past drain_until: a process that left the group holds a pipe
            if tick is not None:
                tick()
    except BaseException:
        _end_group(proc, grace_s)
        proc.wait()
        raise
    finally:
        sel.close()
        for stream in (proc.stdout, proc.stderr, proc.stdin):
            if stream is not None:
                stream.close()
        out_sink.close()
        if lines is not None:
            lines.flush()
    output, cut = _text(out_sink, known)
    errors, err_cut = _text(err_sink, known)
    return Finished(
        argv=tuple(args),
        returncode=proc.returncode,
        output=output,
        errors=errors,
        timed_out=timed_out,
        truncated=cut or err_cut,
        total_bytes=out_sink.total + err_sink.total,
        duration_s=time.monotonic() - t0,
        timeout_s=budget,
    )
