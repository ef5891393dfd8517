"""The frozen options of one wheel build (`forkpatch build-wheel` and the container builder).

One value object travels from the CLI (or track, bisect, a test) through
:func:`forkpatch.wheels.buildwheel.build_wheel` into
:func:`forkpatch.wheels.container.build_in_container`; fields left ``None``
fall back to series.yaml's ``build:`` section and then to the defaults.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forkpatch import settings
from forkpatch.errors import BuildError
from forkpatch.kinds import TOOLCHAINS, BuildMode, CacheKind, Toolchain

#: The production base of the builder image, pinned by digest (ci/builder.Dockerfile
#: says where the digest comes from and that it was not checked against the registry).
DEFAULT_BASE_IMAGE = (
    "nvidia/cuda:12.8.1-devel-ubuntu22.04"
    "@sha256:a99a1860ba8e2916e5c3e73b72ec4c4301653a84586e05bfc9a2aa2d58027e97"
)

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

    mode: BuildMode = "auto"
    base_wheel: Path | None = None
    out_dir: Path | None = None
    arch_list: str | None = None
    base_image: str | None = None
    toolchain: Toolchain = "apt"
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


SCCACHE_ENV = (
    "SCCACHE_BUCKET",
    "SCCACHE_ENDPOINT",
    "SCCACHE_REGION",
    "SCCACHE_S3_USE_SSL",
    "SCCACHE_S3_KEY_PREFIX",
    "SCCACHE_S3_NO_CREDENTIALS",
)

#: Passed into the container, never logged.
SECRET_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


@dataclass(frozen=True)
class CacheConfig:
    """Where compiler output is cached between builds.

    ``ccache``: a named docker volume mounted at ``ccache_dir`` (shared by
    every build on one engine). ``sccache``: an S3-compatible bucket (shared
    by every build host); its settings and credentials are read from the host
    environment at build time (``SCCACHE_*``, ``AWS_*``) and never stored here.
    """

    kind: CacheKind = "ccache"
    volume: str = "forkpatch-ccache"
    ccache_dir: str = "/root/.ccache"
    ccache_max_size: str = "20G"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> CacheConfig:
        """sccache when ``SCCACHE_BUCKET`` is set, else the ccache volume.

        ``FORKPATCH_CACHE`` (ccache|sccache|none) and ``FORKPATCH_CCACHE_VOLUME``
        override.
        """
        env = os.environ if environ is None else environ
        kind = settings.text("FORKPATCH_CACHE", env) or (
            "sccache" if env.get("SCCACHE_BUCKET") else "ccache"
        )
        if kind not in ("ccache", "sccache", "none"):
            raise BuildError(
                f"FORKPATCH_CACHE={kind!r} is not a cache kind",
                tip="use ccache, sccache or none",
            )
        return cls(kind=kind, volume=settings.text("FORKPATCH_CCACHE_VOLUME", env) or cls.volume)  # type: ignore[arg-type]

    @classmethod
    def from_mapping(
        cls, data: Mapping[str, Any], *, environ: Mapping[str, str] | None = None
    ) -> CacheConfig:
        """From series.yaml's ``build: cache:`` table (keys ``kind``, ``volume``,
        ``ccache-dir``, ``max-size``); unset keys fall back to :meth:`from_env`.
        """
        import difflib

        keys = {
            "kind": "kind",
            "volume": "volume",
            "ccache-dir": "ccache_dir",
            "max-size": "ccache_max_size",
        }
        for key in data:
            if key not in keys:
                near = difflib.get_close_matches(str(key), keys, n=1)
                raise BuildError(
                    f"unknown key {key!r} in build.cache"
                    + (f" (did you mean {near[0]!r}?)" if near else ""),
                    tip="build.cache takes " + ", ".join(keys),
                )
        base = cls.from_env(environ)
        values = {keys[k]: str(v) for k, v in data.items()}
        if values.get("kind", base.kind) not in ("ccache", "sccache", "none"):
            raise BuildError(
                f"build.cache.kind {values['kind']!r} is not a cache kind",
                tip="use ccache, sccache or none",
            )
        return dataclasses.replace(base, **values)  # type: ignore[arg-type]

    def container_env(
        self, environ: Mapping[str, str] | None = None
    ) -> tuple[dict[str, str], list[str]]:
        """Environment for the build container, and the values that must never be shown."""
        env = os.environ if environ is None else environ
        out: dict[str, str] = {"FORKPATCH_CACHE": self.kind}
        secrets: list[str] = []
        if self.kind == "ccache":
            out["CCACHE_DIR"] = self.ccache_dir
            out["CCACHE_MAXSIZE"] = self.ccache_max_size
        elif self.kind == "sccache":
            if not env.get("SCCACHE_BUCKET"):
                raise BuildError(
                    "the sccache cache needs SCCACHE_BUCKET",
                    tip="set SCCACHE_BUCKET (and SCCACHE_ENDPOINT, SCCACHE_REGION, "
                    "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) or use the ccache volume",
                )
            for key in SCCACHE_ENV + SECRET_ENV:
                if env.get(key):
                    out[key] = env[key]
            secrets = [env[k] for k in SECRET_ENV if env.get(k)]
        return out, secrets


def default_dockerfile() -> Path:
    """The builder Dockerfile (with ``container-build.sh`` beside it).

    ``ci/builder.Dockerfile`` of the forkpatch checkout this module runs from
    (a source tree or an editable install), else the copy packaged as
    ``forkpatch/data/`` (an installed forkpatch; in the checkout those are
    symlinks to ci/, and the wheel build copies their targets).
    """
    here = Path(__file__).resolve()
    checkout = here.parents[3] / "ci" / "builder.Dockerfile"
    if checkout.is_file() and (checkout.parent / "container-build.sh").is_file():
        return checkout
    return here.parents[1] / "data" / "builder.Dockerfile"
