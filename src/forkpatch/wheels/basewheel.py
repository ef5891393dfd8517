"""`forkpatch base-wheel`: the fork's own Python-only wheel at a commit, for overlay builds.

An overlay build (`build-wheel --mode overlay`, `droppable`, `smoke --bisect`) patches
the fork's wheel for the series' base. Where a team has no such wheel (the fork
publishes none for a commit between releases, a branch head, or the team builds no
release wheels of its own), the fork builds a Python-only one in seconds: its own
``setup.py`` with ``VLLM_TARGET_DEVICE=empty`` (no compiled code), the version set to
the one forkpatch counts for the commit (``VLLM_VERSION_OVERRIDE``:
:mod:`forkpatch.baseversion`), built by an interpreter that has the fork's build
toolchain. ``cargo`` is kept off PATH, so the fork's optional Rust part is skipped
and the wheel is the same on every machine.

Wheels are kept by fork commit in ``.forkpatch/base-wheels/<commit>/``: a second
call, and every overlay build of a series on that commit that is given no base
wheel, take it from there. Such a wheel has no ``_C`` modules: it serves overlay
builds, ``verify`` and the static smoke tier, never a V100 (the sm70 tier needs the
fork's CUDA release wheel).
"""

from __future__ import annotations

import io
import os
import shutil
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from forkpatch import log
from forkpatch import proc as runner
from forkpatch.errors import BuildError, ToolMissing
from forkpatch.intree import extract_tar
from forkpatch.project import Project
from forkpatch.series import BaseRef

CACHE_DIR = "base-wheels"
#: What the fork's Python-only build imports (its setup.py and build backend).
TOOLCHAIN = ("setuptools", "setuptools_scm", "setuptools_rust", "wheel", "build", "torch")
TOOLCHAIN_INSTALL = (
    "-m pip install 'setuptools>=77.0.3,<81' 'setuptools-scm>=8' 'setuptools-rust>=1.9' wheel build"
)
TORCH_INSTALL = "-m pip install torch --index-url https://download.pytorch.org/whl/cpu"
BUILD_TIMEOUT_S = 1800.0  # the fork's setup.py: a build that hangs ends, named


@dataclass(frozen=True)
class BaseWheel:
    """A Python-only wheel of the fork at ``commit``."""

    path: Path
    commit: str
    version: str
    base: BaseRef
    cached: bool
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "wheel": str(self.path),
            "commit": self.commit,
            "tag": self.base.tag or None,
            "version": self.version,
            "cached": self.cached,
            "seconds": round(self.seconds, 3),
        }


def cache_dir(project: Project, commit: str) -> Path:
    return project.state_dir / CACHE_DIR / commit


def cached(project: Project, commit: str, version: str | None = None) -> Path | None:
    """The base wheel built earlier for ``commit`` (of ``version`` when given), if any."""
    where = cache_dir(project, commit)
    if not where.is_dir():
        return None
    distribution = canonicalize_name(project.series.fork.distribution)
    for wheel in sorted(where.glob("*.whl")):
        try:
            name, got, _build, _tags = parse_wheel_filename(wheel.name)
        except InvalidWheelFilename:
            continue
        if name == distribution and (version is None or str(got) == version):
            return wheel
    return None


def target_base(project: Project, onto: str | None) -> BaseRef:
    """The series' base, or what ``onto`` resolves to (as a rebase would record it)."""
    if onto is None:
        series = project.series
        project.fork().verify_base(series.base.tag, series.base.commit)
        return series.base
    from forkpatch.baseversion import base_of_target

    fork = project.fork()
    return base_of_target(fork, fork.resolve_ref(onto))


def build_base_wheel(
    project: Project, *, onto: str | None = None, python: str | None = None
) -> BaseWheel:
    """The fork's Python-only wheel at the series' base (or at ``onto``): from the cache
    when built before, else built with ``python`` (default: forkpatch's own)."""
    from forkpatch.baseversion import base_version

    t0 = time.monotonic()
    base = target_base(project, onto)
    fork = project.fork()
    version = base_version(fork, base, project.series.track.pattern).version
    hit = cached(project, base.commit, version)
    if hit is not None:
        log.info(f"base wheel of {base.describe()}: {hit} (built before)")
        return BaseWheel(hit, base.commit, version, base, cached=True)
    py = python or sys.executable
    check_toolchain(py)
    where = cache_dir(project, base.commit)
    where.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".building-", dir=where.parent) as tmp:
        tree = Path(tmp) / "tree"
        with log.step(f"export the fork's tree at {base.describe()} ({base.commit[:12]})"):
            export_tree(project, base.commit, tree)
        out = Path(tmp) / "dist"
        with log.step(f"build the fork's Python-only wheel {version} (VLLM_TARGET_DEVICE=empty)"):
            _build(py, tree, out, version)
        wheel = _the_wheel(project, out, version)
        staged = Path(tmp) / "done"
        staged.mkdir()
        shutil.move(str(wheel), staged / wheel.name)
        if where.exists():  # a stale entry (another version counted for the commit)
            shutil.rmtree(where)
        os.replace(staged, where)  # the cache entry appears whole or not at all
    path = where / wheel.name
    log.info(f"base wheel of {base.describe()}: {path}")
    return BaseWheel(path, base.commit, version, base, cached=False, seconds=time.monotonic() - t0)


def check_toolchain(python: str) -> None:
    """Refuse, naming each missing module and the line that installs them, before
    anything is exported."""
    probe = (
        "import importlib.util, sys; "
        f"print(' '.join(m for m in {TOOLCHAIN!r} if importlib.util.find_spec(m) is None))"
    )
    try:
        done = runner.run([python, "-c", probe], timeout=60, split_stderr=True)
    except OSError as exc:
        raise ToolMissing(
            f"the interpreter {python} for the fork's wheel build does not run: {exc}",
            tip="give --python an interpreter that has the fork's build toolchain",
        ) from None
    if done.timed_out:
        raise ToolMissing(
            f"the interpreter {python} for the fork's wheel build did not answer: {done.ended()}",
            tip="give --python an interpreter that has the fork's build toolchain",
        )
    missing = done.output.split() if done.returncode == 0 else list(TOOLCHAIN)
    if missing:
        raise ToolMissing(
            f"the fork's Python-only wheel build needs {', '.join(missing)} in {python}",
            tip=f"install them there: `{python} {TOOLCHAIN_INSTALL}`"
            + (f" and a CPU torch: `{python} {TORCH_INSTALL}`" if "torch" in missing else "")
            + " (or give --python an interpreter that has them)",
        )


def export_tree(project: Project, commit: str, dest: Path) -> None:
    """The fork's files at ``commit`` without docs/ (nothing there goes into the wheel,
    and a snapshot's placeholder blobs live there), read from the store in place."""
    proc = project.fork().store.run(
        "archive", "--format=tar", commit, "--", ".", ":(exclude)docs", check=False
    )
    if proc.returncode != 0:
        raise BuildError(
            f"cannot export the fork's tree at {commit[:12]}: "
            f"{proc.stderr.decode('utf-8', 'replace').strip()[-300:]}",
            tip="check the fork repository (`forkpatch status`)",
        )
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tf:
        extract_tar(tf, dest)
    if not (dest / "setup.py").is_file() and not (dest / "pyproject.toml").is_file():
        raise BuildError(
            f"the fork's tree at {commit[:12]} has no setup.py or pyproject.toml: "
            "it cannot build a wheel",
            tip="pass the fork's release wheel with --base-wheel instead",
        )


def _no_cargo_path() -> str:
    dirs = os.environ.get("PATH", "").split(os.pathsep)
    return os.pathsep.join(d for d in dirs if d and not (Path(d) / "cargo").exists())


def _build(python: str, tree: Path, out: Path, version: str) -> None:
    from forkpatch.wheels.runner import run

    env = {
        "VLLM_TARGET_DEVICE": "empty",
        "VLLM_VERSION_OVERRIDE": version,
        # An export, not a clone: setuptools-scm finds no git metadata.
        "SETUPTOOLS_SCM_PRETEND_VERSION": version,
        "PATH": _no_cargo_path(),
    }
    run(
        [
            python,
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
        what="build the fork's Python-only wheel",
        timeout=BUILD_TIMEOUT_S,
    )


def _the_wheel(project: Project, out: Path, version: str) -> Path:
    wheels = sorted(out.glob("*.whl"))
    distribution = canonicalize_name(project.series.fork.distribution)
    for wheel in wheels:
        name, got, _build, _tags = parse_wheel_filename(wheel.name)
        if name == distribution:
            if str(got) != version:
                raise BuildError(
                    f"the fork's build made {wheel.name}, version {got}, not {version}",
                    tip="the fork's setup.py did not take VLLM_VERSION_OVERRIDE",
                )
            return wheel
    raise BuildError(
        f"the fork's build made no {distribution} wheel ({', '.join(w.name for w in wheels)})",
        tip="check series.yaml fork.distribution",
    )
