"""Credentials before anything is pushed: ci/forkpatch-ci.sh open-change on a rebased
release, against the fake GitLab API and the stand-in gh, with each way a token can be
missing or wrong. One line names the variable (and the scope), no traceback, no push."""

from __future__ import annotations

import functools
import http.server
import os
import sys
import threading

import pytest

from support.git import git
from support.github import STANDIN_GH
from support.servers import TOKEN, Forge, serve_forge
from support.track import add_origin, make_setup, run_ci, tag_release

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def rebased(tmp_path_factory):
    """A project whose track step rebased v1.3.0 (the open-change step's input)."""
    root = tmp_path_factory.mktemp("forge")
    setup = make_setup(root, tag_v130=False)
    origin = add_origin(setup)
    tag_release(setup, "v1.3.0")
    assert run_ci("track", setup).rc == 0
    return setup, origin


def _no_push(origin) -> bool:
    return git(origin, "for-each-ref", "refs/heads/forkpatch/") == ""


def _one_error_line(stderr: str, message: str) -> None:
    assert "Traceback" not in stderr and "JSONDecodeError" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and message in errors[0], stderr


@pytest.mark.parametrize(
    ("forge", "env", "message"),
    [
        (
            Forge(),
            {"FORKPATCH_GITLAB_TOKEN": ""},
            "FORKPATCH_GITLAB_TOKEN is not set: add a project access token",
        ),
        (Forge(token="other"), {}, "FORKPATCH_GITLAB_TOKEN was refused by"),
        (
            Forge(scopes=("api",)),
            {},
            "FORKPATCH_GITLAB_TOKEN lacks the scope(s) write_repository (it has: api)",
        ),
        (
            Forge(),
            {"FORKPATCH_GITLAB_API": "http://127.0.0.1:9/api/v4"},
            "cannot reach the GitLab API at http://127.0.0.1:9/api/v4",
        ),
        (Forge(), {"FORKPATCH_GITLAB_API": "{html}"}, "answered with something that is not JSON"),
    ],
    ids=["missing", "refused", "scope", "unreachable", "not-json"],
)
def test_gitlab_credentials(rebased, tmp_path, forge, env, message):
    setup, origin = rebased
    # A web server that answers with a login page (a wrong FORKPATCH_GITLAB_API).
    page = tmp_path / "site" / "api" / "personal_access_tokens" / "self"
    page.parent.mkdir(parents=True)
    page.write_text("<html><body>Sign in</body></html>")
    handler = functools.partial(
        http.server.SimpleHTTPRequestHandler, directory=str(tmp_path / "site")
    )
    html = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=html.serve_forever, daemon=True).start()
    try:
        with serve_forge(forge):
            values = {
                "FORKPATCH_GITLAB_TOKEN": TOKEN,
                "FORKPATCH_GITLAB_API": forge.url,
                **env,
            }
            values = {
                k: v.replace("{html}", f"http://127.0.0.1:{html.server_port}/api")
                for k, v in values.items()
            }
            r = run_ci(
                "open-change",
                setup,
                FORKPATCH_CI_DRY_RUN="0",
                FORKPATCH_CI_PLATFORM="gitlab",
                CI_PROJECT_ID="7",
                FORKPATCH_PUSH_URL=str(origin),
                **values,
            )
    finally:
        html.shutdown()
        html.server_close()
    assert r.rc == 1
    _one_error_line(r.stderr, message)
    assert _no_push(origin) and forge.sent == []


def _gh(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    gh = bin_dir / "gh"
    gh.write_text(STANDIN_GH.format(python=sys.executable))
    gh.chmod(0o755)
    return {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "STANDIN_GH_LOG": str(tmp_path / "gh.log"),
        "STANDIN_GH_STATE": str(tmp_path / "gh.json"),
    }


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "GH_TOKEN is not set: the open-change job needs a token that may push"),
        (
            {
                "GH_TOKEN": "x",
                "STANDIN_GH_FAIL": "HTTP 401: Bad credentials (https://api.github.com/repos/team/project)",
            },
            "the GitHub token was refused (401)",
        ),
        (
            {"GH_TOKEN": "x", "STANDIN_GH_FAIL": "error connecting to api.github.com"},
            "cannot reach the GitHub API for team/project",
        ),
    ],
    ids=["missing", "refused", "unreachable"],
)
def test_github_credentials(rebased, tmp_path, env, message):
    setup, origin = rebased
    r = run_ci(
        "open-change",
        setup,
        FORKPATCH_CI_DRY_RUN="0",
        FORKPATCH_CI_PLATFORM="github",
        GITHUB_REPOSITORY="team/project",
        FORKPATCH_PUSH_URL=str(origin),
        **_gh(tmp_path),
        **env,
    )
    assert r.rc == 1
    _one_error_line(r.stderr, message)
    assert _no_push(origin)
    assert not (tmp_path / "gh.json").exists()  # no pull request either
