"""`forkpatch base-wheel`: the fork's Python-only wheel at the series' base (or --onto
REF), built by the fork's own setup.py and kept by fork commit; build-wheel takes it
when given no base wheel; and build-wheel's auto mode says why it goes to a container
when there is none.

The fork here is a scratch repository shaped like the fork where it matters: a
``setup.py`` that takes ``VLLM_VERSION_OVERRIDE`` (as the fork's does) and writes
``vllm/_version.py``; its Python-only build uses the fork's toolchain, so those tests
skip without it (`bash tests/support/setup-real-fork.sh` installs it).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from forkpatch.series import load_series
from forkpatch.wheels.basewheel import TOOLCHAIN
from support import realfork
from support.cli import Runner
from support.git import ScratchRepo
from support.procs import alive

SETUP_PY = """\
import os
from setuptools import setup

version = os.environ["VLLM_VERSION_OVERRIDE"]
with open("vllm/_version.py", "w", encoding="utf-8") as fh:
    fh.write(f"__version__ = version = {version!r}\\n")
setup(name="1cat-vllm", version=version, packages=["vllm"])
"""


@pytest.fixture
def fork(tmp_path: Path) -> ScratchRepo:
    repo = ScratchRepo(tmp_path / "fork")
    repo.add_file("setup.py", SETUP_PY)
    repo.add_file("vllm/__init__.py", "")
    repo.add_file("vllm/ops.py", "def width():\n    return 120\n")
    repo.add_file(".gitignore", "vllm/_version.py\n")
    repo.add_file("docs/big.md", "not in the wheel\n")
    repo.commit("fork 1.0.0")
    repo.tag("v1.0.0")
    return repo


@pytest.fixture
def project(tmp_path: Path, fork: ScratchRepo, capsys) -> tuple[Path, Runner]:
    project = tmp_path / "project"
    project.mkdir()
    run = Runner(project, capsys)
    run("init", "--fork-url", str(fork.path), "--base", "v1.0.0")
    run("apply")
    run("new", "wider")
    ops = project / ".forkpatch" / "worktree" / "vllm" / "ops.py"
    ops.write_text("def width():\n    return 128\n")
    run("refresh")
    return project, run


def test_base_wheel_is_built_once_per_commit_and_build_wheel_takes_it(project, fork, tmp_path):
    realfork.modules_or_skip(TOOLCHAIN)
    root, run = project
    _, out, err = run("base-wheel", "--json")
    made = json.loads(out)
    base = fork.rev("v1.0.0^{commit}")
    assert made["commit"] == base and made["version"] == "1.0.0" and not made["cached"]
    wheel = Path(made["wheel"])
    assert wheel.parent == root / ".forkpatch" / "base-wheels" / base
    assert wheel.name.startswith("1cat_vllm-1.0.0-")
    assert "VLLM_TARGET_DEVICE=empty" in err
    _, out, _ = run("base-wheel")
    assert out.strip() == str(wheel)
    # auto mode finds it: an overlay build, no Docker
    _, out, err = run("build-wheel", "--json")
    built = json.loads(out)
    assert built["mode"] == "overlay" and built["version"].startswith("1.0.0+fp.")
    assert "built by `forkpatch base-wheel`" in err
    run("verify", built["wheels"][0])

    # On a commit past the tag (a rebase onto it), the wheel of that commit.
    fork.add_file("vllm/later.py", "X = 1\n")
    later = fork.commit("later")
    run("rebase", "--onto", later)
    assert load_series(root / "series.yaml").base.tag == ""
    _, out, _ = run("base-wheel", "--json")
    made = json.loads(out)
    assert made["version"] == f"1.0.1.dev1+g{later[:12]}" and made["commit"] == later
    _, out, _ = run("build-wheel", "--json")
    assert json.loads(out)["version"].startswith(f"1.0.1.dev1+g{later[:12]}.fp.")
    # --onto a tag made later: its own wheel, the project untouched
    fork.add_file("vllm/even_later.py", "Y = 2\n")
    fork.commit("1.1.0")
    fork.tag("v1.1.0")
    before = (root / "series.yaml").read_bytes()
    _, out, _ = run("base-wheel", "--onto", "v1.1.0", "--json")
    assert json.loads(out)["version"] == "1.1.0"
    assert (root / "series.yaml").read_bytes() == before


def test_a_python_without_the_build_toolchain_is_named_before_anything_runs(project, tmp_path):
    root, run = project
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    _, _, err = run("base-wheel", "--python", str(bare / "bin" / "python"), expect=1)
    assert "the fork's Python-only wheel build needs setuptools, setuptools_scm" in err
    assert "a CPU torch: `" in err and "-m pip install 'setuptools>=77.0.3,<81'" in err
    assert not (root / ".forkpatch" / "base-wheels").exists() or not any(
        (root / ".forkpatch" / "base-wheels").glob("*/*.whl")
    )


def test_a_tree_that_cannot_build_a_wheel_is_refused(tmp_path, capsys):
    realfork.modules_or_skip(TOOLCHAIN)
    repo = ScratchRepo(tmp_path / "no-setup")
    repo.add_file("vllm/__init__.py", "")
    repo.commit("no build files")
    repo.tag("v1.0.0")
    (tmp_path / "p").mkdir()
    run = Runner(tmp_path / "p", capsys)
    run("init", "--fork-url", str(repo.path), "--base", "v1.0.0")
    _, _, err = run("base-wheel", expect=1)
    assert "has no setup.py or pyproject.toml" in err and "--base-wheel" in err


@pytest.mark.parametrize("toolchain", ["apt", "wheels"])
def test_auto_mode_without_a_base_wheel_says_why_and_what_to_pass(
    example_project, tmp_path, monkeypatch, toolchain
):
    _root, run = example_project
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    _, _, err = run("build-wheel", "--toolchain", toolchain, expect=1)
    assert "the series touches only Python files, but there is no base wheel" in err
    if toolchain == "apt":
        assert "installs its toolchain from the network" in err
    assert "auto mode built in a container because no base wheel of the fork's 1.2.1" in err
    assert (
        "tip: pass --base-wheel with the fork's 1.2.1 wheel, or run `forkpatch base-wheel`" in err
    )
    assert "no Docker engine" in err


def test_a_build_that_hangs_ends_at_its_timeout(project, tmp_path, monkeypatch):
    """The fork's setup.py is outside code: a build that never ends is stopped at the
    base-wheel build's bound, named, and its processes are gone."""
    import time

    from forkpatch.wheels import basewheel

    realfork.modules_or_skip(TOOLCHAIN)
    _root, run = project
    hung = tmp_path / "hung-python"
    pidfile = tmp_path / "build.pid"
    hung.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "-m" ]; then exec sh -c \'echo $$ > {pidfile}; exec sleep 60\'; fi\n'
        f'exec {sys.executable} "$@"\n'
    )
    hung.chmod(0o755)
    monkeypatch.setattr(basewheel, "BUILD_TIMEOUT_S", 2.0)
    started = time.monotonic()
    _, _, err = run("base-wheel", "--python", str(hung), expect=1)
    assert time.monotonic() - started < 30, err
    assert "build the fork's Python-only wheel" in err and "timed out" in err.lower(), err
    assert not alive(int(pidfile.read_text()))
