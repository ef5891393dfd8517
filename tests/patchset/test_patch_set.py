"""The real patch set (series.yaml + patches/) against the real 1Cat-vLLM fork.

The fork is FORKPATCH_FORK_REPO or the fixture ../shared/fixtures/1cat-vllm.git
(tests/support/realfork.py). The tests do not use forkpatch's engine: they apply
the patch files with plain `git apply` to the fork's files (`git archive`: the
fixture cannot be cloned), then run `patched_checks.py` in a subprocess whose
sys.path starts with the patched tree. That runner uses the smoke suite's check
logic (forkpatch.smoke.incheck), so these tests and `forkpatch smoke` share one
implementation. Those checks need CPU torch and the fork's Python dependencies
(`bash tests/support/setup-real-fork.sh`; a missing one skips, naming
it); they stand in float reference implementations for the SM70 FP8 ops and mock
the device capability.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from support import REPO_ROOT, realfork

pytestmark = pytest.mark.real_fork

CHECKS = REPO_ROOT / "tests" / "support" / "patched_checks.py"
BASE_TAG = "v1.2.1"
# Patches 1-4 stay in files that are byte-identical from v1.2.1 to v1.3.0.
QUANT_PATCHES = ["capability-floor", "odd-width-padding", "eager-block-cast", "packed-repack"]


def _git(repo: Path | str, *args: str, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        ["git", "-C", str(repo), *args],
        check=False,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    if result.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed:\n{result.stderr}")
    return result.stdout


def _series_patch_files() -> list[tuple[str, Path]]:
    """(name, patch file) in series order; build steps have no file."""
    series = yaml.safe_load((REPO_ROOT / "series.yaml").read_text())
    return [
        (entry["name"], REPO_ROOT / "patches" / entry["file"])
        for entry in series["patches"]
        if "file" in entry
    ]


def _check_in_index(tmp_path: Path, tag: str, patches: list[Path], reverse: bool = False) -> None:
    """git apply --check each patch in order onto `tag`, through a temporary
    index (no work tree, so the fork's missing docs blobs never matter; the
    read-only fork is not written: the index lives in tmp_path)."""
    fork = realfork.fork_or_skip()
    realfork.tags_or_skip(tag)
    # New objects (the patched blobs) go to tmp_path, never into the fork.
    objects = tmp_path / f"objects-{tag}"
    objects.mkdir()
    env = {
        "GIT_INDEX_FILE": str(tmp_path / f"index-{tag}"),
        "GIT_OBJECT_DIRECTORY": str(objects),
        "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(Path(realfork.git_dir(fork), "objects")),
    }
    _git(fork, "read-tree", tag, env=env)
    for patch in patches:
        flags = ["--cached", "-R"] if reverse else ["--cached"]
        _git(fork, "apply", "--check", *flags, str(patch), env=env)
        _git(fork, "apply", *flags, str(patch), env=env)


@pytest.fixture(scope="module")
def patched_tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The fork's files at v1.2.1 (but docs/) with every patch file of the series
    applied in order by `git apply`."""
    realfork.fork_or_skip()
    realfork.tags_or_skip(BASE_TAG)
    tree = realfork.export_tree(
        BASE_TAG, tmp_path_factory.mktemp("fork") / "1cat-vllm", ".", ":(exclude)docs"
    )
    for name, patch in _series_patch_files():
        result = subprocess.run(
            ["git", "apply", str(patch)],
            cwd=tree,
            check=False,
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, f"{name} does not apply:\n{result.stderr}"
    yield tree


def _run_checks(tree: Path, *names: str) -> str:
    env = {
        **os.environ,
        "PYTHONPATH": str(tree),
        "PYTHONDONTWRITEBYTECODE": "1",
        "VLLM_LOGGING_LEVEL": "ERROR",
    }
    result = subprocess.run(
        [sys.executable, str(CHECKS), "reference", *names],
        cwd=tree,
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, (
        f"patched checks failed:\n{result.stdout}\n{result.stderr[-6000:]}"
    )
    return result.stdout


# ---------------------------------------------------------------------------
# Applying
# ---------------------------------------------------------------------------


def test_series_lists_the_six_patches_in_order() -> None:
    series = yaml.safe_load((REPO_ROOT / "series.yaml").read_text())
    names = [p["name"] for p in series["patches"]]
    assert names == [*QUANT_PATCHES, "vllm-dist-info", "cli-version"]
    fork = realfork.fork_or_skip()
    assert series["base"]["commit"] == _git(fork, "rev-parse", f"{BASE_TAG}^{{commit}}").strip()


def test_patches_apply_in_order_on_base(tmp_path: Path) -> None:
    _check_in_index(tmp_path, BASE_TAG, [p for _, p in _series_patch_files()])


def test_patches_apply_on_v1_2_2(tmp_path: Path) -> None:
    _check_in_index(tmp_path, "v1.2.2", [p for _, p in _series_patch_files()])


def test_quantization_patches_apply_on_v1_3_0(tmp_path: Path) -> None:
    files = dict(_series_patch_files())
    _check_in_index(tmp_path, "v1.3.0", [files[n] for n in QUANT_PATCHES])


def test_cli_version_is_upstream_in_v1_3_0(tmp_path: Path) -> None:
    """The backport reverse-applies on v1.3.0: its result is already there."""
    _check_in_index(tmp_path, "v1.3.0", [dict(_series_patch_files())["cli-version"]], reverse=True)


# ---------------------------------------------------------------------------
# Patched code on CPU (float reference SM70 ops, mocked capability)
# ---------------------------------------------------------------------------


def test_patched_quantization_code(patched_tree: Path) -> None:
    """capability floor, padding helpers, eager block cast, and the SM70
    linear path (4,120 and 128-multiple widths, with and without bias)."""
    realfork.modules_or_skip()
    out = _run_checks(patched_tree)
    for name in [
        "capability-floor",
        "padding-helpers",
        "eager-block-cast",
        "sm70-linear-odd-width",
        "sm70-linear-block-width",
        "sm70-linear-odd-width-bias",
    ]:
        assert f"PASS {name}" in out


def test_patched_cli_version(patched_tree: Path) -> None:
    realfork.modules_or_skip()
    assert "PASS cli-version" in _run_checks(patched_tree, "cli-version")


def test_fork_own_cpu_tests(patched_tree: Path, tmp_path: Path) -> None:
    """The fork's own CPU-runnable tests touching the patched files:
    tests/entrypoints/test_cli.py (added by cli-version), the online
    quantization tests (GPU cases skip on a CPU) and the config-args tests.

    The checkout is not installed, so a metadata-only `1cat-vllm` dist-info
    with a `+cpu` version (what a CPU wheel carries) lets vLLM's platform
    detection pick the CPU platform, as an installed wheel would."""
    realfork.modules_or_skip((*realfork.FORK_MODULES, "pytest"))
    dist_info = tmp_path / "meta" / "1cat_vllm-1.2.1+cpu.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: 1cat-vllm\nVersion: 1.2.1+cpu\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(patched_tree), str(dist_info.parent)]),
        "PYTHONDONTWRITEBYTECODE": "1",
        # vLLM logs to stdout; test_cli.py compares stdout with the version.
        "VLLM_LOGGING_LEVEL": "ERROR",
    }
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--noconftest",
            "tests/entrypoints/test_cli.py",
            "tests/quantization/test_quantization_config_args.py",
            "tests/quantization/test_online.py",
        ],
        cwd=patched_tree,
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " failed" not in result.stdout.splitlines()[-1]
