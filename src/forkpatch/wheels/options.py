"""The frozen options of one wheel build (`forkpatch build-wheel` and the container builder).

One value object travels from the CLI (or track, bisect, a test) through
:func:`forkpatch.wheels.buildwheel.build_wheel` into
:func:`forkpatch.wheels.container.build_in_container`; fields left ``None``
fall back to series.yaml's ``build:`` section and then to the defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from forkpatch.errors import BuildError

if TYPE_CHECKING:
    from forkpatch.wheels.container import CacheConfig

#: The production base of the builder image, pinned by digest (ci/builder.Dockerfile
#: says where the digest comes from and that it was not checked against the registry).
DEFAULT_BASE_IMAGE = (
    "nvidia/cuda:12.8.1-devel-ubuntu22.04"
    "@sha256:a99a1860ba8e2916e5c3e73b72ec4c4301653a84586e05bfc9a2aa2d58027e97"
)

#: How the builder image gets its toolchain (ci/builder.Dockerfile, ARG TOOLCHAIN).
TOOLCHAINS = ("apt", "wheels", "none")

#: The fork's own variables for local copies of what its CMake would otherwise
#: download at configure time (FetchContent). Any of them may be given in
#: :attr:`BuildOptions.sources`; which ones a build needs depends on the arch list.
FORK_SOURCE_VARS = (
    "VLLM_CUTLASS_SRC_DIR",
    "TRITON_KERNELS_SRC_DIR",
    "VLLM_FLASH_ATTN_SRC_DIR",
    "DEEPGEMM_SRC_DIR",
    "FLASH_MLA_SRC_DIR",
    "QUTLASS_SRC_DIR",
)


@dataclass(frozen=True)
class BuildOptions:
    """Everything a build may be told; ``None`` means "series.yaml, then the default".

    Container fields: ``toolchain`` (``apt`` | ``wheels`` | ``none``, see the
    Dockerfile), ``python_version`` (the builder's Python, default 3.12),
    ``wheelhouse`` (``wheels`` only: a directory served to the image build on
    the host's loopback, or a ``--find-links`` URL; ``None``: PyPI),
    ``sources`` (a fork source variable such as ``VLLM_CUTLASS_SRC_DIR`` ->
    a local directory, copied into the container under ``/deps``), ``cache``,
    ``dockerfile``, ``tools`` (host binaries put into the image),
    ``network_mode`` (of the build container) and ``extra_env``.
    """

    mode: str = "auto"
    base_wheel: Path | None = None
    out_dir: Path | None = None
    arch_list: str | None = None
    base_image: str | None = None
    toolchain: str = "apt"
    python_version: str | None = None
    wheelhouse: Path | str | None = None
    sources: Mapping[str, Path] = field(default_factory=dict)
    max_jobs: int | None = None
    keep_container: bool | None = None
    cache: CacheConfig | None = None
    dockerfile: Path | None = None
    tools: Mapping[str, Path] = field(default_factory=dict)
    network_mode: str | None = None
    extra_env: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.toolchain not in TOOLCHAINS:
            raise BuildError(
                f"unknown toolchain {self.toolchain!r}",
                tip="use apt (nvidia/cuda devel base, network), wheels (hash-pinned PyPI "
                "wheels, offline with a wheelhouse) or none (a base that has everything)",
            )
        if self.wheelhouse is not None and self.toolchain != "wheels":
            raise BuildError(
                f"a wheelhouse is only read by the wheels toolchain (got {self.toolchain!r})",
                tip="add --toolchain wheels, or drop --wheelhouse",
            )
        for var in self.sources:
            if var not in FORK_SOURCE_VARS:
                raise BuildError(
                    f"{var!r} is not one of the fork's source variables",
                    tip="use one of " + ", ".join(FORK_SOURCE_VARS),
                )


__all__ = ["DEFAULT_BASE_IMAGE", "FORK_SOURCE_VARS", "TOOLCHAINS", "BuildOptions"]
