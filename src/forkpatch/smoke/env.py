"""The isolated smoke environment: a fresh venv holding exactly the given wheels.

Three ways to satisfy the wheels' dependencies, chosen by the operator and
written into the report:

- ``system`` (the default): ``python -m venv --system-site-packages``; the
  wheels are installed with ``--no-deps`` and their dependencies are whatever
  the chosen interpreter already has. On a V100 box that is the torch/CUDA
  stack the service runs with, which is what the GPU tiers must exercise.
- ``index``: a plain venv; pip resolves the dependencies from the configured
  index (``--index-url`` or series ``smoke.index-url``, else pip's own config).
- ``none``: a plain venv, ``--no-deps``, nothing else. Checks that need a
  missing dependency (torch) are reported *not run* with the reason.

Whatever the mode, the venv's site-packages comes first on ``sys.path``, the
checks run with ``python -I`` from a directory outside the source tree, and a
check asserts that ``vllm`` was imported from the venv.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from forkpatch import log, proc, settings
from forkpatch.errors import SmokeError
from forkpatch.kinds import SMOKE_DEPS
from forkpatch.proc import Deadline
from forkpatch.redact import redact

DEPS_MODES = SMOKE_DEPS
KEEP_ENV_VAR = "FORKPATCH_KEEP_SMOKE_ENV"


@dataclass
class SmokeEnv:
    """A created smoke venv."""

    path: Path
    python: Path
    deps: str
    base_python: str
    system_site_packages: bool
    index_url: str | None
    installed: list[str] = field(default_factory=list)
    #: Requires-Dist entries of the installed wheels not satisfied in the venv.
    missing_requirements: list[str] = field(default_factory=list)
    #: This run's own files (the check suite's copy, its spec and results, the team
    #: checks' logs); beside the venv unless the venv is a kept one (envcache).
    workdir: Path | None = None

    @property
    def work_dir(self) -> Path:
        return self.workdir or self.path.parent

    @property
    def bin_dir(self) -> Path:
        return self.python.parent

    def to_json(self) -> dict[str, object]:
        return {
            "deps": self.deps,
            "base_python": self.base_python,
            "system_site_packages": self.system_site_packages,
            "index_url": _public_url(self.index_url),
            "installed": self.installed,
            "missing_requirements": self.missing_requirements,
        }


def _public_url(url: str | None) -> str | None:
    """An index URL without user:password (it goes into reports and logs)."""
    if not url:
        return url
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.username or parts.password:
        netloc = parts.hostname or ""
        if parts.port:
            netloc += f":{parts.port}"
        return urlunsplit((parts.scheme, "****@" + netloc, parts.path, parts.query, parts.fragment))
    return url


def clean_env() -> dict[str, str]:
    """The environment for commands in the venv: no PYTHON* variables, no user site."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PYTHON") and k not in ("VIRTUAL_ENV", "PIP_REQUIRE_VIRTUALENV")
    }
    env["PYTHONNOUSERSITE"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _run(
    cmd: Sequence[str | Path],
    *,
    what: str,
    cwd: Path,
    env: dict[str, str],
    secrets: Sequence[str | None] = (),
    deadline: Deadline | None = None,
    timeout: float = 1800,
) -> str:
    shown = redact(" ".join(str(c) for c in cmd), secrets)
    log.info(f"+ {shown}")
    try:
        done = proc.run(cmd, cwd=cwd, env=env, secrets=secrets, deadline=deadline, timeout=timeout)
    except OSError as exc:
        raise SmokeError(f"cannot {what}: {exc}", tip="check --python / the PATH") from None
    if done.timed_out:
        raise SmokeError(
            f"cannot {what}: `{shown}` did not finish in {done.timeout_s:.0f} s",
            tip="give the smoke run more time (--timeout)",
        )
    if done.returncode != 0:
        raise SmokeError(
            f"cannot {what}: `{shown}` exited with code {done.returncode}; "
            f"last lines:\n{done.tail(20)}"
        )
    return done.output


def _pip_cmd(python: Path) -> list[str]:
    """pip for the venv: this interpreter's pip with --python when it has one (fast:
    the venv needs no pip of its own), else the venv's ensurepip'ed pip."""
    return [sys.executable, "-m", "pip", "--python", str(python)]


def _host_pip_ok() -> bool:
    try:
        import pip
    except ImportError:
        return False
    from packaging.version import Version

    return Version(pip.__version__) >= Version("22.3")


@contextlib.contextmanager
def smoke_env(
    wheels: Sequence[Path],
    *,
    deps: str = "system",
    python: str | None = None,
    index_url: str | None = None,
    keep: bool = False,
    deadline: Deadline | None = None,
) -> Iterator[SmokeEnv]:
    """Create the venv, install exactly ``wheels``, yield it, remove it afterwards.

    ``keep`` (or FORKPATCH_KEEP_SMOKE_ENV=1) leaves it in place for debugging. With
    FORKPATCH_SMOKE_ENV_CACHE the venv is a kept one when it is still exactly as it was
    made (:mod:`forkpatch.smoke.envcache`), and stays for the next run.
    """
    if deps not in DEPS_MODES:
        raise SmokeError(f"unknown deps mode {deps!r}", tip=f"use one of {', '.join(DEPS_MODES)}")
    keep = keep or settings.flag(KEEP_ENV_VAR)
    base_python = python or sys.executable
    check_python_fits(wheels, base_python)
    root = Path(tempfile.mkdtemp(prefix="forkpatch-smoke-"))
    from forkpatch.fsutil import file_sha256
    from forkpatch.smoke import envcache

    entry = envcache.open_entry([file_sha256(Path(w)) for w in wheels], deps, base_python)
    venv = entry.venv if entry is not None else root / "venv"
    env = clean_env()
    try:
        why = entry.valid() if entry is not None else "no cache"
        if why is None:
            log.info(f"    reused the kept smoke environment {venv} (every file as installed)")
        else:
            if entry is not None:
                log.info(f"    the kept smoke environment {venv}: {why}; it is made afresh")
                entry.clear()
            _make(venv, wheels, deps, base_python, index_url, root, env, deadline)
            if entry is not None:
                entry.seal()
        senv = SmokeEnv(
            path=venv,
            python=venv / "bin" / "python",
            deps=deps,
            base_python=base_python,
            system_site_packages=deps == "system",
            index_url=index_url,
            installed=[Path(w).name for w in wheels],
            workdir=root,
        )
        senv.missing_requirements = _missing_requirements(senv, wheels, root)
        if senv.missing_requirements:
            log.info(
                f"    not installed in the smoke environment: "
                f"{', '.join(senv.missing_requirements)}"
            )
        yield senv
    finally:
        if entry is not None:
            entry.release()
        if keep:
            log.info(f"kept the smoke environment: {venv} (its run's files: {root})")
        else:
            shutil.rmtree(root, ignore_errors=True)


def _make(
    venv: Path,
    wheels: Sequence[Path],
    deps: str,
    base_python: str,
    index_url: str | None,
    root: Path,
    env: dict[str, str],
    deadline: Deadline | None,
) -> None:
    """Create the venv at ``venv`` and install exactly ``wheels`` into it."""
    use_host_pip = _host_pip_ok()
    with log.step(f"create the smoke environment ({deps} deps) in {venv}"):
        cmd = [base_python, "-m", "venv"]
        if deps == "system":
            cmd.append("--system-site-packages")
        if use_host_pip:
            cmd.append("--without-pip")
        cmd.append(str(venv))
        _run(cmd, what="create the smoke venv", cwd=root, env=env, deadline=deadline)
    vpython = venv / "bin" / "python"
    if deps == "system":
        _inherit_parent_venv(base_python, vpython, root, env)
    pip = _pip_cmd(vpython) if use_host_pip else [str(vpython), "-m", "pip"]
    install = [*pip, "install", "--no-input", "--no-compile", "--force-reinstall"]
    secrets: list[str | None] = [index_url]
    if deps == "index":
        if index_url:
            install += ["--index-url", index_url]
    else:
        install.append("--no-deps")
    install += [str(Path(w).resolve()) for w in wheels]
    with log.step(f"install {len(wheels)} wheel(s) into the smoke environment"):
        _run(
            install,
            what="install the wheel(s) into the smoke venv",
            cwd=root,
            env=env,
            secrets=secrets,
            deadline=deadline,
        )


def python_version(python: str, *, timeout: float = 60) -> tuple[int, int] | None:
    """(major, minor) of the interpreter ``python`` (None: it does not run)."""
    if python == sys.executable:
        return sys.version_info[0], sys.version_info[1]
    try:
        done = proc.run(
            [python, "-c", "import sys; print(*sys.version_info[:2])"],
            timeout=timeout,
            split_stderr=True,
        )
        if not done.ok:
            return None
        out = done.output.split()
        return int(out[0]), int(out[1])
    except (OSError, ValueError, IndexError):
        return None


def check_python_fits(wheels: Sequence[Path], python: str) -> None:
    """Refuse at once (before any venv is made) a wheel built for another Python than
    ``python`` (a cp311 wheel with --python 3.12), naming both."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    version = python_version(python)
    if version is None:
        raise SmokeError(
            f"cannot run --python {python}",
            tip="give --python the path of a working Python interpreter",
        )
    major, minor = version
    for wheel in wheels:
        try:
            tags = parse_wheel_filename(Path(wheel).name)[3]
        except InvalidWheelFilename:
            continue  # read_wheel names what is wrong with the file
        if any(_fits(t.interpreter, t.abi, major, minor) for t in tags):
            continue
        wanted = ", ".join(sorted({t.interpreter for t in tags}))
        raise SmokeError(
            f"{Path(wheel).name} is built for {wanted}, but {python} is Python {major}.{minor}",
            tip="give --python an interpreter of the version the wheel was built for",
        )


def _fits(interpreter: str, abi: str, major: int, minor: int) -> bool:
    digits = interpreter[2:]
    if not digits.isdigit() or not digits.startswith(str(major)):
        return False
    rest = digits[len(str(major)) :]
    if interpreter.startswith("py"):
        return rest == "" or int(rest) <= minor  # pip takes py3X for every 3.Y >= 3.X
    if interpreter.startswith("cp") and rest:
        return int(rest) == minor or (abi == "abi3" and int(rest) <= minor)
    return False


_PATHS_SCRIPT = r"""
import json, site, sys, sysconfig
paths = []
if sys.prefix != sys.base_prefix:  # the interpreter is itself a virtual environment
    for key in ("purelib", "platlib"):
        p = sysconfig.get_paths()[key]
        if p not in paths:
            paths.append(p)
print(json.dumps({"paths": paths, "site": sysconfig.get_paths()["purelib"]}))
"""


def _inherit_parent_venv(base_python: str, vpython: Path, cwd: Path, env: dict[str, str]) -> None:
    """``--system-site-packages`` from a python that is itself a venv (a common way
    to install torch on a GPU box) reaches only the *base* interpreter's packages.
    Make the parent venv's site-packages visible too, after the smoke venv's own, so
    the wheel under test still wins."""
    import json

    parent = json.loads(_probe([base_python, "-I", "-c", _PATHS_SCRIPT], cwd, env))
    if not parent["paths"]:
        return
    own = json.loads(_probe([str(vpython), "-I", "-c", _PATHS_SCRIPT], cwd, env))["site"]
    Path(own, "_forkpatch_parent_venv.pth").write_text(
        "\n".join(parent["paths"]) + "\n", encoding="utf-8", errors="surrogateescape"
    )
    log.info(f"    {base_python} is a virtual environment: its packages are visible too")


def _probe(cmd: Sequence[str], cwd: Path, env: dict[str, str]) -> str:
    """The stdout of a short script that must work (the venv's paths)."""
    done = proc.run(cmd, cwd=cwd, env=env, split_stderr=True, timeout=120)
    if not done.ok or done.truncated:
        raise SmokeError(
            f"cannot read the paths of {cmd[0]}: {done.ended()}\n{proc.tail(done.errors, 10)}",
            tip="check --python: it must be a working Python interpreter",
        )
    return done.output


_VERSIONS_SCRIPT = r"""
import importlib.metadata as md, json, sys
out = {}
for name in json.loads(sys.argv[1]):
    try:
        out[name] = md.version(name)
    except md.PackageNotFoundError:
        out[name] = None
print(json.dumps(out))
"""


def installed_versions(
    python: Path, names: Sequence[str], *, cwd: Path | None = None
) -> dict[str, str | None]:
    """Distribution name -> installed version (None: absent) as ``python`` sees it."""
    import json

    try:
        done = proc.run(
            [str(python), "-I", "-c", _VERSIONS_SCRIPT, json.dumps(list(names))],
            cwd=cwd or tempfile.gettempdir(),
            env=clean_env(),
            split_stderr=True,
            timeout=120,
        )
        return dict(json.loads(done.output)) if done.ok else {}
    except (OSError, ValueError):
        return {}


def _missing_requirements(senv: SmokeEnv, wheels: Sequence[Path], cwd: Path) -> list[str]:
    """Requires-Dist entries of the installed wheels (markers evaluated for this
    machine, extras ignored) that the venv does not satisfy."""
    from packaging.requirements import InvalidRequirement, Requirement

    from forkpatch.wheels.wheelinfo import read_wheel

    reqs: list[Requirement] = []
    for w in wheels:
        for text in read_wheel(w).requires:
            try:
                req = Requirement(text)
            except InvalidRequirement:
                continue
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            reqs.append(req)
    if not reqs:
        return []
    have = installed_versions(senv.python, sorted({r.name for r in reqs}), cwd=cwd)
    missing = []
    for req in reqs:
        got = have.get(req.name)
        if got is None or (req.specifier and not req.specifier.contains(got, prereleases=True)):
            missing.append(str(req) + ("" if got is None else f" (have {got})"))
    return sorted(set(missing))
