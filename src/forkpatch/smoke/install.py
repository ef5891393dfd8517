"""How to install what a smoke environment lacked, said once per module for a report.

A check that needs a module the environment does not have (torch on a CPU box) is
not run, and its detail names the module; :func:`install_notes` turns those into
one note per module with the command that installs it. torch is named with the
fork's own pin, read from the fork at the series' base (``requirements/cuda.txt``
for the version, the index the fork's ``setup.py`` takes that version from), so
that a V100 box gets the CUDA build the fork was made for, not the newest torch.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from forkpatch.errors import ForkpatchError
from forkpatch.fsutil import read_regular
from forkpatch.smoke.incheck import DISTRIBUTIONS, NOT_RUN, missing_modules

if TYPE_CHECKING:
    from forkpatch.project import Project

REQUIREMENTS = "requirements/cuda.txt"
SETUP = "setup.py"
_PIN = re.compile(rb"^\s*torch\s*==\s*([0-9][0-9A-Za-z.+]*)\s*(?:#.*)?$", re.M)


def fork_pins(project: Project | None) -> dict[str, str]:
    """Module -> what ``pip install`` takes for it, from the fork at the series' base
    (``{"torch": "torch==2.10.0 --index-url https://download.pytorch.org/whl/cu128"}``);
    empty when the fork or the files are not there (no network is asked)."""
    if project is None:
        return {}
    try:
        base = project.series.base.commit
        with project.fork().store.reader() as reader:
            reqs = reader.read(f"{base}:{REQUIREMENTS}")
            setup = reader.read(f"{base}:{SETUP}")
    except (ForkpatchError, OSError):
        return {}
    if reqs is None or reqs[0] != "blob":
        return {}
    pin = _PIN.search(reqs[1])
    if pin is None:
        return {}
    version = pin.group(1).decode("ascii")
    spec = f"torch=={version}"
    if setup is not None and setup[0] == "blob":
        index = re.search(
            # the URL may be split over adjacent string literals: "...cu128/" "torch-..."
            rb"(https://download\.pytorch\.org/whl/[A-Za-z0-9_.-]+)/(?:[\"']\s*[\"'])?torch-"
            + re.escape(version.encode()),
            setup[1],
        )
        if index is not None:
            spec += f" --index-url {index.group(1).decode('ascii')}"
    return {"torch": spec}


#: torch's CPU builds (what the static tier needs on a machine without CUDA).
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
_CUDA_INDEX = re.compile(r"\s*--index-url\s+https://download\.pytorch\.org/whl/cu\d+\S*")


SYSTEM_PIP_FILES = (Path("/etc/pip.conf"), Path("/etc/xdg/pip/pip.conf"))


def host_has_cuda() -> bool:
    """Whether this machine has an NVIDIA GPU (its driver's device files), whatever the
    smoke environment's torch could see."""
    gpus = Path("/proc/driver/nvidia/gpus")
    return (gpus.is_dir() and any(gpus.iterdir())) or Path("/dev/nvidia0").exists()


def pip_index_configured(
    environ: Mapping[str, str] | None = None, system_files: Sequence[Path] = SYSTEM_PIP_FILES
) -> bool:
    """Whether pip is told where its index is (PIP_INDEX_URL, or index-url in a pip
    configuration file): that index is the one this machine reaches."""
    env = os.environ if environ is None else environ
    if env.get("PIP_INDEX_URL") or env.get("PIP_EXTRA_INDEX_URL"):
        return True
    home = Path(env.get("HOME", "~")).expanduser()
    files = [Path(env["PIP_CONFIG_FILE"])] if env.get("PIP_CONFIG_FILE") else []
    files += [*system_files, home / ".config/pip/pip.conf", home / ".pip/pip.conf"]
    for path in files:
        try:
            text = read_regular(path, limit=1 << 20).decode("utf-8", "replace")
        except (OSError, ForkpatchError):
            continue
        if re.search(r"^\s*(?:extra-)?index-url\s*=", text, re.M):
            return True
    return False


def _cpu_torch(spec: str, index_configured: bool) -> str:
    """The fork's torch pin without its CUDA index: the CPU build, from the index pip
    is configured with, else from torch's CPU index."""
    plain = _CUDA_INDEX.sub("", spec)
    return plain if index_configured else f"{plain} --index-url {CPU_TORCH_INDEX}"


def install_notes(
    checks: Sequence[Mapping[str, str]],
    *,
    python: str,
    deps: str,
    pins: Mapping[str, str],
    cuda: bool = True,
    index_configured: bool | None = None,
) -> list[str]:
    """One note per module that kept checks from running, with its install command.

    On a machine without CUDA (``cuda`` False) torch is named without the fork's CUDA
    index: the CPU build serves the static tier, and the GPU tiers cannot run there."""
    needed: dict[str, list[str]] = {}
    for c in checks:
        if c["outcome"] == NOT_RUN:
            for module in missing_modules(c.get("detail", "")):
                needed.setdefault(module, []).append(c["id"])
    notes = []
    for module, ids in needed.items():
        what = pins.get(module) or DISTRIBUTIONS.get(module, module)
        cpu = module == "torch" and not cuda
        if cpu:
            if index_configured is None:
                index_configured = pip_index_configured()
            what = _cpu_torch(what, index_configured)
        install = f"`{python} -m pip install {what}`"
        if deps == "none":
            how = (
                "--deps none installs nothing but the wheels: use --deps system with a "
                f"python that has it ({install}), or --deps index"
            )
        elif deps == "index":
            how = f"the index did not install it; {install} and use --deps system"
        else:
            how = f"install it for the python the smoke environment is made from: {install}"
        pinned = " (the fork's pin at the series' base)" if module in pins else ""
        if cpu:
            pinned += (
                "; this machine has no CUDA device: torch's CPU build serves the static "
                "tier, and the gpu and sm70 tiers need a CUDA machine"
            )
        notes.append(
            f"{len(ids)} check(s) did not run for want of the module '{module}': {how}{pinned}"
        )
    return notes
