"""What the real-fork tier runs against, and its pre-checks.

The tier's tests carry the ``real_fork`` marker and live with their features
(tests/rebase, tests/track, tests/wheels, tests/patchset). The fork:
``FORKPATCH_FORK_REPO`` when set (a developer's clone of 1Cat-vLLM), else the fixture
beside the repository, ``../shared/fixtures/1cat-vllm.git`` (a 39 MB shallow,
read-only copy with the real commit ids; CI copies ``shared/`` beside the clone). The
variable is read here, at import (tests/conftest.py imports this module first),
because tests/conftest.py hides it from every test: no test built on the example fork
may run on the real one.

Everything the tier needs is installed by one command, :data:`SETUP`; a missing
piece skips the test that needs it, naming the piece and that command.
"""

from __future__ import annotations

import importlib.util
import io
import os
import subprocess
import sys
import tarfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from forkpatch.intree import extract_tar
from support import REPO_ROOT

FIXTURES = REPO_ROOT.parent / "shared" / "fixtures"
FIXTURE_FORK = FIXTURES / "1cat-vllm.git"
FIXTURE_WHEEL = FIXTURES / "1cat_vllm-1.2.1-cp311-cp311-linux_x86_64.whl"
SETUP = "bash tests/support/setup-real-fork.sh"

_ENV = os.environ.get("FORKPATCH_FORK_REPO", "")
FORK: str = _ENV or (str(FIXTURE_FORK) if FIXTURE_FORK.is_dir() else "")
if _ENV:
    FORK_SOURCE = "FORKPATCH_FORK_REPO"
elif FORK:
    FORK_SOURCE = "the fixture ../shared/fixtures/1cat-vllm.git"
else:
    FORK_SOURCE = "none (no FORKPATCH_FORK_REPO, no ../shared/fixtures/1cat-vllm.git)"
BASE_TAG = "v1.2.1"

# Modules the fork's code imports on the paths the tier exercises (the patched
# quantization modules, the CLI, platform detection). The extra installs them.
FORK_MODULES = (
    "torch",
    "numpy",
    "psutil",
    "fastapi",
    "pydantic",
    "transformers",
    "regex",
    "cachetools",
    "msgspec",
    "zmq",
    "cbor2",
    "openai",
    "cloudpickle",
    "blake3",
)
BUILD_MODULES = ("setuptools", "setuptools_scm", "setuptools_rust", "wheel", "build")


def fork_or_skip() -> str:
    """The fork repository, or skip saying how to get one."""
    if not FORK or not Path(FORK).is_dir():
        pytest.skip(
            f"no fork repository: set FORKPATCH_FORK_REPO to a clone of 1Cat-vLLM, or put "
            f"the fixture at {FIXTURE_FORK}"
        )
    return FORK


def has_tag(tag: str) -> bool:
    return (
        subprocess.run(
            [
                "git",
                "--git-dir",
                git_dir(fork_or_skip()),
                "rev-parse",
                "-q",
                "--verify",
                f"refs/tags/{tag}",
            ],
            capture_output=True,
            check=False,
        ).returncode
        == 0
    )


def tags_or_skip(*tags: str) -> None:
    missing = [t for t in tags if not has_tag(t)]
    if missing:
        pytest.skip(
            f"the fork repository ({FORK_SOURCE}: {FORK}) lacks tag(s) {', '.join(missing)}"
        )


def git_dir(repo: str) -> str:
    p = Path(repo)
    return str(p / ".git") if (p / ".git").exists() else str(p)


def missing_modules(names: Sequence[str], python: str = sys.executable) -> list[str]:
    if python == sys.executable:
        return [n for n in names if importlib.util.find_spec(n) is None]
    probe = (
        "import importlib.util, sys\n"
        "print(' '.join(n for n in sys.argv[1:] if importlib.util.find_spec(n) is None))"
    )
    try:
        out = subprocess.run(
            [python, "-c", probe, *names], capture_output=True, text=True, check=False
        )
    except OSError as exc:
        return [f"{python} does not run ({exc})"]
    if out.returncode != 0:
        return [f"{python} does not run ({out.stderr.strip()[-200:]})"]
    return out.stdout.split()


def modules_or_skip(names: Sequence[str] = FORK_MODULES, python: str = sys.executable) -> None:
    """Skip unless ``python`` can import every one of ``names``, naming those it cannot."""
    missing = missing_modules(names, python)
    if missing:
        pytest.skip(f"{python} lacks {', '.join(missing)}: `{SETUP}` installs the tier's needs")


def fixture_wheel_or_skip() -> Path:
    if not FIXTURE_WHEEL.is_file():
        pytest.skip(f"the fork's v1.2.1 wheel is not at {FIXTURE_WHEEL}")
    return FIXTURE_WHEEL


def export_tree(rev: str, dest: Path, *paths: str, repo: str | None = None) -> Path:
    """The files of ``rev`` (only ``paths`` when given) in ``dest``, without a clone.

    ``git archive`` reads the objects in place: a clone of the fixture goes through
    git's transport, which refuses its placeholder blobs (and it is shallow).
    """
    data = subprocess.run(
        [
            "git",
            "--git-dir",
            git_dir(repo or fork_or_skip()),
            "archive",
            "--format=tar",
            rev,
            *paths,
        ],
        check=True,
        capture_output=True,
    ).stdout
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        extract_tar(tf, dest)
    return dest


# --------------------------------------------------------------------------- the fork's own wheel build

BUILD_PYTHON = os.environ.get("FORKPATCH_WHEEL_BUILD_PYTHON") or sys.executable


def export_wheel_tree(source: str | Path, commit: str, dest: Path) -> None:
    """The files of ``commit`` in ``source`` without docs/ (nothing under docs/ goes into
    the wheel; the fixture's placeholder blobs are there), read in place."""
    export_tree(commit, dest, ".", ":(exclude)docs", repo=str(source))


def _no_cargo_path() -> str:
    dirs = os.environ.get("PATH", "").split(os.pathsep)
    return os.pathsep.join(d for d in dirs if not (Path(d) / "cargo").exists())


def start_wheel_build(tree: Path, version: str, out: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "VLLM_TARGET_DEVICE": "empty",
        "VLLM_VERSION_OVERRIDE": version,
        # The tree is an export, not a clone: setuptools-scm finds no git metadata.
        "SETUPTOOLS_SCM_PRETEND_VERSION": version,
        "PATH": _no_cargo_path(),
    }
    with open(log, "wb") as fh:
        return subprocess.Popen(
            [
                BUILD_PYTHON,
                "-m",
                "build",
                "--wheel",
                "--no-isolation",
                "--skip-dependency-check",
                "-o",
                str(out),
                ".",
            ],
            cwd=tree,
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
        )


def finish_wheel_build(proc: subprocess.Popen[bytes], out: Path, log: Path) -> Path:
    rc = proc.wait(timeout=1200)
    assert rc == 0, f"wheel build failed ({rc}):\n{log.read_text(errors='replace')[-6000:]}"
    wheels = sorted(out.glob("*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]
