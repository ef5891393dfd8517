from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import wheelfactory

from forkpatch.wheels.identity import BuilderInfo, PatchRecord, Provenance

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def provenance() -> Provenance:
    return Provenance(
        fork_url="https://github.com/1CatAI/1Cat-vLLM",
        tag="v1.2.1",
        commit=COMMIT,
        patches=(
            PatchRecord("capability-floor", sha256="a" * 64),
            PatchRecord("vllm-dist-info", build_step="vllm-dist-info"),
        ),
        forkpatch_version="0.1.0",
        builder=BuilderInfo(mode="overlay", base_wheel_sha256="b" * 64, build_args={"k": "v"}),
    )


@pytest.fixture
def base_wheel(tmp_path: Path) -> Path:
    d = tmp_path / "base"
    d.mkdir()
    return wheelfactory.build_wheel(d, wheelfactory.base_files())


@pytest.fixture
def out_dir(tmp_path: Path) -> Path:
    d = tmp_path / "out"
    d.mkdir()
    return d


@pytest.fixture(scope="session")
def realistic_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """~80 MB, ~2,500 members; built once per session (a few seconds)."""
    d = tmp_path_factory.mktemp("realistic")
    # deflate level 0 for the binaries: still deflate-typed members (what
    # matters for raw copying), but generated at memcpy speed.
    return wheelfactory.build_wheel(
        d, wheelfactory.realistic_files(), binary_compresslevel=0, entry_points=None
    )
