"""``--toolchain none``: what the fork tree's build needs from the base image, read
from the tree (:func:`toolchain_needs`), and the probe that refuses an image lacking
it before any source is copied (:func:`require_toolchain`)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from forkpatch.errors import BuildError
from forkpatch.wheels.sourcetree import TreeEntry, source_reader

if TYPE_CHECKING:
    import docker

#: Build requirements whose import name is not their distribution's name with "_".
_IMPORT_NAMES = {"pyyaml": "yaml", "setuptools-scm": "setuptools_scm"}
#: Build requirements that are commands, not modules.
_COMMANDS = {"cmake": "cmake", "ninja": "ninja"}


def toolchain_needs(source: Path | Sequence[TreeEntry], env: Mapping[str, str]) -> list[str]:
    """What building ``source`` with no toolchain installed by forkpatch (``--toolchain
    none``) needs from the base image: each ``[build-system] requires`` of the tree's
    pyproject.toml (``module:NAME`` or ``command:NAME``), and ``command:nvcc`` for a
    CUDA CMake build. Read from the tree: a fork that needs none of them asks for none."""
    from packaging.requirements import InvalidRequirement, Requirement

    read = source_reader(source)
    needs: list[str] = []
    pyproject = read("pyproject.toml")
    if pyproject:
        block = re.search(
            rb"^\[build-system\][^\[]*?^requires\s*=\s*\[(.*?)\]", pyproject, re.M | re.S
        )
        for item in re.findall(rb"[\"']([^\"']+)[\"']", block.group(1) if block else b""):
            try:
                name = Requirement(item.decode("utf-8", "replace")).name.lower()
            except InvalidRequirement:
                continue
            if name in _COMMANDS:
                needs.append(f"command:{_COMMANDS[name]}")
            else:
                needs.append(f"module:{_IMPORT_NAMES.get(name, name.replace('-', '_'))}")
    cmake = read("CMakeLists.txt") or b""
    if env.get("VLLM_TARGET_DEVICE", "cuda") == "cuda" and re.search(rb"\bCUDA\b", cmake):
        needs.append("command:nvcc")
    return list(dict.fromkeys(needs))


def _probe_script(needs: Sequence[str]) -> str:
    """A shell line printing each of ``needs`` that the image lacks, one a line."""
    modules = [n.split(":", 1)[1] for n in needs if n.startswith("module:")]
    commands = [n.split(":", 1)[1] for n in needs if n.startswith("command:")]
    lines = [f"command -v {c} >/dev/null 2>&1 || echo command:{c}" for c in commands]
    if modules:
        probe = (
            "import importlib.util, sys; [print('module:' + m) for m in sys.argv[1:] "
            "if importlib.util.find_spec(m) is None]"
        )
        lines.append(
            'py=$(command -v python || command -v python3) && "$py" -c "'
            + probe
            + '" '
            + " ".join(modules)
            + " || echo command:python"
        )
    return "; ".join(lines) or "true"


def require_toolchain(
    client: docker.DockerClient, image: str, needs: Sequence[str], base_image: str
) -> None:
    """Refuse, before the source is copied in, a base image that lacks what the tree's
    build needs (``--toolchain none`` installs nothing)."""
    if not needs:
        return
    out = client.containers.run(
        image, ["sh", "-c", _probe_script(needs)], remove=True, stdout=True, stderr=False
    )
    missing = [line for line in out.decode("utf-8", "replace").split() if ":" in line]
    if missing:
        raise BuildError(
            f"the base image {base_image} lacks what the fork's build needs with "
            f"--toolchain none: {', '.join(m.split(':', 1)[1] for m in missing)} "
            "(nothing was copied into a container)",
            tip="use a base image that has them (the CUDA devel image with torch), or let "
            "forkpatch install the toolchain: --toolchain apt or --toolchain wheels",
        )
