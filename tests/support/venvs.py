"""Fresh virtual environments, and pip driven from this interpreter into them."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path


def make_venv(path: Path) -> Path:
    """A bare venv (no pip inside: the host pip drives it with --python, which
    runs pip's code under the venv's interpreter, .pth files included)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    return path / "bin" / "python"


def make_venv_seeing_this_one(dest: Path) -> Path:
    """A fresh venv that sees this interpreter's packages (torch, the fork's deps).

    ``venv --system-site-packages`` from a python that is itself a venv reaches only
    the *base* interpreter's packages; the parent venv's site-packages are added
    after the new venv's own (a .pth file), as `forkpatch smoke --deps system` does.
    """
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", str(dest)],
        check=True,
    )
    python = dest / "bin" / "python"
    if sys.prefix != sys.base_prefix:
        parent = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
        (purelib(python) / "_parent_venv.pth").write_text("\n".join(parent) + "\n")
    return python


def purelib(python: Path) -> Path:
    """The site-packages directory of ``python``."""
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return Path(out)


def pip_wheel(project: Path, out_dir: Path) -> Path:
    """The wheel of ``project`` built by ``pip wheel`` with this interpreter's backend
    (no build isolation, no index: the ``test`` extra has setuptools)."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--disable-pip-version-check",
            "-q",
            "-w",
            str(out_dir),
            str(project),
        ],
        check=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    (wheel,) = out_dir.glob("*.whl")
    return wheel


def pip(python: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``pip --python PYTHON ARGS`` from this interpreter; ``check``: fail with the output."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "--python",
        str(python),
        "--disable-pip-version-check",
        "--no-input",
        *args,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"{cmd} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def venv_version(python: Path) -> dict[str, str]:
    """What the venv says of the fork's wheel: its dist version, vllm's, vllm's file."""
    code = (
        "import importlib.metadata as m, json, vllm; "
        "print(json.dumps({'dist': m.version('1cat-vllm'), 'vllm': m.version('vllm'), "
        "'file': vllm.__file__}))"
    )
    out = subprocess.run(
        [str(python), "-I", "-c", code], check=True, stdout=subprocess.PIPE, text=True, cwd="/"
    )
    return json.loads(out.stdout)


def install_from_index(venv: Path, index_url: str, version: str) -> dict[str, str]:
    """1cat-vllm==``version`` from ``index_url`` into a fresh venv: what it then says."""
    python = make_venv(venv)
    pip(
        python,
        "install",
        "--no-deps",
        "--no-cache-dir",
        "--index-url",
        index_url,
        f"1cat-vllm=={version}",
    )
    return venv_version(python)
