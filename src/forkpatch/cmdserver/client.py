"""The caller's side of the command server: hand this command to a server, or say it
cannot (None), in which case the caller runs it in its own process.

Built-in modules only until a server must be started (not even contextlib). Whatever
goes wrong before a worker holds the command (no server, a stale one, a socket that
refuses, a standard stream that is closed) ends in None, and the command then runs as
it always did; the first call starts a server for the next ones.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # no stubs: the C half of signal
import _socket  # the C half of socket (socket itself loads enum, selectors)
import os
import sys

from forkpatch.cmdserver import wire

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import FrameType

# Read here as forkpatch.settings reads a boolean (whose import alone takes longer than
# this whole client); a value that does not read leaves the command to run here, where
# settings.check_environment reports it.
SETTING = "FORKPATCH_SERVER"
_OFF = ("0", "false", "no", "off")
_ON = ("", "1", "true", "yes", "on")
# The signals a terminal or a supervisor sends to end a command: forwarded to the worker.
_FORWARDED = (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP, _signal.SIGQUIT)
_LOST = (
    b"forkpatch: the command server ended while it ran this command; whether the command "
    b"finished is not known\n  tip: `forkpatch status` shows the project as it is now\n"
)


def served() -> int | None:
    """The exit status of this process's command, run by a command server; None when no
    server ran it (nothing was started: run it here)."""
    if sys.platform != "linux":
        return None
    word = os.environ.get(SETTING, "").strip().lower()
    if word in _OFF or word not in _ON:  # a wrong value: the command's own run says so
        return None
    directory = wire.runtime_dir(create=True)
    if directory is None:
        return None
    server_key = wire.key()
    try:
        cwd = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        # The socket by its name in the directory (a socket's path is limited to 107
        # bytes, a TMPDIR is not), then back to where the command was called from.
        os.chdir(directory)
        try:
            sock.connect(wire.socket_name(server_key))
        except (FileNotFoundError, ConnectionRefusedError):
            if "server" not in sys.argv[1:]:  # `forkpatch server stop` leaves none behind
                _start_server(directory, server_key)
            return None
        finally:
            os.fchdir(cwd)
        return _converse(sock, server_key, directory, cwd)
    except OSError:
        return None
    finally:
        sock.close()
        os.close(cwd)


def _converse(sock: _socket.socket, server_key: str, directory: str, cwd: int) -> int | None:
    fds = b"".join(fd.to_bytes(4, sys.byteorder) for fd in (cwd, 0, 1, 2))
    message = _request(server_key)
    sent = sock.sendmsg([message], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fds)])
    if sent < len(message):
        sock.sendall(message[sent:])
    reader = _Lines(sock)
    answer = reader.line()
    if answer != b"started":
        if answer == b"stale":
            _start_server(directory, server_key)
        return None

    # From "go" on the command may run: every signal that would end it here goes to it.
    # (One that comes before is this process's to end it: the worker has not begun.)
    def forward(signum: int, frame: FrameType | None) -> None:
        try:  # noqa: SIM105  (no contextlib: see the module's description)
            sock.sendall(b"kill %d\n" % signum)
        except OSError:
            pass

    for signum in _FORWARDED:
        _signal.signal(signum, forward)
    sock.sendall(b"go\n")
    answer = reader.line()
    word, _, number = answer.partition(b" ")
    if word == b"exit" and number.isdigit():
        return int(number)
    if word == b"signal" and number.isdigit():
        return _die_by(int(number))
    os.write(2, _LOST)
    return 1


def _die_by(signum: int) -> int:
    """End this process as the worker ended: by the same signal (a shell reports 128+N)."""
    try:  # noqa: SIM105
        _signal.signal(signum, _signal.SIG_DFL)
    except (OSError, ValueError):
        pass  # SIGKILL's and SIGSTOP's cannot be set (nor caught)
    try:  # noqa: SIM105
        os.kill(os.getpid(), signum)
    except OSError:
        pass
    return 128 + signum


def _request(server_key: str) -> bytes:
    umask = os.umask(0o022)
    os.umask(umask)
    try:
        affinity = sorted(os.sched_getaffinity(0))
    except OSError:
        affinity = []
    streams = []
    for name in wire.STREAMS:
        s = getattr(sys, name)
        streams.append(
            (
                getattr(s, "encoding", None) or "utf-8",
                getattr(s, "errors", None) or "strict",
                bool(getattr(s, "line_buffering", False)),
                bool(getattr(s, "write_through", False)),
            )
        )
    argv = [os.fsencode(arg) for arg in sys.argv]
    environ = [k + b"=" + v for k, v in os.environb.items()]
    return wire.encode_request(server_key, umask, _has_terminal(), affinity, streams, argv, environ)


def _has_terminal() -> bool:
    """Whether this process has a controlling terminal (one ssh could ask on)."""
    try:
        fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return False
    os.close(fd)
    return True


class _Lines:
    """The server's answers, one line at a time (b"" at the end of the connection)."""

    def __init__(self, sock: _socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def line(self) -> bytes:
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(256)
            if not chunk:
                return b""
            self.buffer += chunk
            if len(self.buffer) > 4096:
                return b""
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line


def _start_server(directory: str, server_key: str) -> None:
    """Start this installation's server in the background, unless one is starting."""
    import fcntl
    import subprocess

    try:
        fd = os.open(wire.lock_path(directory, server_key), os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)  # free: no server holds it; the new one takes it
    except OSError:
        return  # a server holds it (starting, or about to bind)
    finally:
        os.close(fd)
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "XDG_RUNTIME_DIR")
    env = {k: v for k, v in os.environ.items() if k in keep or k.startswith("PYTHON")}
    code = (
        "import sys; sys.path[:] = sys.argv[3:]; "
        "from forkpatch.cmdserver.server import main; main(sys.argv[1], sys.argv[2])"
    )
    # The interpreter's flags as given to this process (-B, -X, -W ...): part of the key.
    flags: list[str] = getattr(subprocess, "_args_from_interpreter_flags", list)()
    argv = [sys.executable, *flags, "-c", code]
    try:
        subprocess.Popen(
            [*argv, directory, server_key, *sys.path],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd="/",
            env=env,
            start_new_session=True,
        )
    except OSError:
        return
