"""Shared helpers for the smoke and publish tests: a real wheel from the example fork.

The wheel is built the way an operator builds one: the example fork's v1.2.1
source is built with ``pip wheel`` (the "released" base wheel), a project
imports the example patches plus the vllm-dist-info build step, and
``forkpatch.wheels.buildwheel.build_wheel`` makes the overlay wheel with its
provenance.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

from fptest import Runner, free_port

from forkpatch.series import PatchEntry


@dataclass(frozen=True)
class ExampleBuild:
    project: Path  # a pristine project (copy it before changing it)
    wheel: Path  # the overlay wheel built from it
    base_wheel: Path
    fork: Path


def build_example(root: Path) -> ExampleBuild:
    from forkpatch.example import make_fork, write_example_patches
    from forkpatch.importer import import_patches
    from forkpatch.ops import init_project
    from forkpatch.wheels.buildwheel import BuildOptions, build_wheel

    fork = make_fork(root / "fork").path
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
    series = project.series
    project.save_series(
        series.with_patches(
            [
                *series.patches,
                PatchEntry(
                    name="vllm-dist-info",
                    build_step="vllm-dist-info",
                    summary="version('vllm') reads the wheel's version",
                ),
            ]
        )
    )
    # The "released" fork wheel for v1.2.1.
    src = root / "src-v1.2.1"
    src.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(fork), "archive", "--format=tar", "v1.2.1"],
        check=True,
        stdout=subprocess.PIPE,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tf:
        tf.extractall(src, filter="data")
    base_dir = root / "base"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "-q",
            "-w",
            str(base_dir),
            str(src),
        ],
        check=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    base_wheel = next(base_dir.glob("*.whl"))
    result = build_wheel(
        project, BuildOptions(mode="overlay", base_wheel=base_wheel, out_dir=root / "dist")
    )
    return ExampleBuild(
        project=project.root, wheel=result.wheels[0], base_wheel=base_wheel, fork=fork
    )


def copy_project(build: ExampleBuild, dest: Path) -> Path:
    shutil.copytree(build.project, dest, symlinks=True)
    return dest


def set_smoke(
    project: Path,
    checks: dict[str, list[str]],
    sections: dict[str, dict[str, object]] | None = None,
) -> None:
    """Set the ``smoke:`` lists of patches (and optional sections) in series.yaml."""
    from dataclasses import replace

    from forkpatch.series import load_series, save_series

    path = project / "series.yaml"
    s = load_series(path)
    s = s.with_patches([replace(p, smoke=tuple(checks.get(p.name, p.smoke))) for p in s.patches])
    if sections:
        s = replace(s, sections={**s.sections, **sections})
    save_series(s, path)


def new_venv(path: Path) -> Path:
    """A bare venv (no system packages), pip driven from this interpreter."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    return path / "bin" / "python"


def pip_into(
    python: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "--disable-pip-version-check",
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
    )


def venv_version(python: Path) -> dict[str, str]:
    code = (
        "import importlib.metadata as m, json, vllm; "
        "print(json.dumps({'dist': m.version('1cat-vllm'), 'vllm': m.version('vllm'), "
        "'file': vllm.__file__}))"
    )
    out = subprocess.run(
        [str(python), "-I", "-c", code], check=True, stdout=subprocess.PIPE, text=True, cwd="/"
    )
    return json.loads(out.stdout)
