"""Helpers for the `forkpatch track` tests: an upstream fork, a project repository,
a stub torch wheel, a pypiserver on 127.0.0.1 and the CI driver script."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from fptest import serve_pypiserver

from forkpatch.series import PatchEntry, load_series, save_series

SECRET = "s3cret-index-password"
REPO_ROOT = Path(__file__).resolve().parents[2]
CI_SCRIPT = REPO_ROOT / "ci" / "forkpatch-ci.sh"
GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "test@example.invalid",
    "GIT_COMMITTER_NAME": "Test Author",
    "GIT_COMMITTER_EMAIL": "test@example.invalid",
    "GIT_AUTHOR_DATE": "2026-09-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-09-01T00:00:00Z",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}


def git(repo: Path, *args: str, date: str | None = None) -> str:
    env = {**os.environ, **GIT_ENV}
    for k in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        env.pop(k, None)
    if date:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = date
    return (
        subprocess.run(["git", "-C", str(repo), *args], check=True, env=env, capture_output=True)
        .stdout.decode()
        .strip()
    )


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
    from forkpatch.example import build_release_wheel, make_fork, write_example_patches
    from forkpatch.importer import import_patches
    from forkpatch.ops import init_project

    fork = make_fork(root / "fork").path
    if not tag_v130:
        git(fork, "tag", "-d", "v1.3.0")
    incoming = write_example_patches(fork, "v1.2.1", root / "incoming")
    project = init_project(
        root / "project",
        fork_url=str(fork),
        base_tag="v1.2.1",
        fork_name="1Cat-vLLM (example)",
        distribution="1cat-vllm",
        fork_override=None,
    )
    import_patches(project, files=incoming, quilt_dir=None)
    release = root / "release"
    for tag in ("v1.2.1", "v1.3.0") if tag_v130 else ("v1.2.1",):
        build_release_wheel(fork, tag, release)
    path = project.series_path
    s = load_series(path)
    s = s.with_patches(
        [
            *s.patches,
            PatchEntry(
                name="vllm-dist-info",
                build_step="vllm-dist-info",
                summary="version('vllm') reads the wheel's version",
            ),
        ]
    )
    secs = {
        "build": {"base-wheel": str(release / "1cat_vllm-{version}-py3-none-any.whl")},
        **(sections or {}),
    }
    s = replace(s, sections={**s.sections, **secs})
    save_series(s, path)
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


_STUB = {
    "torch/__init__.py": (
        '"""A stand-in for torch: enough to import the example fork\'s modules."""\n'
        "from types import SimpleNamespace\n\nfrom torch import cuda, nn  # noqa: F401\n\n"
        '__version__ = "0.0.0+stub"\nversion = SimpleNamespace(cuda=None)\n\n\n'
        "def compile(fn=None, **kwargs):\n    return fn if fn is not None else (lambda f: f)\n"
    ),
    "torch/cuda/__init__.py": "def is_available():\n    return False\n\n\n"
    "def device_count():\n    return 0\n",
    "torch/nn/__init__.py": "from torch.nn import functional  # noqa: F401\n",
    "torch/nn/functional.py": "",
}


def stub_torch_wheel(out_dir: Path) -> Path:
    """torch-0.0.0+stub, pure Python (smoke environments get it with --smoke-with)."""
    di = "torch-0.0.0+stub.dist-info"
    members = dict(_STUB)
    members[f"{di}/METADATA"] = "Metadata-Version: 2.1\nName: torch\nVersion: 0.0.0+stub\n"
    members[f"{di}/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: forkpatch-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    record = []
    for name, text in members.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{name},sha256={digest.decode()},{len(text.encode())}")
    record.append(f"{di}/RECORD,,")
    members[f"{di}/RECORD"] = "\n".join(record) + "\n"
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "torch-0.0.0+stub-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in members.items():
            zf.writestr(zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0)), text)
    return path


@contextlib.contextmanager
def pypiserver(packages: Path) -> Iterator[str]:
    """A pypiserver on 127.0.0.1 that accepts uploads without authentication."""
    packages.mkdir(parents=True, exist_ok=True)
    with serve_pypiserver(
        packages,
        ["-a", ".", "-P", ".", "--disable-fallback"],
        log=packages.parent / "pypiserver.log",
    ) as (url, _proc):
        yield url


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


def index_files(url: str, project: str = "1cat-vllm") -> list[str]:
    try:
        page = urllib.request.urlopen(f"{url}simple/{project}/", timeout=10).read().decode()
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return []
        raise
    import re

    return sorted(set(re.findall(r">([^<]+\.whl)<", page)))
