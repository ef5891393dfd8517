"""Publish credentials never show: not in output, logs, reports, files or exceptions.

A canary password goes in TWINE_PASSWORD; the index is unreachable, refuses, fails
and echoes the request (Authorization header included) back. Afterwards neither the
canary nor its base64 ``user:password`` form may appear in stdout, stderr (with and
without --debug) or any file forkpatch wrote.
"""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from forkpatch.example import build_release_wheel, make_fork
from support.cli import fp
from support.reliability import Row
from support.servers import HostileIndex, free_port, serve_hostile
from support.smoke import passing_report

CANARY = "canary-Zq8v3-NEVER-PRINT-ME"
USER = "publisher"
FORMS = (
    CANARY,
    base64.b64encode(f"{USER}:{CANARY}".encode()).decode(),
    base64.b64encode(CANARY.encode()).decode(),
)


class _Echo(http.server.BaseHTTPRequestHandler):
    """Answers with the status in self.server.status and echoes the request headers."""

    def _answer(self) -> None:
        status = self.server.status_for(self.path, self.command)  # type: ignore[attr-defined]
        body = (f"{self.command} {self.path}\n{self.headers}").encode()
        if "Authorization" in self.headers:
            with contextlib.suppress(ValueError):
                body += base64.b64decode(self.headers["Authorization"].split()[-1]) + b"\n"
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
    passing_report(wheel)
    return root / "dist"


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
        url = f"http://127.0.0.1:{free_port()}/"
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


def test_credentials_in_the_url_are_refused_and_hidden(dist: Path, tmp_path: Path) -> None:
    wheel = next(dist.glob("*.whl"))
    url = f"http://{USER}:{CANARY}@127.0.0.1:{free_port()}/"
    got = fp(tmp_path, "publish", str(wheel), "--to", url)
    assert got.returncode == 1 and "the index URL carries credentials" in got.stderr
    assert CANARY not in got.stdout + got.stderr


# ----------------------------------------------------------------------------- fork URLs

# Forms of a fork URL that carry a password or a token (issue 12, item 5).
FORK_URLS = [
    "https://user:{t}@github.com/org/fork.git",
    "https://{t}@github.com/org/fork.git",
    "https://x-access-token:{t}@github.com/org/fork.git",
    "http://ci:{t}@127.0.0.1:{port}/fork.git",
    "HTTPS://USER:{t}@HOST.example/fork",
    "ssh://git:{t}@git.example/fork.git",
    "https://user:{t}%40x@gitlab.example/fork.git",
    # A raw "@" inside the password or token: hidden up to the last "@" of the host part.
    "https://user:p@ss@{t}@gitlab.example/fork.git",
    "https://tok@{t}@github.com/org/fork.git",
    # Tokens in the query (GitLab's private_token, OAuth access_token).
    "https://gitlab.example/fork.git?private_token={t}",
    "https://gitlab.example/fork.git?ref=main&access_token={t}",
]


def _url(form: str) -> str:
    return form.format(t=CANARY, port=free_port())


def _all_text(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in root.rglob("*") if p.is_file() and not p.is_symlink())


@pytest.mark.parametrize("form", FORK_URLS)
def test_init_refuses_a_fork_url_with_credentials(tmp_path: Path, form: str) -> None:
    project = tmp_path / "project"
    got = fp(tmp_path, "-C", str(project), "init", "--fork-url", _url(form), "--base", "v1")
    assert got.returncode == 2, got.stderr
    assert "password or token" in got.stderr and "credential helper" in got.stderr
    assert CANARY not in got.stdout + got.stderr
    assert not (project / "series.yaml").exists() and not (project / ".forkpatch").exists()


@pytest.mark.parametrize("form", FORK_URLS)
def test_series_yaml_with_credentials_is_refused_with_its_line(tmp_path: Path, form: str) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "series.yaml").write_text(
        "version: 1\nfork:\n  name: f\n"
        f"  url: '{_url(form)}'\n"
        "base:\n  tag: v1\n  commit: " + "a" * 40 + "\npatches: []\n"
    )
    for args in (("status",), ("status", "--json"), ("build-wheel", "--json")):
        got = fp(project, *args)
        assert got.returncode == 1, got.stderr
        assert "series.yaml:4: fork.url" in got.stderr and "password or token" in got.stderr
        assert CANARY not in got.stdout + got.stderr
    if (project / ".forkpatch").exists():  # nothing written with the token in it
        assert CANARY.encode() not in _all_text(project / ".forkpatch")


def test_an_old_wheel_with_a_token_in_its_provenance_never_spreads(tmp_path: Path) -> None:
    """A wheel built before this check carries the token in its provenance: verify, the
    smoke report and the published report show the URL without it."""
    from forkpatch.smoke.report import CheckResult, SmokeReport, WheelEntry, dumps
    from forkpatch.wheels.identity import Provenance
    from support.wheelfactory import make_wheel

    prov = {
        "schema": 1,
        "fork_url": f"https://x-access-token:{CANARY}@github.com/org/fork.git",
        "tag": "v1.2.1",
        "commit": "a" * 40,
        "patches": [],
        "forkpatch_version": "0.1.0",
        "builder": {"mode": "overlay"},
    }
    wheel = make_wheel(
        tmp_path / "dist" / "1cat_vllm-1.2.1-py3-none-any.whl",
        {
            "vllm/__init__.py": b"",
            "1cat_vllm-1.2.1.dist-info/forkpatch-provenance.json": json.dumps(prov).encode(),
        },
    )
    got = fp(tmp_path, "verify", "--json", str(wheel))
    assert "github.com/org/fork.git" in got.stdout, got.stdout + got.stderr
    assert CANARY not in got.stdout + got.stderr
    report = SmokeReport(
        wheels=[WheelEntry("0" * 64, file=wheel.name)],
        primary_sha256="0" * 64,
        version="1.2.1",
        requested_tiers=["static"],
        checks=[CheckResult("static.metadata", "static", "passed")],
        environment={"index_url": f"https://u:{CANARY}@pypi.example/simple"},
        device={},
        patches=[],
        provenance=Provenance.from_json(json.dumps(prov)),
    )
    text = dumps(report)
    assert CANARY.encode() not in text and b"github.com/org/fork.git" in text


# ----------------------------------------------------------------------------- short secrets

# A password this short is a bad password; hiding every occurrence of it would reveal it.
SHORT = ["e", "1", "in", "the", "rror", "index", "refuse"]
_MANGLED = re.compile(r"\w\*\*\*\*|\*\*\*\*\w")


@pytest.mark.parametrize("password", SHORT)
@pytest.mark.parametrize("mode", ["401", "500"])
def test_short_secrets_are_hidden_by_position_only(
    dist: Path, server: _Server, tmp_path: Path, password: str, mode: str
) -> None:
    import shutil

    work = tmp_path / "dist"
    shutil.copytree(dist, work)
    server.mode = mode
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    got = fp(
        tmp_path,
        "publish",
        str(next(work.glob("*.whl"))),
        "--to",
        url,
        extra_env={"TWINE_USERNAME": USER, "TWINE_PASSWORD": password},
    )
    text = got.stdout + got.stderr
    assert got.returncode == 1, text
    assert not _MANGLED.search(text), text  # no word cut up by a by-value replacement
    assert "index" in text and ("refused access" in text or "HTTP 500" in text), text
    assert "shorter than 8 characters" in text
    assert base64.b64encode(f"{USER}:{password}".encode()).decode() not in text


def test_redact_hides_positions_and_long_values() -> None:
    from forkpatch.redact import redact

    text = (
        "GET https://me:pw@host/x Authorization: Basic cHc= password=pw token: abc "
        "long-secret-value here, and e and pw elsewhere"
    )
    out = redact(text, ["pw", "long-secret-value", "e"])
    assert "https://me:****@host/x" in out and "Authorization: Basic ****" in out
    assert "password=****" in out and "token: ****" in out
    assert "**** here" in out and " e and pw elsewhere" in out
    assert redact("tok=s3cr3t, x: s3cr3t; s3cr3ts", ["s3cr3t"]) == "tok=****, x: ****; s3cr3ts"


def test_canary_does_not_follow_a_redirect_to_another_host(dist: Path, tmp_path: Path) -> None:
    """The index redirects its pages to another host (port): that host never receives the
    canary, and it shows nowhere."""
    work = tmp_path / "dist"
    import shutil

    shutil.copytree(dist, work)
    wheel = next(work.glob("*.whl"))
    with (
        serve_hostile(HostileIndex()) as elsewhere,
        serve_hostile(HostileIndex(mode="redirect", where="/simple/")) as index,
    ):
        index.redirect_to = elsewhere.url
        got = fp(
            tmp_path,
            "publish",
            str(wheel),
            "--to",
            index.url,
            extra_env={"TWINE_USERNAME": USER, "TWINE_PASSWORD": CANARY},
        )
    assert elsewhere.seen, got.stderr  # the redirect was followed
    assert elsewhere.authorizations() == [None] * len(elsewhere.seen)
    assert all(index.authorizations()[: len(elsewhere.seen)])
    text = got.stdout + got.stderr
    assert not any(form in text for form in FORMS), text[-3000:]
    assert not _files_with_canary(tmp_path), _files_with_canary(tmp_path)


RELIABILITY = [
    Row(
        "secrets",
        "a canary TWINE_PASSWORD; the index unreachable, refusing, failing, echoing",
        "4 answers x (plain, --debug)",
        "the canary and its base64 forms in no output and no file written",
    ),
    Row(
        "secrets",
        "a canary TWINE_PASSWORD; the index redirects its pages to another host",
        "1 case",
        "the other host never receives the credentials (asserted on its side); the canary "
        "in no output and no file written",
    ),
    Row(
        "secrets",
        "credentials in the fork URL (user:password@, token@, x-access-token, ssh, "
        "upper case, %-encoded) at init and in series.yaml; an old wheel's provenance",
        f"{len(FORK_URLS)} URLs x (init, series.yaml x 3 commands) + 1 wheel",
        "refused with the tip on credential helpers; the token never printed, stored, or "
        "copied into reports",
        refused=str(4 * len(FORK_URLS)),
    ),
    Row(
        "secrets",
        "short passwords (1-7 characters, common words) answered by 401 and 500",
        f"{len(SHORT)} passwords x 2 answers",
        "hidden in credential positions, never by replacing letters inside other words",
    ),
    Row(
        "secrets",
        "credentials in the index URL",
        "1 case",
        "refused, not echoed",
        refused="1",
    ),
]
