"""Servers on 127.0.0.1 for the tests: pypiserver, and a fake GitLab API (the forge)."""

from __future__ import annotations

import contextlib
import http.server
import json
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TOKEN = "glpat-forkpatch-test-token"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def serve_pypiserver(
    root: Path, options: list[str], *, log: Path | None = None, ready_path: str = "simple/"
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """pypiserver on 127.0.0.1 (a free port) serving ``root`` with ``options`` (auth,
    ...); yields (url, process) once ``ready_path`` answers, stops it afterwards."""
    port = free_port()
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(open(log, "wb")) if log else subprocess.DEVNULL
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pypiserver",
                "run",
                "-i",
                "127.0.0.1",
                "-p",
                str(port),
                *options,
                str(root),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}/"
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    urllib.request.urlopen(url + ready_path, timeout=2).read()
                    break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(
                            "pypiserver did not start" + (f": {log.read_text()}" if log else "")
                        ) from None
                    time.sleep(0.2)
            yield url, proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


@contextlib.contextmanager
def open_pypiserver(packages: Path) -> Iterator[str]:
    """A pypiserver on 127.0.0.1 that accepts uploads without authentication."""
    packages.mkdir(parents=True, exist_ok=True)
    with serve_pypiserver(
        packages,
        ["-a", ".", "-P", ".", "--disable-fallback"],
        log=packages.parent / "pypiserver.log",
    ) as (url, _proc):
        yield url


def index_files(url: str, project: str = "1cat-vllm") -> list[str]:
    """The wheel files the index at ``url`` lists for ``project``."""
    try:
        page = urllib.request.urlopen(f"{url}simple/{project}/", timeout=10).read().decode()
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return []
        raise
    return sorted(set(re.findall(r">([^<]+\.whl)<", page)))


# =========================================================================== fake forge


@dataclass
class Forge:
    """What a GitLab project holds, as far as forkpatch asks: merge requests and issues."""

    token: str = TOKEN
    scopes: tuple[str, ...] = ("api", "write_repository")
    calls: list[tuple[str, str]] = field(default_factory=list)
    sent: list[tuple[str, str, Any]] = field(default_factory=list)  # writes, with their body
    merge_requests: list[dict[str, Any]] = field(default_factory=list)
    issues: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""

    def writes(self) -> list[tuple[str, str]]:
        return [(m, p) for m, p in self.calls if m in ("POST", "PUT")]

    def answer(self, method: str, path: str, query: dict[str, str], body: Any) -> tuple[int, Any]:
        self.calls.append((method, path))
        if method in ("POST", "PUT"):
            self.sent.append((method, path, body))
        if path == "/api/v4/personal_access_tokens/self":
            return 200, {"scopes": list(self.scopes), "active": True}
        m = re.fullmatch(r"/api/v4/projects/[^/]+/(merge_requests|issues)(?:/(\d+))?", path)
        if not m:
            return 404, {"message": "404 Not Found"}
        items = self.merge_requests if m.group(1) == "merge_requests" else self.issues
        if method == "GET":
            found = [i for i in items if i["state"] == query.get("state", i["state"])]
            if "source_branch" in query:
                found = [i for i in found if i["source_branch"] == query["source_branch"]]
            if "search" in query:
                found = [i for i in found if query["search"] in i["title"]]
            return 200, found
        if method == "POST":
            item = {"iid": len(items) + 1, "state": "opened", **body}
            items.append(item)
            return 201, item
        if method == "PUT" and m.group(2):
            item = next(i for i in items if i["iid"] == int(m.group(2)))
            item.update(body)
            return 200, item
        return 405, {"message": "405 Method Not Allowed"}


@contextlib.contextmanager
def serve_forge(forge: Forge) -> Iterator[Forge]:
    """The fake GitLab API on 127.0.0.1 (a free port), answering with ``forge``."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def _do(self) -> None:
            parts = urllib.parse.urlsplit(self.path)
            query = dict(urllib.parse.parse_qsl(parts.query))
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"null") if length else None
            if self.headers.get("PRIVATE-TOKEN") != forge.token:
                code, data = 401, {"message": "401 Unauthorized"}
            else:
                code, data = forge.answer(self.command, parts.path, query, body)
            raw = json.dumps(data).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        do_GET = do_POST = do_PUT = _do

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    forge.url = f"http://127.0.0.1:{server.server_port}/api/v4"
    try:
        yield forge
    finally:
        server.shutdown()
        server.server_close()


# =========================================================================== hostile index


@dataclass
class HostileIndex:
    """A PEP 503 index on 127.0.0.1 that misbehaves under ``where`` (a path prefix).

    ``mode``: "page" (behaves), "redirect" (302 to ``redirect_to`` + the path),
    "endless" (a body with no length, up to 64 MiB), "trickle" (one byte per 0.5 s, up
    to 100 bytes), "huge-length" (announces 10**15 bytes, sends 1 KiB). Every loop ends
    by itself, and sooner when the client hangs up. ``seen`` records each request's path
    and Authorization header, for assertions on the server's side. A path under
    ``/landed`` is served as if the prefix were not there (a redirect's target).
    """

    mode: str = "page"
    where: str = "/"
    redirect_to: str = ""
    project: str = "1cat-vllm"
    seen: list[tuple[str, str | None]] = field(default_factory=list)
    url: str = ""

    def authorizations(self) -> list[str | None]:
        return [auth for _path, auth in self.seen]


def _hostile_answer(h: HostileIndex, handler: http.server.BaseHTTPRequestHandler) -> None:
    path = handler.path
    h.seen.append((path, handler.headers.get("Authorization")))
    if path.startswith("/landed"):
        path = path[len("/landed") :] or "/"
    elif path.startswith(h.where) and h.mode != "page":
        _misbehave(h, handler, path)
        return
    if path.rstrip("/").endswith("/simple"):
        body = f'<a href="{h.project}/">{h.project}</a>'.encode()
    elif path.rstrip("/").endswith(f"/simple/{h.project}"):
        body = b'<a href="../../files/x-1-py3-none-any.whl">x-1-py3-none-any.whl</a>'
    elif path.startswith("/files/"):
        body = b"wheel bytes"
    else:
        handler.send_error(404)
        return
    handler.send_response(200)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def _misbehave(h: HostileIndex, handler: http.server.BaseHTTPRequestHandler, path: str) -> None:
    with contextlib.suppress(OSError):
        if h.mode == "redirect":
            handler.send_response(302)
            handler.send_header("Location", h.redirect_to.rstrip("/") + path)
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        handler.send_response(200)
        if h.mode == "endless":
            handler.send_header("Connection", "close")
            handler.end_headers()
            for _ in range(1024):  # 64 MiB at most
                handler.wfile.write(b"x" * (64 << 10))
        elif h.mode == "trickle":
            handler.send_header("Content-Length", "100")
            handler.end_headers()
            for _ in range(100):
                handler.wfile.write(b"<")
                handler.wfile.flush()
                time.sleep(0.5)
        elif h.mode == "huge-length":
            handler.send_header("Content-Length", str(10**15))
            handler.end_headers()
            handler.wfile.write(b"x" * 1024)
        handler.close_connection = True


@contextlib.contextmanager
def serve_hostile(h: HostileIndex) -> Iterator[HostileIndex]:
    """Serve ``h`` on 127.0.0.1 (a free port); ``h.url`` is its root URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            _hostile_answer(h, self)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    h.url = f"http://127.0.0.1:{server.server_port}/"
    try:
        yield h
    finally:
        server.shutdown()
        server.server_close()
