"""`status --upstream` trusts no forge answer, no patch URL and no cache file further than
it checks them.

- answers: only their documented shape (the fields used, their types, values, depth,
  size); any other is `unknown` with a reason, never read as merged, never a traceback;
- credentials: a token goes only to the API it is configured for; a patch's URL chooses
  what is asked, not where a credential goes; URLs with credentials are refused in
  series.yaml, at import and by status;
- without a token the public API is asked (and a rate limit stops the asking);
- the cache is keyed by the API URL asked, and read as a bounded, regular, validated file.

Stand-in forges on 127.0.0.1 answer GitHub's and GitLab's documented JSON shapes.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import pytest

from forkpatch import upstream_status
from forkpatch.cli import main
from forkpatch.fetch import Auth
from forkpatch.forgehttp import get_json
from forkpatch.series import PatchEntry, load_series, save_series
from support.cli import fp
from support.git import git
from support.projects import example_project
from support.reliability import Row

TOKEN = "ghp_forge_trust_secret_789"
GL_TOKEN = "glpat-forge-trust-secret-012"


TRICKLE = -1


class _Forge(http.server.BaseHTTPRequestHandler):
    """Answers ``routes[path] = (status, headers, raw body bytes)``; 404 JSON otherwise."""

    routes: ClassVar[dict[str, tuple[int, dict[str, str], bytes]]] = {}
    seen: ClassVar[list[dict[str, str]]] = []

    def do_GET(self) -> None:
        self.seen.append({"path": self.path, **{k.lower(): v for k, v in self.headers.items()}})
        status, headers, body = self.routes.get(self.path, (404, {}, b'{"message": "Not Found"}'))
        if status == TRICKLE:  # a byte every 0.3 s, a body that never ends on time
            self.send_response(200)
            self.send_header("Content-Length", "100000")
            self.end_headers()
            with contextlib.suppress(OSError):
                for _ in range(100):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.3)
            return
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        with contextlib.suppress(OSError):
            self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def _serve(routes: dict[str, Any]) -> Iterator[tuple[str, list[dict[str, str]]]]:
    handler = type("Forge", (_Forge,), {"routes": routes, "seen": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler.seen
    finally:
        server.shutdown()
        server.server_close()


def _json(data: Any) -> bytes:
    return json.dumps(data).encode()


PR7 = "/repos/acme/vllm/pulls/7"
PR8 = "/repos/acme/vllm/pulls/8"
MR3 = "/api/v4/projects/team%2Fvllm/merge_requests/3"


@pytest.fixture
def project(tmp_path, monkeypatch) -> tuple[Path, str]:
    fork, proj = example_project(tmp_path)
    released = git(fork, "rev-parse", "v1.3.0")
    upstreams = {
        "capability-floor": "https://github.com/acme/vllm/pull/7",
        "odd-width-padding": "https://github.com/acme/vllm/pull/8",
        "eager-block-cast": "https://gitlab.example.com/team/vllm/-/merge_requests/3",
    }
    s = load_series(proj.series_path)
    s = s.with_patches(replace(p, upstream=upstreams.get(p.name, "")) for p in s.patches)
    save_series(s, proj.series_path)
    for var in ("GITHUB_TOKEN", "GH_TOKEN", "GITLAB_TOKEN", "FORKPATCH_GITLAB_API"):
        monkeypatch.delenv(var, raising=False)
    return proj.root, released


def _status(root: Path, capsys) -> tuple[int, dict[str, dict], str]:
    capsys.readouterr()
    code = main(["-C", str(root), "status", "--upstream", "--json"])
    out, err = capsys.readouterr()
    return code, {p["name"]: p["upstream"] for p in json.loads(out)["patches"]}, out + err


# -- answers: the documented shape or a reason ------------------------------------------

GOOD_PR = {"state": "open", "draft": False, "merged": False, "merge_commit_sha": None}

BAD_PR_ANSWERS = {
    "nested 100,000 deep": (b"[" * 100_000 + b"]" * 100_000, "nested more than"),
    "an object nested 40 deep": (b'{"a":' * 40 + b"1" + b"}" * 40, "nested more than"),
    "merged as a string": (_json({"state": "closed", "merged": "no"}), "'merged' is a string"),
    "merged as a number": (_json({"state": "closed", "merged": 1}), "'merged' is a number"),
    "draft as a string": (_json({"state": "open", "draft": "yes"}), "'draft' is a string"),
    "state as a number": (_json({"state": 5}), "'state' is a number"),
    "state unknown": (_json({"state": "superseded"}), "'state' is none of open, closed"),
    "no state": (_json({"merged": False}), "has no 'state'"),
    "merged_at a number": (_json({"state": "closed", "merged_at": 17}), "'merged_at' is"),
    "a merge commit not a sha": (
        _json({"state": "closed", "merged": True, "merge_commit_sha": "../../etc"}),
        "'merge_commit_sha' is not",
    ),
    "NaN": (b'{"state": NaN}', "not JSON"),
    "-Infinity": (b'{"state": "open", "draft": -Infinity}', "not JSON"),
    "HTML": (b"<html><body>Sign in</body></html>", "not JSON"),
    "a list": (_json(["open"]), "not a JSON object"),
}


@pytest.mark.parametrize("case", sorted(BAD_PR_ANSWERS))
def test_an_answer_of_another_shape_is_unknown_with_its_reason(project, monkeypatch, capsys, case):
    root, _ = project
    body, reason = BAD_PR_ANSWERS[case]
    routes = {PR7: (200, {}, body), PR8: (200, {}, _json(GOOD_PR))}
    with _serve(routes) as (url, _seen):
        monkeypatch.setenv("FORKPATCH_GITHUB_API", url)
        monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
        t0 = time.monotonic()
        code, ups, text = _status(root, capsys)
    assert code == 0 and time.monotonic() - t0 < 20
    assert "Traceback" not in text and "internal error" not in text
    got = ups["capability-floor"]
    assert got["state"] == "unknown" and reason in got["reason"], got
    assert ups["odd-width-padding"]["state"] == "open"  # the good one beside it still reads


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"state": "merged", "merge_commit_sha": ["a" * 40]}, "'merge_commit_sha' is a list"),
        ({"state": "opened", "work_in_progress": 1}, "'work_in_progress' is a number"),
        ({"state": "open"}, "'state' is none of opened"),  # GitHub's word, not GitLab's
        ({"state": {"merged": True}}, "'state' is an object"),
    ],
)
def test_a_gitlab_answer_of_another_shape_is_unknown(project, monkeypatch, capsys, body, reason):
    root, _ = project
    with _serve({MR3: (200, {}, _json(body))}) as (url, _seen):
        monkeypatch.setenv("FORKPATCH_GITHUB_API", "http://127.0.0.1:9")
        monkeypatch.setenv("FORKPATCH_GITLAB_API", url + "/api/v4")
        code, ups, _text = _status(root, capsys)
    assert code == 0
    got = ups["eager-block-cast"]
    assert got["state"] == "unknown" and reason in got["reason"], got


# -- credentials go where they are configured, nowhere else ------------------------------


def _ref(text: str) -> upstream_status.Reference:
    ref = upstream_status.reference(
        PatchEntry(name="p", summary="s", file="p.patch", upstream=text)
    )
    assert ref is not None
    return ref


def test_a_merge_request_on_another_host_is_asked_without_the_token(monkeypatch):
    monkeypatch.setenv("GITLAB_TOKEN", GL_TOKEN)
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.delenv("FORKPATCH_GITLAB_API", raising=False)
    monkeypatch.delenv("FORKPATCH_GITHUB_API", raising=False)
    elsewhere = _ref("Forwarded: https://gitlab.attacker.example/a/b/-/merge_requests/1")
    assert elsewhere.api.startswith("https://gitlab.attacker.example/api/v4/")
    assert elsewhere.auth is None
    home = _ref("https://gitlab.com/a/b/-/merge_requests/1")
    assert home.auth is not None and home.auth.for_url == "https://gitlab.com/api/v4"
    assert _ref("https://github.com/o/r/pull/2").auth.for_url == "https://api.github.com"
    # a configured API gets every question, and the token goes there alone
    monkeypatch.setenv("FORKPATCH_GITLAB_API", "https://git.corp.example/api/v4")
    for text in (
        "https://gitlab.attacker.example/a/b/-/merge_requests/1",
        "https://gitlab.com/a/b/-/merge_requests/1",
    ):
        ref = _ref(text)
        assert ref.api.startswith("https://git.corp.example/api/v4/projects/a%2Fb/")
        assert ref.auth is not None and ref.auth.for_url == "https://git.corp.example/api/v4"


def test_the_client_sends_a_token_only_to_the_origin_it_is_for():
    with (
        _serve({"/x": (200, {}, b"{}")}) as (other, other_seen),
        _serve({"/x": (200, {}, b"{}")}) as (home, home_seen),
    ):
        get_json(f"{other}/x", auth=Auth(f"Bearer {TOKEN}", home))
        get_json(f"{home}/x", auth=Auth(f"Bearer {TOKEN}", home))
    assert "authorization" not in other_seen[0]
    assert home_seen[0]["authorization"] == f"Bearer {TOKEN}"


@pytest.mark.parametrize(
    "url",
    [
        "https://ghp_abc123@github.com/acme/vllm/pull/7",
        "https://me:glpat-xyz@gitlab.com/team/vllm/-/merge_requests/3",
        "see https://gitlab.com/team/vllm/-/merge_requests/3?private_token=glpat-xyz",
    ],
)
def test_an_upstream_url_with_credentials_is_refused(project, capsys, url):
    root, _ = project
    series = root / "series.yaml"
    text = series.read_text(encoding="utf-8")
    bad = text.replace("https://github.com/acme/vllm/pull/7", url, 1)
    assert bad != text
    series.write_text(bad, encoding="utf-8")
    code = main(["-C", str(root), "status"])
    _out, err = capsys.readouterr()
    assert code == 1
    assert "series.yaml:" in err and "carries credentials" in err and "tip:" in err
    for secret in ("ghp_abc123", "glpat-xyz"):
        assert secret not in err
    assert series.read_text(encoding="utf-8") == bad  # the person's file is left as it is


def test_import_refuses_a_forwarded_url_with_credentials(project, capsys):
    root, _ = project
    before = (root / "series.yaml").read_bytes()
    patch = root.parent / "fix.patch"
    patch.write_text(
        "Description: a fix\n"
        "Forwarded: https://oauth2:glpat-SECRET-1@gitlab.example.com/t/v/-/merge_requests/9\n"
        "---\n"
        "--- a/new.txt\n+++ b/new.txt\n@@ -0,0 +1 @@\n+x\n",
        encoding="utf-8",
    )
    code = main(["-C", str(root), "import", str(patch)])
    _out, err = capsys.readouterr()
    assert code == 2, err
    assert "fix.patch" in err and "credentials" in err and "tip:" in err
    assert "glpat-SECRET-1" not in err
    assert (root / "series.yaml").read_bytes() == before


# -- without a token: the public API, bounded ---------------------------------------------


def test_without_a_token_the_public_api_is_asked(project, monkeypatch, capsys):
    root, _ = project
    routes = {PR7: (200, {}, _json(GOOD_PR)), PR8: (200, {}, _json({**GOOD_PR, "draft": True}))}
    with _serve(routes) as (url, seen):
        monkeypatch.setenv("FORKPATCH_GITHUB_API", url)
        code, ups, _text = _status(root, capsys)
    assert code == 0
    assert ups["capability-floor"]["state"] == "open"
    assert ups["odd-width-padding"]["state"] == "draft"
    assert seen and not any("authorization" in s for s in seen)
    cache = json.loads((root / ".forkpatch" / "upstream.json").read_text(encoding="utf-8"))
    assert cache[f"{url}{PR7}"]["authenticated"] is False


@pytest.mark.parametrize(
    "limit",
    [
        (403, {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "9999999999"}),
        (429, {"Retry-After": str(365 * 86400)}),  # a year: not waited for
    ],
)
def test_a_rate_limit_stops_the_asking(project, monkeypatch, capsys, limit):
    root, _ = project
    status, headers = limit
    routes = {PR7: (status, headers, b"{}"), PR8: (status, headers, b"{}")}
    with _serve(routes) as (url, seen):
        monkeypatch.setenv("FORKPATCH_GITHUB_API", url)
        t0 = time.monotonic()
        code, ups, _text = _status(root, capsys)
    assert code == 0 and time.monotonic() - t0 < 20
    assert len(seen) == 1, seen  # the second pull request at that API is not asked
    for name in ("capability-floor", "odd-width-padding"):
        assert ups[name]["state"] == "unknown" and "rate limited" in ups[name]["reason"]
    if status == 403:
        assert "GITHUB_TOKEN raises the limit" in ups["capability-floor"]["reason"]


# -- the guards that hold: hostile answers end bounded and clean -------------------------

HOSTILE = {
    "a trickle": ((TRICKLE, {}, b""), "no answer in time"),
    "a redirect to file://": ((302, {"Location": "file:///etc/passwd"}, b""), "HTTP 302"),
    "a redirect loop": ((302, {"Location": PR7}, b""), "HTTP 302"),
    "a body past 1 MiB": ((200, {}, b" " * (2 << 20)), "more than 1048576 bytes"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_forge_ends_bounded_and_clean(project, monkeypatch, capsys, case):
    root, _ = project
    route, reason = HOSTILE[case]
    with _serve({PR7: route, PR8: (200, {}, _json(GOOD_PR))}) as (url, _seen):
        monkeypatch.setenv("FORKPATCH_GITHUB_API", url)
        monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
        monkeypatch.setenv("FORKPATCH_FORGE_TIMEOUT", "1500ms")  # read with its unit
        t0 = time.monotonic()
        code, ups, text = _status(root, capsys)
    assert code == 0 and time.monotonic() - t0 < 10
    got = ups["capability-floor"]
    assert got["state"] == "unknown" and reason in got["reason"], got
    assert ups["odd-width-padding"]["state"] == "open"
    assert TOKEN not in text and "Traceback" not in text and "root:" not in text


# -- the cache: keyed by what was asked where; read as a state file -----------------------


def test_an_answer_from_another_api_is_not_reused(project, monkeypatch, capsys):
    root, released = project
    merged = {"state": "closed", "merged": True, "merge_commit_sha": released}
    with _serve({PR7: (200, {}, _json(merged))}) as (url_a, _seen):
        monkeypatch.setenv("FORKPATCH_GITHUB_API", url_a)
        assert _status(root, capsys)[1]["capability-floor"]["state"] == "merged"
    with _serve({PR7: (500, {}, b"{}")}) as (url_b, _seen):
        monkeypatch.setenv("FORKPATCH_GITHUB_API", url_b)
        code, ups, _text = _status(root, capsys)
    assert code == 0
    got = ups["capability-floor"]
    assert got["state"] == "unknown" and got["reason"] == "HTTP 500", got
    # and the first API's answer still serves the first API (it is gone now: offline)
    monkeypatch.setenv("FORKPATCH_GITHUB_API", url_a)
    got = _status(root, capsys)[1]["capability-floor"]
    assert got["state"] == "merged" and "cannot reach" in got["stale"], got


def _fifo(p: Path) -> None:
    os.mkfifo(p)


CACHES = {
    "a FIFO": _fifo,
    "a link to /dev/zero": lambda p: p.symlink_to("/dev/zero"),
    "a directory": lambda p: p.mkdir(),
    "larger than a cache": lambda p: p.write_bytes(b" " * (5 << 20)),
    "nested 100,000 deep": lambda p: p.write_bytes(b"[" * 100_000 + b"]" * 100_000),
    "NaN and -Infinity": lambda p: p.write_text(
        '{"K": {"state": "open", "fetched": NaN}, "K2": {"state": "open", "fetched": -Infinity}}'
    ),
    "a number past the floats": lambda p: p.write_text(
        '{"K": {"state": "open", "fetched": 1e400, "merge_commit": null}}'
    ),
    "wrong types": lambda p: p.write_text(
        '{"K": {"state": "merged", "fetched": "yesterday", "merge_commit": 7},'
        ' "K2": {"state": ["open"], "fetched": 1}, "K3": {"state": "open", "fetched": true}}'
    ),
    "not UTF-8": lambda p: p.write_bytes(b"\xff\xfe{\x00"),
}


@pytest.mark.parametrize("case", sorted(CACHES))
def test_a_hostile_cache_is_ignored_in_bounded_time(project, case):
    root, _ = project
    path = root / ".forkpatch" / "upstream.json"
    with _serve({}) as (url, _seen):  # every question: 404, so the cache is consulted
        key = f"{url}{PR7}"
        CACHES[case](path)
        if path.is_file() and not path.is_symlink():
            path.write_bytes(path.read_bytes().replace(b'"K', f'"{key}'.encode()))
        t0 = time.monotonic()
        got = fp(
            root,
            "status",
            "--upstream",
            "--json",
            extra_env={"FORKPATCH_GITHUB_API": url, "FORKPATCH_FORGE_TIMEOUT": "5s"},
            timeout=60,
        )
    assert time.monotonic() - t0 < 60
    assert got.returncode == 0, got.stderr
    assert "Traceback" not in got.stderr and "internal error" not in got.stderr
    ups = {p["name"]: p["upstream"] for p in json.loads(got.stdout)["patches"]}
    assert ups["capability-floor"]["state"] == "unknown"
    assert "upstream.json" in got.stderr  # said that it was ignored
    if case == "wrong types":  # a regular file with damaged entries is written back clean
        assert json.loads(path.read_text(encoding="utf-8")) == {}


RELIABILITY = [
    Row(
        "forge answers",
        'answers of another shape: nested 100,000 deep, wrong types ("merged": "no"), '
        "unknown states, a merge commit that is no commit id, NaN / -Infinity, HTML, a list; "
        "GitHub and GitLab shapes",
        f"{len(BAD_PR_ANSWERS)} + 4",
        "unknown with the reason naming the field; never read as merged; status exits 0",
        refused=str(len(BAD_PR_ANSWERS) + 4),
    ),
    Row(
        "forge answers",
        "where a token goes: a merge request on another host, a configured API, a request "
        "to another origin than the token's; URLs with credentials in series.yaml and in an "
        "imported patch's Forwarded:",
        "3 + 3 + 1",
        "the token only to the API it is configured for (asserted on the servers); "
        "credentials refused with a tip, never written or shown",
        refused="4",
    ),
    Row(
        "forge answers",
        "without a token (the public API), rate limits (403 with no requests left, 429 "
        "with a year of Retry-After), an answer from another API origin in the cache",
        "1 + 2 + 1",
        "asked unauthenticated; a rate limit stops the asking at that API, not waited "
        "for; the cache is keyed by the API URL asked",
    ),
    Row(
        "forge answers",
        "hostile forges: " + ", ".join(sorted(HOSTILE)) + "; FORKPATCH_FORGE_TIMEOUT in ms",
        f"{len(HOSTILE)} cases",
        "unknown with the reason, within the request's deadline; the other patch still "
        "read; the token never shown",
        refused=str(len(HOSTILE)),
    ),
    Row(
        "forge answers",
        "the cache file as a FIFO, a link to /dev/zero, a directory, larger than a cache, "
        "nested 100,000 deep, NaN / -Infinity / 1e400 times, wrong types, not UTF-8",
        f"{len(CACHES)} cases",
        "ignored with a warning naming the file, in bounded time; status exits 0",
        refused=str(len(CACHES)),
    ),
]
