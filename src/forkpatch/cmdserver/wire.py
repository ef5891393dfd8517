"""Where a command server listens, which one serves this installation, and the messages.

Built-in modules only: the client imports this on every ``forkpatch`` call.

A server is found by its key, a hash of everything that decides what code a command
runs: the interpreter, its version and flags, ``sys.path`` and where forkpatch itself
was imported from, and the file-system encoding (how argument bytes become text). Two
checkouts, two virtual environments or two Pythons never share one. The sockets live
in ``$XDG_RUNTIME_DIR/forkpatch-<uid>`` (else ``$TMPDIR`` or ``/tmp``), a directory
only its owner may enter; a directory that is not that (another owner, open to others,
a symlink) is not used, and the command runs in its own process.

A request is one message: its length (ten ASCII digits and a new line), then fields
separated by NUL (no argument, path or environment entry can hold one), with four file
descriptors alongside (the working directory, stdin, stdout, stderr). The server
answers in lines: ``started`` (a worker holds the command; the client says ``go`` once
it forwards signals), then ``exit N`` or ``signal N``; or, before any worker,
``stale`` (its code changed on disk: it is stopping), ``busy`` or ``refused WHY``. The
client sends ``kill N`` for each signal it receives while the command runs.
"""

from __future__ import annotations

import os
import sys

MAGIC = b"forkpatch-request-1"
MAX_REQUEST = 8 << 20  # 8 MiB: arguments and environment (Linux allows 2 MiB of both)
HEADER = 11  # ten digits and a new line
STDIO_FIELDS = 4  # per stream: encoding, errors, line buffering, write-through
_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3

# The standard streams' settings a worker copies (the attributes of io.TextIOWrapper).
STREAMS = ("stdin", "stdout", "stderr")


def runtime_dir(*, create: bool) -> str | None:
    """The directory of this user's command-server sockets, made when ``create`` and
    missing; None when it is missing or is not a directory only this user can enter."""
    base = os.environ.get("XDG_RUNTIME_DIR") or os.environ.get("TMPDIR") or "/tmp"
    if not base.startswith("/"):
        base = "/tmp"
    uid = os.getuid()
    path = f"{base.rstrip('/') or ''}/forkpatch-{uid}"
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if not create:
            return None
        try:
            os.mkdir(path, 0o700)
            st = os.lstat(path)
        except OSError:
            return None
    except OSError:
        return None
    is_dir = (st.st_mode & 0o170000) == 0o040000
    if not is_dir or st.st_uid != uid or st.st_mode & 0o077:
        return None
    return path


def _fnv(data: bytes) -> str:
    h = _FNV_OFFSET
    for byte in data:
        h = ((h ^ byte) * _FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def package_dir() -> str:
    """Where this process imported forkpatch from (the folder of its modules)."""
    return os.path.dirname(os.path.dirname(__file__))


def key() -> str:
    """The key of the server that may run this process's commands (see the module's
    description)."""
    parts = (
        sys.executable,
        sys.version,
        repr(tuple(sys.flags)),
        repr(sorted(sys._xoptions.items())),  # noqa: SLF001  (-X options: documented, CPython's)
        repr(sys.warnoptions),
        "\0".join(sys.path),
        os.path.realpath(package_dir()),
        sys.getfilesystemencoding(),
    )
    return _fnv("\n".join(parts).encode("utf-8", "surrogateescape"))


def socket_name(server_key: str) -> str:
    """The socket's name in the runtime directory (client and server use it relative to
    that directory: a socket's path is limited to 107 bytes, a TMPDIR is not)."""
    return f"{server_key}.sock"


def socket_path(directory: str, server_key: str) -> str:
    return f"{directory}/{socket_name(server_key)}"


def lock_path(directory: str, server_key: str) -> str:
    """The file a starting or running server holds locked (one server per key)."""
    return f"{directory}/{server_key}.lock"


def encode_request(
    server_key: str,
    umask: int,
    terminal: bool,
    affinity: list[int],
    streams: list[tuple[str, str, bool, bool]],
    argv: list[bytes],
    environ: list[bytes],
) -> bytes:
    fields = [MAGIC, server_key.encode("ascii"), b"%d" % umask, b"1" if terminal else b"0"]
    fields.append(b",".join(b"%d" % cpu for cpu in affinity))
    for encoding, errors, line_buffering, write_through in streams:
        fields += [encoding.encode("ascii"), errors.encode("ascii")]
        fields += [b"1" if line_buffering else b"0", b"1" if write_through else b"0"]
    fields.append(b"%d" % len(argv))
    fields += argv
    fields += environ
    payload = b"\0".join(fields)
    return b"%010d\n" % len(payload) + payload


class Request:
    """A request as the server reads it (:func:`decode_request`)."""

    __slots__ = ("affinity", "argv", "environ", "key", "streams", "terminal", "umask")

    def __init__(
        self,
        key: str,
        umask: int,
        terminal: bool,
        affinity: list[int],
        streams: list[tuple[str, str, bool, bool]],
        argv: list[bytes],
        environ: list[tuple[bytes, bytes]],
    ) -> None:
        self.key = key
        self.umask = umask
        self.terminal = terminal
        self.affinity = affinity
        self.streams = streams
        self.argv = argv
        self.environ = environ


class BadRequest(ValueError):
    """A request that does not read; its message says what."""


def payload_length(header: bytes) -> int:
    if len(header) != HEADER or header[-1:] != b"\n" or not header[:-1].isdigit():
        raise BadRequest("no request header")
    n = int(header[:-1])
    if n > MAX_REQUEST:
        raise BadRequest(f"a request of {n} bytes (at most {MAX_REQUEST})")
    return n


def decode_request(payload: bytes) -> Request:
    fields = payload.split(b"\0")
    fixed = 5 + STDIO_FIELDS * len(STREAMS) + 1
    if len(fields) < fixed or fields[0] != MAGIC:
        raise BadRequest("not a forkpatch request")
    try:
        server_key = fields[1].decode("ascii")
        umask = int(fields[2])
        terminal = fields[3] == b"1"
        affinity = [int(cpu) for cpu in fields[4].split(b",")] if fields[4] else []
        streams = []
        for i in range(len(STREAMS)):
            enc, err, lb, wt = fields[5 + STDIO_FIELDS * i : 5 + STDIO_FIELDS * (i + 1)]
            streams.append((enc.decode("ascii"), err.decode("ascii"), lb == b"1", wt == b"1"))
        argc = int(fields[fixed - 1])
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadRequest(f"a field does not read: {exc}") from None
    if not 0 <= umask <= 0o777 or not 1 <= argc <= len(fields) - fixed:
        raise BadRequest("a field is out of range")
    argv = fields[fixed : fixed + argc]
    environ = []
    for entry in fields[fixed + argc :]:
        name, eq, value = entry.partition(b"=")
        if not eq or not name:
            raise BadRequest("an environment entry without a name")
        environ.append((name, value))
    return Request(server_key, umask, terminal, affinity, streams, argv, environ)
