"""Publish credentials never show: not in output, logs, reports, files or exceptions.

A canary password goes in TWINE_PASSWORD; the index is unreachable, refuses, fails
and echoes the request (Authorization header included) back. Afterwards neither the
canary nor its base64 ``user:password`` form may appear in stdout, stderr (with and
without --debug) or any file forkpatch wrote.
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import socket
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from hardkit import fp, record

from forkpatch.example import build_release_wheel, make_fork
from forkpatch.smoke.report import REPORT_SUFFIX, SCHEMA

CANARY = "canary-Zq8v3-NEVER-PRINT-ME"
USER = "publisher"
FORMS = (
    CANARY,
    base64.b64encode(f"{USER}:{CANARY}".encode()).decode(),
    base64.b64encode(CANARY.encode()).decode(),
)
_outcomes: Counter[str] = Counter()


class _Echo(http.server.BaseHTTPRequestHandler):
    """Answers with the status in self.server.status and echoes the request headers."""

    def _answer(self) -> None:
        status = self.server.status_for(self.path, self.command)  # type: ignore[attr-defined]
        body = (f"{self.command} {self.path}\n{self.headers}").encode()
        if "Authorization" in self.headers:
            try:
                body += base64.b64decode(self.headers["Authorization"].split()[-1]) + b"\n"
            except ValueError:
                pass
        self.send_response(status)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("WWW-Authenticate", 'Basic realm="x"')
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:  # quiet
        pass


class _Server(http.server.ThreadingHTTPServer):
    mode = "401"

    def status_for(self, path: str, command: str) -> int:
        if self.mode == "401":
            return 401
        if self.mode == "500":
            return 500
        # "upload-fails": the simple index answers, the project page is 404, uploads 500
        if command == "GET":
            return 200 if path.rstrip("/").endswith("simple") else 404
        return 500


@pytest.fixture(scope="module")
def server() -> Iterator[_Server]:
    srv = _Server(("127.0.0.1", 0), _Echo)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel with a passing smoke report beside it (so the gate lets it through)."""
    root = tmp_path_factory.mktemp("secrets")
    make_fork(root / "fork")
    wheel = build_release_wheel(root / "fork", "v1.2.1", root / "dist")
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    report = {
        "kind": "forkpatch-smoke-report",
        "schema": SCHEMA,
        "passed": True,
        "wheel": {"sha256": sha},
        "wheels": [{"sha256": sha, "file": wheel.name}],
        "checks": [],
        "tiers": {"status": {"static": "passed", "sm70": "passed"}, "not_run": {}, "detail": {}},
    }
    wheel.with_name(wheel.name + REPORT_SUFFIX).write_text(json.dumps(report))
    return root / "dist"


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _files_with_canary(root: Path) -> list[str]:
    hits = []
    for p in root.rglob("*"):
        if p.is_file():
            data = p.read_bytes()
            if any(f.encode() in data for f in FORMS):
                hits.append(str(p))
    return hits


@pytest.mark.parametrize("mode", ["unreachable", "401", "500", "upload-fails"])
@pytest.mark.parametrize("debug", [False, True], ids=["plain", "debug"])
def test_canary_never_leaks(
    dist: Path, server: _Server, mode: str, debug: bool, tmp_path: Path
) -> None:
    work = tmp_path / "dist"
    import shutil

    shutil.copytree(dist, work)
    if mode == "unreachable":
        url = f"http://127.0.0.1:{_closed_port()}/"
    else:
        server.mode = mode
        url = f"http://127.0.0.1:{server.server_address[1]}/"
    wheel = next(work.glob("*.whl"))
    args = (["--debug"] if debug else []) + ["publish", str(wheel), "--to", url]
    got = fp(
        tmp_path,
        *args,
        extra_env={
            "TWINE_USERNAME": USER,
            "TWINE_PASSWORD": CANARY,
            "FORKPATCH_DEBUG": "1" if debug else "0",
        },
    )
    assert got.returncode != 0, got.stderr  # every mode fails, each in its own way
    text = got.stdout + got.stderr
    for form in FORMS:
        assert form not in text, f"{mode}: the credential leaked:\n{text[-3000:]}"
    assert not _files_with_canary(tmp_path), _files_with_canary(tmp_path)
    assert "internal error" not in text and ("Traceback" not in text or debug), text
    _outcomes[f"{mode}: no leak"] += 1


def test_credentials_in_the_url_are_refused_and_hidden(dist: Path, tmp_path: Path) -> None:
    wheel = next(dist.glob("*.whl"))
    url = f"http://{USER}:{CANARY}@127.0.0.1:{_closed_port()}/"
    got = fp(tmp_path, "publish", str(wheel), "--to", url)
    assert got.returncode == 1 and "the index URL carries credentials" in got.stderr
    assert CANARY not in got.stdout + got.stderr
    _outcomes["credentials in the index URL: refused, not echoed"] += 1


def test_fork_url_token_is_hidden(tmp_path: Path) -> None:
    url = f"http://x-access-token:{CANARY}@127.0.0.1:{_closed_port()}/fork.git"
    got = fp(tmp_path, "init", "--fork-url", url, "--base", "v1")
    assert got.returncode == 1
    assert CANARY not in got.stdout + got.stderr, got.stderr
    _outcomes["token in the fork URL: hidden in errors"] += 1


def test_record_secrets() -> None:
    record(
        "secrets",
        "canary token",
        tried=sum(_outcomes.values()),
        unit="cases",
        outcomes=_outcomes,
        note="canary in TWINE_PASSWORD / URLs; stdout, stderr, --debug, every file written",
    )
