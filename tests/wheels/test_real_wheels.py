"""Wheels of the real patch set on the real 1Cat-vLLM fork.

Needs the fork (FORKPATCH_FORK_REPO or the fixture: tests/support/realfork.py)
and a Python that can build the fork's Python-only wheel (``VLLM_TARGET_DEVICE=empty``):
CPU torch, setuptools>=77.0.3,<81, setuptools-scm, setuptools-rust, wheel and build,
plus the fork's runtime requirements to run what it built. ``bash
tests/support/setup-real-fork.sh`` installs all of it into this interpreter;
``FORKPATCH_WHEEL_BUILD_PYTHON`` names another one for the builds. A missing
piece skips, naming it.

What is built, in tmp dirs (the fork repository is only read):

- ``base``: the ``empty`` wheel of the UNPATCHED v1.2.1, with
  ``VLLM_VERSION_OVERRIDE=1.2.1`` (the version of the fork's release wheel);
- ``overlay``: ``forkpatch build-wheel --mode overlay --base-wheel base`` (the
  patched Python files, the vllm dist alias, provenance, version
  ``1.2.1+fp.<label>``);
- ``source``: the ``empty`` wheel of the PATCHED tree (``forkpatch apply``'s work
  tree) with ``VLLM_VERSION_OVERRIDE`` = the overlay's version;
- ``container``: ``source`` post-processed as the container path does
  (``overlay_wheel`` with no replacements + the build steps).

Asserted: (issue 8) the overlay's Python files are byte-identical to the
source build's, and the container path's result equals the overlay but for the
builder record; (issue 4) the overlay installs in a fresh venv, ``vllm
--version`` and ``importlib.metadata.version("vllm")`` give its version, ``pip
check`` says nothing that the unpatched wheel would not, ``pip uninstall``
leaves no file behind, and ``forkpatch smoke --tier static`` passes.

The Rust frontend (optional in the fork's setup.py) is left out: directories
holding ``cargo`` are dropped from PATH for the builds, as on a machine without
it (measured ~7 s, 2,351 files at v1.2.1).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from support import realfork
from support.venvs import make_venv_seeing_this_one

BUILD_PYTHON = realfork.BUILD_PYTHON
PROJECT = realfork.REPO_ROOT
BASE_TAG = realfork.BASE_TAG

pytestmark = [pytest.mark.real_fork, pytest.mark.slow]

_TOOLCHAIN_PROBE = """
import importlib, sys
missing = []
for mod in ("setuptools", "setuptools_scm", "setuptools_rust", "wheel", "build", "torch"):
    try:
        importlib.import_module(mod)
    except Exception as exc:
        missing.append(f"{mod} ({type(exc).__name__})")
if not missing:
    import setuptools
    major = int(setuptools.__version__.split(".")[0])
    if not 77 <= major < 81:
        missing.append(f"setuptools>=77.0.3,<81 (have {setuptools.__version__})")
print("; ".join(missing))
"""


def _toolchain_problem() -> str | None:
    try:
        out = subprocess.run(
            [BUILD_PYTHON, "-c", _TOOLCHAIN_PROBE],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    except OSError as exc:
        return f"{BUILD_PYTHON}: {exc}"
    if out.returncode != 0:
        return (out.stderr.strip().splitlines() or [f"probe exited {out.returncode}"])[-1]
    return out.stdout.strip() or None


def _run(
    *args: str | Path,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 900,
) -> str:
    result = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, (
        f"{' '.join(map(str, args))} exited {result.returncode}:\n"
        f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    )
    return result.stdout


def _forkpatch(project: Path, *args: str | Path) -> str:
    return _run(
        sys.executable, "-m", "forkpatch", "-C", project, "--fork-repo", realfork.FORK, *args
    )


_checkout = realfork.export_wheel_tree
_start_build = realfork.start_wheel_build
_finish_build = realfork.finish_wheel_build


def _members(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as z:
        return {n: z.read(n) for n in z.namelist() if not n.endswith("/")}


def _dist_info(members: dict[str, bytes]) -> str:
    (top,) = {n.split("/", 1)[0] for n in members if n.split("/", 1)[0].endswith(".dist-info")}
    return top


@dataclass
class Built:
    project: Path
    version: str
    base: Path
    overlay: Path
    source: Path
    container: Path
    patched_files: list[str]
    seconds: dict[str, float] = field(default_factory=dict)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    realfork.fork_or_skip()
    realfork.tags_or_skip(BASE_TAG)
    problem = _toolchain_problem()
    if problem:
        pytest.skip(
            f"the fork's empty-wheel build toolchain is not importable in "
            f"{BUILD_PYTHON}: {problem} (`bash tests/support/setup-real-fork.sh` installs it; "
            "FORKPATCH_WHEEL_BUILD_PYTHON names another python)"
        )
    realfork.modules_or_skip()
    from forkpatch.project import open_project
    from forkpatch.wheels.buildwheel import (
        build_steps,
        expected_provenance,
        fork_version,
        patch_items,
    )
    from forkpatch.wheels.identity import BuilderInfo, build_version, patchset_label
    from forkpatch.wheels.overlay import overlay_wheel

    tmp = tmp_path_factory.mktemp("wheels")
    seconds: dict[str, float] = {}
    start = time.monotonic()
    project = tmp / "project"
    project.mkdir()
    shutil.copy2(PROJECT / "series.yaml", project / "series.yaml")
    shutil.copytree(PROJECT / "patches", project / "patches")
    _forkpatch(project, "apply", "--worktree", tmp / "wt")
    proj = open_project(project, realfork.FORK)
    series = proj.series
    assert series.base.tag == BASE_TAG
    version = build_version(
        fork_version(series.base.tag), patchset_label(series.base.commit, patch_items(proj, series))
    )
    head = _run("git", "-C", tmp / "wt", "rev-parse", "HEAD").strip()
    seconds["apply"] = time.monotonic() - start

    start = time.monotonic()
    _checkout(realfork.FORK, series.base.commit, tmp / "base-tree")
    _checkout(project / ".forkpatch" / "repo.git", head, tmp / "patched-tree")
    patched_files = _run(
        "git", "-C", tmp / "wt", "diff", "--name-only", series.base.commit, head
    ).split()
    seconds["checkouts"] = time.monotonic() - start

    start = time.monotonic()  # the two builds run side by side
    jobs = {
        "base": (tmp / "base-tree", fork_version(BASE_TAG), tmp / "dist-base"),
        "source": (tmp / "patched-tree", version, tmp / "dist-source"),
    }
    procs = {
        k: _start_build(tree, v, out, tmp / f"build-{k}.log") for k, (tree, v, out) in jobs.items()
    }
    wheels = {k: _finish_build(p, jobs[k][2], tmp / f"build-{k}.log") for k, p in procs.items()}
    seconds["empty builds (2, in parallel)"] = time.monotonic() - start

    start = time.monotonic()
    result = json.loads(
        _forkpatch(
            project,
            "build-wheel",
            "--mode",
            "overlay",
            "--base-wheel",
            wheels["base"],
            "-o",
            tmp / "dist-overlay",
            "--json",
        )
    )
    assert result["mode"] == "overlay" and result["version"] == version, result
    (overlay,) = (Path(w) for w in result["wheels"])
    seconds["overlay build"] = time.monotonic() - start

    start = time.monotonic()
    container_out = tmp / "dist-container"
    container_out.mkdir()
    container = overlay_wheel(
        wheels["source"],
        replacements={},
        new_version=version,
        provenance=expected_provenance(proj, BuilderInfo(mode="container")),
        out_dir=container_out,
        extra_steps=build_steps(series),
    )
    seconds["container post-processing"] = time.monotonic() - start
    built = Built(
        project=project,
        version=version,
        base=wheels["base"],
        overlay=overlay,
        source=wheels["source"],
        container=container,
        patched_files=patched_files,
        seconds=seconds,
    )
    yield built
    print("\n" + "\n".join(f"  {k}: {v:.1f}s" for k, v in seconds.items()))


# --------------------------------------------------------------------------- issue 8


def test_overlay_python_files_match_source_build(built: Built) -> None:
    """Every Python file of the overlay wheel (base = unpatched v1.2.1 + the
    series) is byte-identical to the same file of the patched tree's own build."""
    overlay, source, base = _members(built.overlay), _members(built.source), _members(built.base)
    assert built.source.name == built.overlay.name
    py_overlay = {n for n in overlay if n.endswith(".py")}
    py_source = {n for n in source if n.endswith(".py")}
    alias = {"_1cat_vllm_dist_alias.py"}  # the vllm-dist-info build step
    assert py_overlay - py_source == alias and py_source <= py_overlay
    differ = sorted(n for n in py_source if overlay[n] != source[n])
    assert differ == [], differ
    # The patches did change the wheel: every patched vllm/ file, and the version file.
    changed = sorted(n for n in py_source if n in base and base[n] != source[n])
    want = sorted(p for p in built.patched_files if p.startswith("vllm/") and p.endswith(".py"))
    assert changed == sorted([*want, "vllm/_version.py"]), changed
    # Beyond the .py files: the two wheels differ only by what forkpatch adds.
    di = _dist_info(overlay)
    assert di == _dist_info(source)
    assert set(overlay) - set(source) == {
        *alias,
        "1cat_vllm_dist_alias.pth",
        f"{di}/forkpatch-provenance.json",
    }
    assert sorted(n for n in source if n != f"{di}/RECORD" and overlay[n] != source[n]) == []


def test_container_path_equals_overlay(built: Built) -> None:
    """The source build post-processed as the container path does is the overlay
    wheel, member for member, but for the builder part of the provenance."""
    overlay, container = _members(built.overlay), _members(built.container)
    di = _dist_info(overlay)
    prov = f"{di}/forkpatch-provenance.json"
    assert set(overlay) == set(container)
    assert (
        sorted(n for n in overlay if n not in (prov, f"{di}/RECORD") and overlay[n] != container[n])
        == []
    )
    a, b = json.loads(overlay[prov]), json.loads(container[prov])
    assert a.pop("builder")["mode"] == "overlay" and b.pop("builder")["mode"] == "container"
    # The overlay records the bytes of every file the series changed and a digest of the
    # other members; a container build compiled its files from the series' tree, which
    # `verify` compares in a project instead.
    assert set(a.pop("files")) == {p for p in built.patched_files if p.startswith("vllm/")}
    assert len(a.pop("members_sha256")) == 64
    assert a == b


# --------------------------------------------------------------------------- issue 4


def _files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() or p.is_symlink()}


def test_overlay_wheel_installs_runs_and_uninstalls(built: Built, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    py = make_venv_seeing_this_one(venv)
    probe = _run(py, "-c", "import torch; print(torch.cuda.is_available())").strip()
    before = _files_under(venv)
    _run(py, "-m", "pip", "install", "-q", "--no-deps", "--no-index", built.overlay)

    # `vllm --version`. Without a CUDA device an `empty` wheel has no vLLM platform
    # (only a `+cpu` version selects the CPU one) and the CLI cannot start; a
    # platform plugin outside the wheel then selects vLLM's CPU platform.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    if probe != "True":
        from forkpatch.smoke.incheck import write_cpu_platform_plugin

        shim = tmp_path / "cpu-platform"
        shim.mkdir()
        write_cpu_platform_plugin(str(shim))
        env["PYTHONPATH"] = str(shim)
    out = subprocess.run(
        [venv / "bin" / "vllm", "--version"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == built.version, out.stdout

    got = json.loads(
        _run(
            py,
            "-c",
            (
                "import importlib.metadata as m, json, vllm.version as v; print(json.dumps("
                "[m.version('vllm'), m.version('1cat-vllm'), v.__version__]))"
            ),
        )
    )
    assert got == [built.version] * 3

    # pip sees one distribution, 1cat-vllm; what `pip check` says about it concerns
    # the fork's own requirements (identical to the unpatched wheel's), not the alias.
    listed = {d["name"].lower() for d in json.loads(_run(py, "-m", "pip", "list", "--format=json"))}
    assert "1cat-vllm" in listed and "vllm" not in listed
    overlay_meta = _members(built.overlay)[f"{_dist_info(_members(built.overlay))}/METADATA"]
    base_meta = _members(built.base)[f"{_dist_info(_members(built.base))}/METADATA"]
    requires = [ln for ln in base_meta.decode().splitlines() if ln.startswith("Requires-Dist:")]
    assert [
        ln for ln in overlay_meta.decode().splitlines() if ln.startswith("Requires-Dist:")
    ] == requires
    required = {canonicalize_name(Requirement(ln.split(":", 1)[1]).name) for ln in requires}
    check = subprocess.run([py, "-m", "pip", "check"], capture_output=True, text=True, check=False)
    for line in check.stdout.splitlines():
        assert not line.startswith("vllm "), line
        if line.startswith("1cat-vllm "):
            m = re.match(r"1cat-vllm (\S+) (?:requires|has requirement) ([A-Za-z0-9._-]+)", line)
            assert m and m[1] == built.version, line
            assert canonicalize_name(m[2]) in required, line

    _run(py, "-m", "pip", "uninstall", "-y", "1cat-vllm")
    left = sorted(_files_under(venv) - before)
    assert left == [], left
    gone = subprocess.run(
        [py, "-c", "import importlib.metadata as m; m.version('vllm')"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert gone.returncode != 0 and "PackageNotFoundError" in gone.stderr


def test_smoke_static_tier(built: Built, tmp_path: Path) -> None:
    report = tmp_path / "smoke.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "forkpatch",
            "-C",
            str(built.project),
            "--fork-repo",
            realfork.FORK,
            "smoke",
            str(built.overlay),
            "--tier",
            "static",
            "--report",
            str(report),
        ],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    data = json.loads(report.read_text())
    outcomes = {c["id"]: c["outcome"] for c in data["checks"]}
    static = {k: v for k, v in outcomes.items() if k.startswith("static.")}
    assert static and set(static.values()) == {"passed"}, {
        c["id"]: c.get("detail")
        for c in data["checks"]
        if c["outcome"] != "passed" and c["id"].startswith("static.")
    }
