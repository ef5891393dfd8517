"""static.cli-version on a machine where vLLM detects no platform.

An `empty` or CUDA wheel on a CPU-only machine (CI) has no vLLM platform: the
fork's CLI builds `serve`'s defaults before parsing `--version` and dies with
"Failed to infer device type". The check then selects vLLM's CPU platform
through a platform plugin that exists only for that run, and says so.
The fake console script here behaves like vLLM's platform detection.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from forkpatch.smoke import incheck

FAKE_VLLM = """#!{python}
import sys
from importlib.metadata import entry_points

plugins = [ep for ep in entry_points(group="vllm.platform_plugins")]
platforms = [ep.load()() for ep in plugins]
if not platforms:
    print("RuntimeError: Failed to infer device type, please set ...")
    sys.exit(1)
assert platforms == ["vllm.platforms.cpu.CpuPlatform"], platforms
print("INFO platform plugin activated")
print("{version}")
"""
VERSION = "1.2.1+fp.0123456789"


@pytest.fixture
def fake_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A `vllm` script beside a stand-in sys.executable (where the check looks)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "vllm"
    script.write_text(FAKE_VLLM.format(python=sys.executable, version=VERSION))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(sys, "executable", str(bindir / "python"))
    monkeypatch.delenv("PYTHONPATH", raising=False)
    return bindir


def test_no_platform_without_cuda_retries_with_the_cpu_platform(fake_bin: Path) -> None:
    ctx = incheck.Ctx(spec={"version": VERSION}, device={"cuda_available": False})
    detail = incheck.cli_version(ctx)
    assert detail.startswith(f"`vllm --version` -> {VERSION}")
    assert "CPU platform selected by a platform plugin" in detail


def test_no_platform_with_cuda_is_a_failure(fake_bin: Path) -> None:
    """With a CUDA device vLLM must find its platform itself: no stand-in."""
    ctx = incheck.Ctx(spec={"version": VERSION}, device={"cuda_available": True})
    with pytest.raises(AssertionError, match="Failed to infer device type"):
        incheck.cli_version(ctx)


def test_cpu_platform_plugin_is_metadata_only(tmp_path: Path) -> None:
    incheck.write_cpu_platform_plugin(str(tmp_path))
    names = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert names == [
        os.path.join("forkpatch_smoke_cpu_platform-0.dist-info", "METADATA"),
        os.path.join("forkpatch_smoke_cpu_platform-0.dist-info", "entry_points.txt"),
        "forkpatch_smoke_cpu_platform.py",
    ]
