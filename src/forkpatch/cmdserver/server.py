"""The command server and its workers (see the package's description).

The server is one thread: a ``select`` loop over its listening socket, the connections
of the commands its workers run, and a wake-up pipe for SIGCHLD and SIGTERM. For each
request it checks the caller (the same user) and the key, hands it to the worker it
forked ahead while nothing ran (or forks one), checks its own code while the worker
sets itself up (every module file it imported, as it was
when it started: a changed one and it ends the worker, answers ``stale`` and stops),
and reports the end of a worker that died to the caller. It stops after
:data:`IDLE_S` without a command, when its socket is removed or replaced, or on
SIGTERM; the workers it runs are reported first.

A worker takes the caller's standard streams, working directory, environment,
arguments, umask and CPU affinity, waits for the caller's ``go`` (from then on the
caller forwards its signals), runs :func:`forkpatch.entry.run_here` as the caller's
own process would have, closes what it holds, tells the caller the status itself and
exits with it.
"""

from __future__ import annotations

import ast
import atexit
import contextlib
import errno
import fcntl
import gc
import io
import os
import select
import signal
import socket
import struct
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from forkpatch import cmdserver
from forkpatch.cmdserver import wire

IDLE_S = 900.0  # a server with no command for 15 minutes stops
WAKE_S = 30.0  # how often an idle server looks at its socket and the clock
MAX_WORKERS = 64
READ_TIMEOUT_S = 5.0  # a request is sent at once: one slower than this is dropped
_FORWARDABLE = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT})
_STARTING = b"forkpatch: interrupted while starting; nothing was changed\n"
# Third-party modules worth importing ahead of the commands that use them; the smoke
# path's (docker, its HTTP stack) load in the worker that needs them.
_AHEAD = ("click", "pygit2", "yaml", "unidiff", "packaging")
_NOT_AHEAD = ("forkpatch.__main__", "forkpatch.smoke.incheck", "forkpatch.cmdserver")


def main(directory: str, server_key: str) -> None:
    """Serve this installation's commands (the arguments the client starts it with)."""
    os.umask(0o077)
    if wire.runtime_dir(create=False) != directory or wire.key() != server_key:
        return  # not the place or the code the client asked for
    lock = os.open(wire.lock_path(directory, server_key), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return  # another server of this key is starting or running
    os.ftruncate(lock, 0)
    os.write(lock, b"%d\n" % os.getpid())  # for `forkpatch server`
    _import_ahead(Path(wire.package_dir()))
    watched = _module_files()
    _freeze()
    os.chdir(directory)  # the socket by its name there (see wire.socket_name)
    path = wire.socket_name(server_key)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # a dead server's: the lock says no live one holds it
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(128)
    Server(listener, path, server_key, lock, watched).run()


def _import_ahead(package: Path) -> None:
    """Import every forkpatch module a command may use, and the standard-library and
    listed third-party modules they import lazily (inside a function)."""
    names: set[str] = set(_AHEAD)
    for source in sorted(package.rglob("*.py")):
        parts = list(source.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        module = ".".join(parts)
        if any(module == n or module.startswith(n + ".") for n in _NOT_AHEAD):
            continue
        names.add(module)
        with contextlib.suppress(SyntaxError, OSError, UnicodeDecodeError):
            tree = ast.parse(source.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    found = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                    found = [node.module]
                else:
                    continue
                names.update(n for n in found if n.split(".")[0] in sys.stdlib_module_names)
    for name in sorted(names):
        with contextlib.suppress(Exception):
            __import__(name)


def _freeze() -> None:
    """Move every object the server holds out of the collector's reach.

    A worker shares the server's memory until it writes a page. A full collection in
    the worker walks every object the server imported, writing each one's header: it
    copies nearly all of the server's pages (36 ms on 48 MB, more than the command it
    runs). Frozen objects are never walked; the worker's own are collected as usual.
    """
    gc.collect()
    gc.freeze()


def _module_files() -> dict[str, tuple[int, int, int]]:
    """Each imported module's file and the interpreter, with what says it changed."""
    files = {sys.executable}
    for module in list(sys.modules.values()):
        f = getattr(module, "__file__", None)
        if isinstance(f, str):
            files.add(f)
    out = {}
    for f in files:
        seen = _signature(f)
        if seen is not None:
            out[f] = seen
    return out


def _signature(path: str) -> tuple[int, int, int] | None:
    """What says a file changed: its modification time, size and inode (None: gone)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def _changed(watched: dict[str, tuple[int, int, int]]) -> bool:
    return any(_signature(f) != seen for f, seen in watched.items())


class _Job:
    """A command a worker runs, and the caller's connection that waits for its end."""

    def __init__(self, conn: socket.socket, pid: int, go: int) -> None:
        self.conn = conn
        self.pid = pid
        self.go: int | None = go  # the write end of the worker's "go" pipe, until sent
        self.buffer = b""
        self.open = True  # the caller's connection, until it ends


class _Spare:
    """A worker forked ahead, waiting for its request on ``channel``."""

    def __init__(self, pid: int, channel: socket.socket) -> None:
        self.pid = pid
        self.channel = channel

    def end(self) -> None:
        """It is not to run anything: its end of the channel closes (it reads that and
        exits), and it is killed, to be sure."""
        self.channel.close()
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGKILL)


class Server:
    def __init__(
        self,
        listener: socket.socket,
        path: str,
        server_key: str,
        lock: int,
        watched: dict[str, tuple[int, int, int]],
    ) -> None:
        self.listener: socket.socket | None = listener
        self.path = path
        self.inode = os.stat(path).st_ino
        self.key = server_key
        self.lock: int | None = lock
        self.watched = watched
        self.jobs: dict[int, _Job] = {}  # by pid
        self.last = time.monotonic()
        self.stopping = False
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.spare: _Spare | None = None  # the next command's worker, forked ahead

    def run(self) -> None:
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        signal.signal(signal.SIGTERM, self._asked_to_stop)
        for signum in (signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)
        try:
            while self.listener is not None or self.jobs:
                self._step()
        finally:
            self.stop()

    def _asked_to_stop(self, signum: int, frame: object) -> None:
        self.stopping = True  # the loop stops after its select (which this woke)

    def stop(self) -> None:
        """Take no more commands (the ones running are still reported)."""
        if self.listener is not None:
            self.listener.close()
            self.listener = None
            with contextlib.suppress(OSError):
                if os.stat(self.path).st_ino == self.inode:
                    os.unlink(self.path)
        if self.lock is not None:
            os.close(self.lock)  # a new server may start while these jobs end
            self.lock = None
        self._drop_spare()

    def _step(self) -> None:
        if not self.jobs and self.spare is None and self.listener is not None:
            self._fork_spare()  # while nothing runs, for the next command
        watch: list[int] = [self.wake_r] + [j.conn.fileno() for j in self.jobs.values() if j.open]
        if self.listener is not None:
            watch.append(self.listener.fileno())
        ready, _, _ = select.select(watch, [], [], WAKE_S)
        if self.wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                while os.read(self.wake_r, 512):
                    pass
        self._reap()
        for job in list(self.jobs.values()):
            if job.open and job.conn.fileno() in ready:
                self._hear(job)
        if self.listener is not None and self.listener.fileno() in ready:
            with contextlib.suppress(BlockingIOError, InterruptedError, ConnectionError):
                conn, _ = self.listener.accept()
                self._take(conn)
        self._look_around()

    def _look_around(self) -> None:
        if self.listener is None:
            return
        try:
            moved = os.stat(self.path).st_ino != self.inode
        except OSError:
            moved = True
        idle = not self.jobs and time.monotonic() - self.last > IDLE_S
        if moved or idle or self.stopping:
            self.stop()

    # ------------------------------------------------------------- one request

    def _take(self, conn: socket.socket) -> None:
        self.last = time.monotonic()
        fds: list[int] = []
        try:
            conn.settimeout(READ_TIMEOUT_S)
            request, raw = self._read(conn, fds)
            answer = self._refusal(conn, request, fds)
            if answer is not None:
                with contextlib.suppress(OSError):
                    conn.sendall(answer)
                conn.close()
                return
            self._start(conn, request, raw, fds)
        except (OSError, wire.BadRequest) as exc:
            with contextlib.suppress(OSError):
                conn.sendall(f"refused {exc}\n".encode("ascii", "replace"))
            conn.close()
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def _read(self, conn: socket.socket, fds: list[int]) -> tuple[wire.Request, bytes]:
        """The request (checked) and its bytes as sent (for a spare worker to read)."""
        raw = _receive(conn, fds, 4)
        return wire.decode_request(raw[wire.HEADER :]), raw

    def _refusal(self, conn: socket.socket, request: wire.Request, fds: list[int]) -> bytes | None:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _, uid, _ = struct.unpack("3i", creds)
        if uid != os.getuid():
            return b"refused another user\n"
        if request.key != self.key:
            return b"refused another installation\n"
        if len(self.jobs) >= MAX_WORKERS:
            return b"busy\n"
        return None

    def _own_fds(self) -> list[int]:
        """The descriptors a worker closes first: the server's own and other jobs'."""
        own = [self.wake_r, self.wake_w]
        own += [j.conn.fileno() for j in self.jobs.values() if j.open]
        own += [j.go for j in self.jobs.values() if j.go is not None]
        if self.listener is not None:
            own.append(self.listener.fileno())
        if self.lock is not None:
            own.append(self.lock)
        if self.spare is not None:
            own.append(self.spare.channel.fileno())
        return own

    def _fork_spare(self) -> None:
        """Fork the next command's worker now, while no command runs: a fork of the
        server's size takes milliseconds that a request then need not wait for. The
        spare waits for its request (:func:`_wait_as_spare`); it ends with the server."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)

        def spare() -> NoReturn:
            own = self._own_fds()
            ours.close()
            _wait_as_spare(theirs, own)

        try:
            pid = self._fork(spare)
        finally:
            theirs.close()
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)  # the spare does the same: whichever comes first
        self.spare = _Spare(pid, ours)

    def _drop_spare(self) -> None:
        spare, self.spare = self.spare, None
        if spare is not None:
            spare.end()

    def _hand_to_spare(self, raw: bytes, fds: list[int]) -> int | None:
        """Give the request to the spare worker: its pid, or None (none, or it is gone:
        the caller forks one)."""
        spare, self.spare = self.spare, None
        if spare is None:
            return None
        try:
            sent = spare.channel.sendmsg(
                [raw], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))]
            )
            if sent < len(raw):
                spare.channel.sendall(raw[sent:])
        except OSError:
            spare.end()
            return None
        spare.channel.close()
        return spare.pid

    def _fork_worker(self, request: wire.Request, fds: list[int], go: tuple[int, int]) -> int:
        """A worker forked for ``request`` now (there is no spare): its pid."""
        return self._fork(lambda: _work(request, fds, go[0], [*self._own_fds(), go[1]]))

    @staticmethod
    def _fork(child: Callable[[], NoReturn]) -> int:
        """Fork, the child running ``child`` (which never returns) with the signals a
        caller forwards blocked until it has its own handlers; the child's pid."""
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _FORWARDABLE)
        _freeze()
        try:
            pid = os.fork()
            if pid == 0:
                try:
                    child()
                except BaseException:
                    traceback.print_exc()
                finally:
                    os._exit(1)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        return pid

    def _start(
        self, conn: socket.socket, request: wire.Request, raw: bytes, fds: list[int]
    ) -> None:
        """Run ``request`` (``raw``: its bytes as sent) in the spare, else in a worker
        forked for it, and tell the caller it started (or that this server is stale)."""
        go_r, go_w = os.pipe2(os.O_CLOEXEC)
        try:
            pid = self._hand_to_spare(raw, [*fds, conn.fileno(), go_r])
            if pid is None:
                pid = self._fork_worker(request, [*fds, conn.fileno()], (go_r, go_w))
        finally:
            os.close(go_r)
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)  # the worker does the same: whichever comes first
        conn.settimeout(None)
        job = self.jobs[pid] = _Job(conn, pid, go_w)
        # The code is checked while the worker sets itself up on another core: it runs
        # nothing before "go", so a stale server's worker simply ends unheard.
        if _changed(self.watched):
            self.stop()
            job.open = False
            os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                conn.sendall(b"stale\n")
            return
        try:
            conn.sendall(b"started\n")
        except OSError:
            self._lost(job)

    # ------------------------------------------------------------- running jobs

    def _hear(self, job: _Job) -> None:
        try:
            chunk = job.conn.recv(256)
        except OSError:
            chunk = b""
        if not chunk or len(job.buffer) + len(chunk) > 4096:
            self._lost(job)
            return
        job.buffer += chunk
        while b"\n" in job.buffer:
            line, _, job.buffer = job.buffer.partition(b"\n")
            word, _, number = line.partition(b" ")
            if word == b"go" and job.go is not None:
                with contextlib.suppress(OSError):
                    os.write(job.go, b"g")
                os.close(job.go)
                job.go = None
            elif word == b"kill" and number.isdigit() and int(number) in _FORWARDABLE:
                with contextlib.suppress(OSError):
                    os.killpg(job.pid, int(number))

    def _lost(self, job: _Job) -> None:
        """The caller is gone (killed with SIGKILL): so is its command, as it would be
        in the caller's own process."""
        job.open = False
        with contextlib.suppress(OSError):
            os.kill(job.pid, signal.SIGKILL)

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if self.spare is not None and pid == self.spare.pid:  # killed while it waited
                self.spare.channel.close()
                self.spare = None
            job = self.jobs.pop(pid, None)
            if job is None:
                continue
            if os.WIFSIGNALED(status):
                end = b"signal %d\n" % os.WTERMSIG(status)
            else:
                end = b"exit %d\n" % os.waitstatus_to_exitcode(status)
            if job.open:
                with contextlib.suppress(OSError):
                    job.conn.sendall(end)
            job.conn.close()
            if job.go is not None:
                os.close(job.go)
            self.last = time.monotonic()


# ----------------------------------------------------------------- the worker


def _work(request: wire.Request, fds: list[int], go: int, inherited: list[int]) -> NoReturn:
    """Become the caller's process, wait for its "go", run the command, exit with its
    status (as the caller's own interpreter would end)."""
    for fd in inherited:
        with contextlib.suppress(OSError):
            os.close(fd)
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    cwd, stdin, stdout, stderr, caller = fds
    for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
        os.dup2(fd, target)
        os.close(fd)
    os.fchdir(cwd)
    os.close(cwd)
    signal.set_wakeup_fd(-1)
    for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, _interrupted_while_starting)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _FORWARDABLE)
    _become(request)
    if os.read(go, 1) != b"g":
        os._exit(1)  # the server went away before the caller was ready: nothing ran
    os.close(go)
    code = _run()
    _report(caller, code)
    os._exit(code)


def _report(caller: int, code: int) -> None:
    """Tell the caller the command's status before this process ends (the end of a
    process of the server's size takes milliseconds, and the server's report waits for
    it). Everything the command held goes first: its files (locks among them: an
    ``flock`` ends with its last descriptor) and the caller's standard streams, which
    this process no longer writes, so that a caller reading them sees their end. The
    server's own report after the end is the one a worker that died says."""
    os.closerange(3, caller)
    os.closerange(caller + 1, _open_max())
    for fd in (0, 1, 2):
        with contextlib.suppress(OSError):
            os.close(fd)
    with contextlib.suppress(OSError):
        os.write(caller, b"exit %d\n" % code)


def _open_max() -> int:
    try:
        return min(os.sysconf("SC_OPEN_MAX"), 1 << 16)
    except (OSError, ValueError):
        return 1024


def _wait_as_spare(channel: socket.socket, inherited: list[int]) -> NoReturn:
    """A spare worker: close what is the server's, wait for a request (the server's
    copy of the caller's, with its descriptors: cwd, the three streams, the caller's
    connection and the "go" pipe), then be its worker. The server's end closed (it
    stopped) and it ends, having run nothing."""
    signal.set_wakeup_fd(-1)
    for fd in inherited:
        with contextlib.suppress(OSError):
            os.close(fd)
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    _copy_pages_until_asked(channel)
    fds: list[int] = []
    try:
        raw = _receive(channel, fds, 6)
    except (OSError, wire.BadRequest):
        os._exit(0)  # the server stopped (or went away while it sent): nothing ran
    channel.close()
    *streams, go = fds
    _work(wire.decode_request(raw[wire.HEADER :]), streams, go, [])


def _receive(conn: socket.socket, fds: list[int], count: int) -> bytes:
    """A request as sent (its header and payload) and the ``count`` descriptors that
    come with it (added to ``fds``, for the caller to close); BadRequest when any of it
    is missing."""
    data, ancillary, flags, _ = conn.recvmsg(65536, socket.CMSG_SPACE(count * 4))
    for level, kind, raw in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            usable = len(raw) - len(raw) % 4
            fds += struct.unpack(f"{usable // 4}i", raw[:usable])
    if flags & socket.MSG_CTRUNC or len(fds) != count:
        raise wire.BadRequest(f"a request without its {count} descriptors")
    while len(data) < wire.HEADER:
        data += _more(conn, wire.HEADER - len(data))
    size = wire.payload_length(data[: wire.HEADER])
    payload = data[wire.HEADER :]
    while len(payload) < size:
        payload += _more(conn, min(1 << 20, size - len(payload)))
    if len(payload) != size:
        raise wire.BadRequest("a request longer than it said")
    return data[: wire.HEADER] + payload


_MADV_POPULATE_WRITE = 23  # Linux 5.14: fault pages in writable (copy-on-write broken)
_CHUNK = 1 << 20


def _copy_pages_until_asked(channel: socket.socket) -> None:
    """Take this process's own copy of the server's memory while it waits.

    A worker shares the server's pages until it writes one, and Python writes to every
    object it uses (its reference count): a ``rebase --continue`` copied 2,500 pages
    one fault at a time as it ran (3.5-4.5 us each on this VM). A spare asks the kernel
    to copy its private writable mappings ahead (``madvise(MADV_POPULATE_WRITE)``, a
    megabyte at a time), and stops as soon as its request comes. Where the kernel does
    not know the call, nothing is copied ahead."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        madvise = libc.madvise
        madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        with open("/proc/self/maps", encoding="ascii", errors="replace") as maps:
            regions = [line.split()[:2] for line in maps]
    except (OSError, AttributeError, ImportError):
        return
    poller = select.poll()
    poller.register(channel, select.POLLIN)
    for span, perms in regions:
        if not perms.startswith("rw") or perms[3:4] != "p":
            continue
        start, end = (int(x, 16) for x in span.split("-"))
        for at in range(start, end, _CHUNK):
            if poller.poll(0):
                return  # the request came: it goes first
            if madvise(at, min(end, at + _CHUNK) - at, _MADV_POPULATE_WRITE) != 0:
                if ctypes.get_errno() == errno.EINVAL:
                    return  # a kernel without it
                break  # this mapping went or cannot be copied: the next one


def _more(conn: socket.socket, n: int) -> bytes:
    chunk = conn.recv(n)
    if not chunk:
        raise wire.BadRequest("a request cut short")
    return chunk


def _interrupted_while_starting(signum: int, frame: object) -> None:
    os.write(2, _STARTING)
    os._exit(130)


def _become(request: wire.Request) -> None:
    os.umask(request.umask)
    if request.terminal:
        cmdserver.set_caller_terminal_unreachable()
    if request.affinity:
        with contextlib.suppress(OSError, ValueError):
            os.sched_setaffinity(0, request.affinity)
    os.environ.clear()
    for variable, value in request.environ:
        with contextlib.suppress(ValueError):
            os.environb[variable] = value
    with contextlib.suppress(Exception):
        import locale

        locale.setlocale(locale.LC_CTYPE, "")
    sys.argv = [os.fsdecode(arg) for arg in request.argv]
    streams = []
    for fd, (name, spec) in enumerate(zip(wire.STREAMS, request.streams, strict=True)):
        streams.append(_stream(fd, name, *spec))
    sys.stdin, sys.stdout, sys.stderr = streams
    for name, stream in zip(wire.STREAMS, streams, strict=True):
        setattr(sys, f"__{name}__", stream)  # what faulthandler and friends fall back on


def _stream(
    fd: int, name: str, encoding: str, errors: str, line_buffering: bool, write_through: bool
) -> io.TextIOWrapper:
    """A standard stream as the caller's interpreter made it (its encoding and error
    handler, its buffering)."""
    try:
        "".encode(encoding)
    except LookupError:
        encoding = "utf-8"
    if name == "stdin":
        buffer: io.BufferedReader | io.BufferedWriter = open(fd, "rb", closefd=False)  # noqa: SIM115
    else:
        buffer = open(fd, "wb", closefd=False)  # noqa: SIM115
    return io.TextIOWrapper(
        buffer,
        encoding=encoding,
        errors=errors,
        newline="\n",
        line_buffering=line_buffering,
        write_through=write_through,
    )


def _run() -> int:
    from forkpatch import entry

    try:
        code = entry.run_here()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except KeyboardInterrupt:
        _flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        code = 130
    except BaseException:
        traceback.print_exc()
        code = 1
    _flush()
    atexit._run_exitfuncs()  # noqa: SLF001  (what the interpreter's exit runs; os._exit does not)
    _flush()
    return code & 0xFF


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
