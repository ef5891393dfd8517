"""The team's pytest checks' server: vllm imported once, each check a fork of it.

Run in the smoke environment by path, as a script (it imports nothing of the check
suite, only the standard library, and then pytest and what ``--preimport`` names, in
the environment's interpreter):

    python teamserver.py --socket PATH --host-pid PID --preimport vllm ...

It starts a daemon (a session of its own) that imports pytest and the ``--preimport``
modules, listens on the Unix socket ``PATH``, prints one JSON line (``ready``, what it
imported, what failed) and leaves the daemon running. Each connection is one check:
a request (``argv``, ``cwd``, ``env``) with the client's stdin, stdout and stderr passed
along; the daemon forks a child that is ``python -m pytest ARGV`` in ``cwd`` with that
environment and those files, in a session and process group of its own, and reports
``{"pid": N}`` and then ``{"status": S}`` or ``{"signal": N}``. The client (teamclient.py)
turns that back into its own exit status, so a check through the server reads like a
pytest run of its own. A crash of one check ends only its child. A client that goes
away (killed at its timeout) takes its check's group with it, and whatever a check left
running in its group is ended when the check ends. The daemon ends when the host
process ``PID`` has gone, when it has been idle for ``--idle-s`` seconds, or at SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import select
import signal
import socket
import sys
import time
import traceback

#: The most a request may be (argv, cwd and the environment, JSON).
REQUEST_LIMIT = 4 * 1024 * 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="teamserver")
    parser.add_argument("--socket", required=True)
    parser.add_argument("--host-pid", type=int, required=True)
    parser.add_argument("--preimport", nargs="*", default=[])
    parser.add_argument("--idle-s", type=float, default=3600.0)
    args = parser.parse_args(argv)
    read_end, write_end = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    if os.fork() != 0:  # the starter: waits for the daemon's report, prints it
        os.close(write_end)
        with os.fdopen(read_end, "rb") as fh:
            line = fh.readline(REQUEST_LIMIT)
        if not line:
            print(json.dumps({"ready": False, "error": "the server ended while starting"}))
            return 1
        sys.stdout.write(line.decode("utf-8", "replace"))
        return 0 if json.loads(line).get("ready") else 1
    os.close(read_end)
    os.setsid()  # out of the starter's group: the host ends that group when it exits
    try:
        _daemon(args, write_end)
    except BaseException:
        with contextlib.suppress(OSError):
            os.write(write_end, _line({"ready": False, "error": traceback.format_exc()}))
        os._exit(1)
    os._exit(0)


def _line(obj: object) -> bytes:
    return (json.dumps(obj) + "\n").encode("utf-8")


def _daemon(args: argparse.Namespace, report_fd: int) -> None:
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # what the imports print goes nowhere: the checks have their own
        os.dup2(devnull, fd)
    base_env = dict(os.environ)
    imported, failed = [], {}
    try:
        importlib.import_module("pytest")
    except BaseException as exc:
        os.write(report_fd, _line({"ready": False, "error": f"cannot import pytest: {exc!r}"}))
        return
    for name in args.preimport:
        t0 = time.monotonic()
        try:
            importlib.import_module(name)
            imported.append({"module": name, "s": round(time.monotonic() - t0, 3)})
        except BaseException as exc:  # the check will import it itself, and say why
            failed[name] = f"{type(exc).__name__}: {exc}"
    # What the imports set in the environment (vllm sets a few variables when imported):
    # a check's child gets them over the environment its client sends.
    added = {k: v for k, v in os.environ.items() if base_env.get(k) != v}
    with contextlib.suppress(FileNotFoundError):
        os.unlink(args.socket)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(args.socket)
    os.chmod(args.socket, 0o600)
    server.listen(4)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    report = {"ready": True, "pid": os.getpid(), "imported": imported, "failed": failed}
    os.write(report_fd, _line(report))
    os.close(report_fd)
    idle_since = time.monotonic()
    while True:
        ready, _, _ = select.select([server], [], [], 1.0)
        if not ready:
            if not _alive(args.host_pid) or time.monotonic() - idle_since > args.idle_s:
                return
            continue
        conn, _ = server.accept()
        with conn:
            _serve_one(conn, added, server)
        idle_since = time.monotonic()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _serve_one(conn: socket.socket, added: dict[str, str], server: socket.socket) -> None:
    msg, fds = _receive(conn)
    if msg is None or len(fds) != 3:
        for fd in fds:
            os.close(fd)
        return
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        conn.close()
        server.close()  # the check holds none of the server's sockets
        _child(msg, fds, added)  # never returns
    for fd in fds:
        os.close(fd)
    with contextlib.suppress(OSError):
        conn.sendall(_line({"pid": pid}))
    status = _watch(conn, pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)  # what the check left running in its group
    with contextlib.suppress(OSError):
        conn.sendall(_line(status))


def _receive(conn: socket.socket) -> tuple[dict[str, object] | None, list[int]]:
    data, fds = b"", []
    conn.settimeout(30.0)
    try:
        while not data.endswith(b"\n") and len(data) < REQUEST_LIMIT:
            chunk, got, _flags, _addr = socket.recv_fds(conn, 65536, 3)
            fds += got
            if not chunk:
                break
            data += chunk
    except OSError:
        return None, fds
    conn.settimeout(None)
    try:
        msg = json.loads(data)
    except ValueError:
        return None, fds
    return (msg if isinstance(msg, dict) else None), fds


def _watch(conn: socket.socket, pid: int) -> dict[str, int]:
    """Wait for the check's child; a ``kill`` from the client (its timeout) is passed to
    the child's group, and a client that has gone ends it."""
    buf = b""
    client_gone = False
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            if os.WIFSIGNALED(status):
                return {"signal": os.WTERMSIG(status)}
            return {"status": os.waitstatus_to_exitcode(status)}
        if client_gone:
            time.sleep(0.05)
            continue
        ready, _, _ = select.select([conn], [], [], 0.1)
        if not ready:
            continue
        try:
            chunk = conn.recv(4096)
        except OSError:
            chunk = b""
        if not chunk:  # the client was killed: so is its check
            client_gone = True
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            continue
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            with contextlib.suppress(ValueError, TypeError, ProcessLookupError, PermissionError):
                os.killpg(pid, int(json.loads(line)["kill"]))


def _child(msg: dict[str, object], fds: list[int], added: dict[str, str]) -> None:
    code = 3  # pytest's "internal error", as a crash in here would be
    try:
        os.setsid()
        for n, fd in enumerate(fds):
            os.dup2(fd, n)
            os.close(fd)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGPIPE):
            signal.signal(
                sig, signal.SIG_DFL if sig != signal.SIGINT else signal.default_int_handler
            )
        env = msg.get("env")
        if isinstance(env, dict):
            os.environ.clear()
            os.environ.update({str(k): str(v) for k, v in env.items()})
            os.environ.update({k: v for k, v in added.items() if k not in env})
        cwd = str(msg.get("cwd") or ".")
        os.chdir(cwd)
        # As `python -m pytest` from cwd: the directory first on sys.path, not this script's.
        here = os.path.dirname(os.path.abspath(__file__))
        sys.path[:] = [p for p in sys.path if p not in ("", here)]
        sys.path.insert(0, os.getcwd())
        argv = [str(a) for a in msg.get("argv") or []]  # type: ignore[attr-defined]
        sys.argv = [os.path.join(os.path.dirname(sys.executable), "pytest"), *argv]
        sys.stdin = open(0, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        # Line-buffered: a check that hangs still shows how far it got.
        sys.stdout = open(1, "w", encoding="utf-8", errors="replace", closefd=False, buffering=1)  # noqa: SIM115
        sys.stderr = open(2, "w", encoding="utf-8", errors="replace", closefd=False, buffering=1)  # noqa: SIM115
        import pytest

        code = int(pytest.main(argv))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
