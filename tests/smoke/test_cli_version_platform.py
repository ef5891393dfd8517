"""static.cli-version on a machine where vLLM detects no platform.

An `empty` or CUDA wheel on a CPU-only machine (CI) has no vLLM platform: the
fork's CLI builds `serve`'s defaults before parsing `--version` and dies with
"Failed to infer device type". The check then selects vLLM's CPU platform
through a platform plugin that exists only for that run, and says so.
The fake console script here behaves like vLLM's platform detection.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from pathlib import Path

import pytest

from forkpatch.smoke import incheck

FAKE_VLLM = """#!{python}
import os, sys
with open(os.path.join(os.path.dirname(sys.argv[0]), "runs"), "a") as fh:
    fh.write("run\\n")
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


def runs(bindir: Path) -> int:
    path = bindir / "runs"
    return len(path.read_text().splitlines()) if path.is_file() else 0


def test_no_platform_without_cuda_runs_once_with_the_cpu_platform(fake_bin: Path) -> None:
    ctx = incheck.Ctx(spec={"version": VERSION}, device={"cuda_available": False})
    detail = incheck.cli_version(ctx)
    assert detail.startswith(f"`vllm --version` -> {VERSION}")
    assert "CPU platform selected by a platform plugin" in detail
    assert runs(fake_bin) == 1  # not once without the plugin and again with it


@pytest.mark.parametrize("cuda", [False, True])
@pytest.mark.parametrize("printed", ["1.2.1", "1.2.1+fp.9999999999", ""])
def test_a_wrong_version_fails(
    fake_bin: Path, monkeypatch: pytest.MonkeyPatch, cuda: bool, printed: str
) -> None:
    """The check catches a console script that prints another version (or none)."""
    script = fake_bin / "vllm"
    text = script.read_text()
    if cuda:  # a CUDA box: vLLM finds its platform, no plugin
        text = text.replace("if not platforms:", "if False:").replace(
            "assert platforms ==", "assert not platforms or platforms =="
        )
    script.write_text(text.replace(f'print("{VERSION}")', f'print("{printed}")'))
    ctx = incheck.Ctx(spec={"version": VERSION}, device={"cuda_available": cuda})
    with pytest.raises(AssertionError, match=re.escape(f"want {VERSION!r}")):
        incheck.cli_version(ctx)


def test_it_starts_with_the_check_process_and_runs_once(fake_bin: Path) -> None:
    """The check process starts `vllm --version` before the other checks run
    (start_early); the check then reads that run and starts no second one."""
    ctx = incheck.Ctx(spec={"version": VERSION}, device={"cuda_available": False})
    incheck.start_early(["static.installed-from-wheel", "static.cli-version"], ctx)
    assert set(ctx.early) == {"static.cli-version"}
    ctx.early["static.cli-version"].proc.wait(timeout=60)
    assert runs(fake_bin) == 1  # ran before its check's turn
    assert incheck.cli_version(ctx).startswith(f"`vllm --version` -> {VERSION}")
    assert runs(fake_bin) == 1
    assert not ctx.early


@pytest.mark.parametrize(
    "ids",
    [
        ["static.installed-from-wheel", "static.cli-version", "static.provenance"],
        ["static.cli-version", "static.version-metadata"],
        ["static.cli-version"],
        ["static.version-metadata", "static.provenance"],
    ],
)
def test_the_early_started_check_runs_after_the_others(fake_bin: Path, ids: list[str]) -> None:
    """The check that waits for `vllm --version` comes last, so that the checks of the
    check process run while that process imports; the others keep their order."""
    ctx = incheck.Ctx(spec={"version": VERSION}, device={"cuda_available": False})
    incheck.start_early(ids, ctx)
    try:
        order = incheck.run_order(ids, ctx)
        others = [c for c in ids if c != "static.cli-version"]
        started = ["static.cli-version"] if "static.cli-version" in ids else []
        assert order == others + started
    finally:
        for run in ctx.early.values():
            run.proc.wait(timeout=60)


def test_the_check_process_runs_its_own_checks_while_the_version_runs(
    fake_bin: Path, tmp_path: Path
) -> None:
    """The check process's records: the in-process check ran before the check that reads
    the version run, and both have their results."""
    import json

    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps({"version": VERSION, "checks": ["static.cli-version", "static.provenance"]})
    )
    out = tmp_path / "results.jsonl"
    from forkpatch.smoke.incheck import __main__ as incheck_main

    saved = dict(incheck.run_spec())  # main() sets this process's run spec
    try:
        assert incheck_main.main(["--spec", str(spec), "--out", str(out)]) == 0
    finally:
        incheck.run_spec().clear()
        incheck.run_spec().update(saved)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    starts = [r["id"] for r in records if r["kind"] == "start"]
    assert starts == ["static.provenance", "static.cli-version"]
    done = {r["id"]: r for r in records if r["kind"] == "check"}
    assert done["static.cli-version"]["outcome"] == incheck.PASSED, done
    assert set(done) == {"static.provenance", "static.cli-version"}


def test_a_missing_console_script_fails(fake_bin: Path) -> None:
    (fake_bin / "vllm").unlink()
    ctx = incheck.Ctx(spec={"version": VERSION}, device={"cuda_available": False})
    incheck.start_early(["static.cli-version"], ctx)
    with pytest.raises(AssertionError, match="no `vllm` console script"):
        incheck.cli_version(ctx)


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


def test_with_a_platform_plugin_of_its_own_it_runs_as_it_is_first(
    fake_bin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An environment with a vLLM platform plugin of its own (a companion wheel) gets no
    second plugin from the start (vLLM refuses two); if vLLM still infers no platform,
    the CPU one is selected and it runs again."""
    import importlib.metadata as md

    real = md.entry_points

    def entry_points(**kw):
        if kw.get("group") == "vllm.platform_plugins":
            return [md.EntryPoint("cuda_look", "x:activate", "vllm.platform_plugins")]
        return real(**kw)

    monkeypatch.setattr(md, "entry_points", entry_points)
    ctx = incheck.Ctx(spec={"version": VERSION}, device={"cuda_available": False})
    detail = incheck.cli_version(ctx)  # the fake sees no plugin: fails, then the CPU one
    assert "CPU platform selected by a platform plugin" in detail
    assert runs(fake_bin) == 2
