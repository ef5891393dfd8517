"""`forkpatch status --upstream`: pull/merge requests asked of a stand-in forge on 127.0.0.1
(GitHub and GitLab REST shapes), cached with their age; offline, rate limits, 404, a
redirect and a slow answer never make status fail."""

from __future__ import annotations

import contextlib
import http.server
import json
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
from forkpatch.series import load_series, save_series
from support.git import git
from support.projects import example_project

GH_TOKEN, GL_TOKEN = "ghp_forkpatch_secret_123", "glpat-forkpatch-secret-456"
NOT_IN_FORK = "f" * 40


class _Forge(http.server.BaseHTTPRequestHandler):
    routes: ClassVar[dict[str, Any]] = {}
    seen: ClassVar[list[dict[str, str]]] = []

    def do_GET(self) -> None:
        self.seen.append({"path": self.path, **{k.lower(): v for k, v in self.headers.items()}})
        route = self.routes.get(self.path)
        if route is None:
            status, headers, body = 404, {}, {"message": "Not Found"}
        else:
            status, headers, body, delay = route
            time.sleep(delay)
        data = json.dumps(body).encode()
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


LAST: dict[str, type[_Forge]] = {}


@contextlib.contextmanager
def _serve(routes: dict[str, Any]) -> Iterator[str]:
    handler = type("Forge", (_Forge,), {"routes": routes, "seen": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    LAST[url] = handler
    try:
        yield url
    finally:
        server.shutdown()
        server.server_close()


def _pr(state: str, *, draft: bool = False, merged: bool = False, sha: str | None = None) -> dict:
    # the fields GET /repos/{owner}/{repo}/pulls/{n} answers with (and more)
    return {
        "number": 7,
        "state": state,
        "draft": draft,
        "merged": merged,
        "merged_at": "2026-08-10T12:00:00Z" if merged else None,
        "merge_commit_sha": sha,
        "html_url": "https://github.com/acme/vllm/pull/7",
    }


def _mr(state: str, *, draft: bool = False, sha: str | None = None, squash: str | None = None):
    # GET /projects/:id/merge_requests/:iid
    return {
        "iid": 3,
        "state": state,
        "draft": draft,
        "merge_commit_sha": sha,
        "squash_commit_sha": squash,
    }


@pytest.fixture
def project(tmp_path, monkeypatch) -> tuple[Path, str]:
    fork, proj = example_project(tmp_path)
    released = git(fork, "rev-parse", "v1.3.0")
    upstreams = {
        "capability-floor": "sent as https://github.com/acme/vllm/pull/7",
        "odd-width-padding": "https://github.com/acme/vllm/pull/8 (review)",
        "eager-block-cast": "https://gitlab.example.com/team/sub/vllm/-/merge_requests/3",
        "cli-version": f"upstreamed (commit {released})",
    }
    s = load_series(proj.series_path)
    s = s.with_patches(replace(p, upstream=upstreams.get(p.name, p.upstream)) for p in s.patches)
    save_series(s, proj.series_path)
    for var in ("GITHUB_TOKEN", "GH_TOKEN", "GITLAB_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    return proj.root, released


def _status(root: Path, capsys) -> tuple[int, dict[str, dict], str]:
    code = main(["-C", str(root), "status", "--upstream", "--json"])
    out, err = capsys.readouterr()
    return code, {p["name"]: p["upstream"] for p in json.loads(out)["patches"]}, out + err


def _routes(released: str) -> dict[str, Any]:
    return {
        "/repos/acme/vllm/pulls/7": (200, {}, _pr("closed", merged=True, sha=released), 0),
        "/repos/acme/vllm/pulls/8": (200, {}, _pr("open", draft=True), 0),
        "/api/v4/projects/team%2Fsub%2Fvllm/merge_requests/3": (
            200,
            {},
            _mr("merged", sha=None, squash=NOT_IN_FORK),
            0,
        ),
    }


def _point(monkeypatch, url: str) -> None:
    monkeypatch.setenv("FORKPATCH_GITHUB_API", url)
    monkeypatch.setenv("FORKPATCH_GITLAB_API", url + "/api/v4")
    monkeypatch.setenv("GITHUB_TOKEN", GH_TOKEN)
    monkeypatch.setenv("GITLAB_TOKEN", GL_TOKEN)


def test_states_releases_and_the_cache(project, monkeypatch, capsys):
    root, released = project
    routes = _routes(released)
    with _serve(routes) as url:
        _point(monkeypatch, url)
        code, ups, text = _status(root, capsys)
        seen = LAST[url].seen
    assert code == 0
    assert {s["path"]: s.get("authorization") or s.get("private-token") for s in seen} == {
        "/repos/acme/vllm/pulls/7": f"Bearer {GH_TOKEN}",
        "/repos/acme/vllm/pulls/8": f"Bearer {GH_TOKEN}",
        "/api/v4/projects/team%2Fsub%2Fvllm/merge_requests/3": f"Bearer {GL_TOKEN}",
    }
    floor = ups["capability-floor"]
    assert floor["state"] == "merged" and floor["release"] == "v1.3.0"
    assert floor["url"] == "https://github.com/acme/vllm/pull/7" and floor["age"] == "0 s"
    assert ups["odd-width-padding"]["state"] == "draft"
    cast = ups["eager-block-cast"]
    assert cast["state"] == "merged" and cast["release"] == "not yet released"
    cli = ups["cli-version"]
    assert cli["state"] == "merged" and cli["release"] == "v1.3.0" and cli["kind"] == "commit"
    assert GH_TOKEN not in text and GL_TOKEN not in text
    cache = (root / ".forkpatch" / "upstream.json").read_text()
    assert GH_TOKEN not in cache and GL_TOKEN not in cache
    assert json.loads(cache)[f"{url}/repos/acme/vllm/pulls/7"]["state"] == "merged"


@pytest.mark.parametrize(
    ("route", "reason"),
    [
        (
            (403, {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "9999999999"}, {}, 0),
            "HTTP 403: rate limited",
        ),
        ((429, {"Retry-After": "120"}, {}, 0), "rate limited (HTTP 429)"),
        ((500, {}, {}, 0), "HTTP 500"),
        ((200, {}, ["not", "an", "object"], 0), "not a JSON object"),
    ],
)
def test_a_failing_forge_gives_the_last_known_answer_with_its_age(
    project, monkeypatch, capsys, route, reason
):
    root, released = project
    routes = _routes(released)
    with _serve(routes) as url:
        _point(monkeypatch, url)
        assert _status(root, capsys)[0] == 0
        routes["/repos/acme/vllm/pulls/8"] = route
        code, ups, _text = _status(root, capsys)
    assert code == 0
    draft = ups["odd-width-padding"]
    assert draft["state"] == "draft" and reason in draft["stale"], draft
    assert draft["age"].endswith(" s")


def test_no_token_no_cache_404_redirect_and_slow(project, monkeypatch, capsys):
    root, released = project
    routes = _routes(released)
    routes["/repos/acme/vllm/pulls/8"] = (
        301,
        {"Location": "/repos/acme/vllm-moved/pulls/8"},
        {},
        0,
    )
    routes["/repos/acme/vllm-moved/pulls/8"] = (200, {}, _pr("closed"), 0)
    routes["/repos/acme/vllm/pulls/7"] = (200, {}, _pr("open"), 3)  # slow
    routes.pop("/api/v4/projects/team%2Fsub%2Fvllm/merge_requests/3")  # 404
    monkeypatch.setattr(upstream_status, "TIMEOUT_S", 1.0)
    with _serve(routes) as url:
        _point(monkeypatch, url)
        code, ups, _text = _status(root, capsys)
        monkeypatch.delenv("GITLAB_TOKEN")
        code2, ups2, _text = _status(root, capsys)
    assert code == 0 and code2 == 0
    assert ups["odd-width-padding"]["state"] == "closed"  # through the redirect
    slow = ups["capability-floor"]
    assert slow["state"] == "unknown" and "no answer in time" in slow["reason"]
    missing = ups["eager-block-cast"]
    assert missing["state"] == "unknown" and "not found (HTTP 404" in missing["reason"]
    # without a token the (public) API is still asked, and the reason says what a token
    # would change
    assert ups2["eager-block-cast"] == {
        **missing,
        "reason": "not found (HTTP 404; asked without a token: a private one needs GITLAB_TOKEN)",
    }


def test_offline_with_nothing_known_is_unknown_and_status_still_succeeds(
    project, monkeypatch, capsys
):
    root, _released = project
    monkeypatch.setenv("FORKPATCH_GITHUB_API", "http://127.0.0.1:9")  # nothing listens
    monkeypatch.setenv("GITHUB_TOKEN", GH_TOKEN)
    code, ups, text = _status(root, capsys)
    assert code == 0
    assert ups["capability-floor"]["state"] == "unknown"
    assert "cannot reach http://127.0.0.1:9/" in ups["capability-floor"]["reason"]
    assert GH_TOKEN not in text


def test_a_redirect_to_another_host_drops_the_token():
    from forkpatch import forgehttp

    with _serve({"/y": (200, {}, {"ok": True}, 0)}) as other:
        elsewhere = other.replace("127.0.0.1", "localhost")
        routes = {"/x": (302, {"Location": f"{elsewhere}/y"}, {}, 0)}
        with _serve(routes) as start:
            auth = Auth("Bearer s3cret", start)
            got = forgehttp.get_json(f"{start}/x", auth=auth)
            first = LAST[start].seen
    assert got.data == {"ok": True}
    assert first[0]["authorization"] == "Bearer s3cret"
    assert "authorization" not in LAST[other].seen[0]


def test_references_in_upstream_text():
    from forkpatch.series import PatchEntry

    def ref(text: str):
        return upstream_status.reference(
            PatchEntry(name="p", summary="s", file="p.patch", upstream=text)
        )

    assert ref("https://github.com/o/r/pull/12").kind == "github-pr"
    gl = ref("see https://gitlab.com/a/b/c/-/merge_requests/5 please")
    assert gl.kind == "gitlab-mr" and gl.api.endswith("/projects/a%2Fb%2Fc/merge_requests/5")
    assert ref("https://github.com/o/r/commit/0123456789abcdef").commit == "0123456789abcdef"
    assert ref("backport of 03664e6b1ced8cef59d25e89e1edffbdfc518966").commit.startswith("03664e6")
    assert ref("not upstream (fork-specific)") is None
