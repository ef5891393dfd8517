"""The smoke and publish tests' wheel: a real overlay wheel of the example fork, and
smoke reports.

The wheel is built the way an operator builds one: the example fork's v1.2.1
source is built with ``pip wheel`` (the "released" base wheel), a project
imports the example patches plus the vllm-dist-info build step, and
``forkpatch.wheels.buildwheel.build_wheel`` makes the overlay wheel with its
provenance.
"""

from __future__ import annotations

import hashlib
import io
import shutil
import subprocess
import tarfile
from dataclasses import dataclass, replace
from pathlib import Path

from forkpatch.intree import extract_tar
from support.projects import example_project
from support.venvs import pip_wheel


@dataclass(frozen=True)
class ExampleBuild:
    project: Path  # a pristine project (copy it before changing it)
    wheel: Path  # the overlay wheel built from it
    base_wheel: Path
    fork: Path


def build_example(root: Path) -> ExampleBuild:
    from forkpatch.wheels.buildwheel import BuildOptions, build_wheel

    fork, project = example_project(root, fork_name="1Cat-vLLM (example)", build_step=True)
    # The "released" fork wheel for v1.2.1.
    src = root / "src-v1.2.1"
    src.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(fork), "archive", "--format=tar", "v1.2.1"],
        check=True,
        stdout=subprocess.PIPE,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tf:
        extract_tar(tf, src)
    base_wheel = pip_wheel(src, root / "base")
    result = build_wheel(
        project, BuildOptions(mode="overlay", base_wheel=base_wheel, out_dir=root / "dist")
    )
    return ExampleBuild(
        project=project.root, wheel=result.wheels[0], base_wheel=base_wheel, fork=fork
    )


def copy_project(build: ExampleBuild, dest: Path, *, edit_description: bool = False) -> Path:
    """A copy of the example's project at ``dest``; ``edit_description``: with another
    description in cli-version.patch (the wheel no longer matches the series)."""
    shutil.copytree(build.project, dest, symlinks=True)
    if edit_description:
        patch = dest / "patches" / "cli-version.patch"
        patch.write_bytes(b"An edited description.\n\n" + patch.read_bytes())
    return dest


def set_smoke(
    project: Path,
    checks: dict[str, list[str]],
    sections: dict[str, dict[str, object]] | None = None,
) -> None:
    """Set the ``smoke:`` lists of patches (and optional sections) in series.yaml."""
    from forkpatch.series import load_series, save_series

    path = project / "series.yaml"
    s = load_series(path)
    s = s.with_patches([replace(p, smoke=tuple(checks.get(p.name, p.smoke))) for p in s.patches])
    if sections:
        s = replace(s, sections={**s.sections, **sections})
    save_series(s, path)


def passing_report(wheel: Path, tiers: tuple[str, ...] = ("static", "sm70")) -> Path:
    """A consistent smoke report beside ``wheel`` in which ``tiers`` passed (one check each)."""
    from forkpatch.smoke.report import (
        REPORT_SUFFIX,
        CheckResult,
        SmokeReport,
        WheelEntry,
        write_report,
    )

    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    report = SmokeReport(
        wheels=[WheelEntry(sha, file=wheel.name)],
        primary_sha256=sha,
        version="1.2.1",
        requested_tiers=list(tiers),
        checks=[CheckResult(f"{t}.check", t, "passed") for t in tiers],
        environment={},
        device={},
        patches=[],
    )
    return write_report(report, wheel.with_name(wheel.name + REPORT_SUFFIX))


# A patch that makes `vllm --version` crash: the console script imports this package.
BREAK_CLI = b"""Break the CLI on purpose (a bisect test).

diff --git a/vllm/entrypoints/cli/__init__.py b/vllm/entrypoints/cli/__init__.py
--- a/vllm/entrypoints/cli/__init__.py
+++ b/vllm/entrypoints/cli/__init__.py
@@ -0,0 +1 @@
+raise RuntimeError("the CLI is broken on purpose")
"""


def broken_project(build: ExampleBuild, dest: Path) -> Path:
    """The example project with 'break-cli' inserted in the middle of the series (#3 of 6)."""
    from forkpatch.series import PatchEntry, load_series, save_series

    project = copy_project(build, dest)
    (project / "patches" / "break-cli.patch").write_bytes(BREAK_CLI)
    path = project / "series.yaml"
    s = load_series(path)
    names = s.names()
    at = names.index("odd-width-padding") + 1
    entry = PatchEntry(name="break-cli", file="break-cli.patch", summary="Break the CLI on purpose")
    patches = [*s.patches[:at], entry, *s.patches[at:]]
    # Only checks that need no torch: the bisect must not depend on the smoke box.
    patches = [replace(p, smoke=()) for p in patches]
    save_series(s.with_patches(patches), path)
    return project
