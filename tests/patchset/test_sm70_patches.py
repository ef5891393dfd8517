"""The SM70 patches (1-4) on the real fork: the patched layers through the strict CPU
stand-ins for the fork's SM70 FP8 ops and through the fork's own SM70 warmup (issue 17).

Like test_patch_set.py it runs on FORKPATCH_FORK_REPO, else the fixture
../shared/fixtures/1cat-vllm.git (tests/support/realfork.py). The fork's ``vllm/`` at a tag
is exported with ``git archive`` (no clone: the fixture is shallow and lacks a few docs
blobs), the series' patch files 1-4 are applied with ``git apply``, and
``patched_checks.py`` runs the smoke suite's checks in a subprocess whose sys.path
starts with that tree. Needs torch (a CPU build) and the fork's Python dependencies
that importing its quantization and warmup modules pulls in.

v1.2.1 is the series' base; v1.3.0 is the newest release the series applies to, and its
SM70 warmup differs (tensor-parallel tuning exchange, torch.accelerator sync).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from support import REPO_ROOT, realfork

FORK_REPO = realfork.FORK

pytestmark = [
    pytest.mark.real_fork,
    pytest.mark.skipif(
        not FORK_REPO or not Path(FORK_REPO).is_dir(),
        reason="set FORKPATCH_FORK_REPO to a local clone of the 1Cat-vLLM fork",
    ),
]

CHECKS = REPO_ROOT / "tests" / "support" / "patched_checks.py"
SM70_PATCHES = ["capability-floor", "odd-width-padding", "eager-block-cast", "packed-repack"]
SM70_CHECKS = [
    "capability-floor",
    "sm70-linear-odd-width",
    "sm70-linear-block-width",
    "sm70-linear-odd-width-bias",
    "unsupported-k",
    "sm70-warmup",
]
FP8 = "vllm/model_executor/layers/quantization/online/fp8.py"


def _export_patched(tag: str, dest: Path) -> Path:
    """The fork's vllm/ at ``tag`` in ``dest``, with patches 1-4 applied."""
    realfork.tags_or_skip(tag)
    archive = subprocess.run(
        ["git", "--git-dir", realfork.git_dir(FORK_REPO), "archive", "--format=tar", tag, "vllm"],
        capture_output=True,
        check=True,
    ).stdout
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    # A repository of its own, so that `git apply` resolves paths against dest.
    subprocess.run(["git", "init", "-q", str(dest)], check=True)
    for name in SM70_PATCHES:
        result = subprocess.run(
            ["git", "-C", str(dest), "apply", str(REPO_ROOT / "patches" / f"{name}.patch")],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, f"{name} does not apply on {tag}:\n{result.stderr}"
    return dest


def _run_checks(tree: Path, *names: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(tree),
        "PYTHONDONTWRITEBYTECODE": "1",
        "VLLM_LOGGING_LEVEL": "ERROR",
    }
    return subprocess.run(
        [sys.executable, str(CHECKS), "reference", *names],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


@pytest.mark.parametrize("tag", ["v1.2.1", "v1.3.0"])
def test_patched_layers_pass_the_strict_stand_ins_and_the_forks_warmup(
    tag: str, tmp_path: Path
) -> None:
    """Capability floor (fp8_per_block only, the fork's switches honoured, MoE refused
    by name); 4,120- and 128-multiple-wide layers with and without a bias, bit-exact
    against the reference; a K the GEMM cannot take kept fp16; and the fork's own
    SM70 warmup over all of them, with one GEMM call per layer shape and decode M."""
    realfork.modules_or_skip()
    tree = _export_patched(tag, tmp_path / "fork")
    result = _run_checks(tree, *SM70_CHECKS)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr[-6000:]}"
    assert result.stdout.split() == [w for name in SM70_CHECKS for w in ("PASS", name)]


def test_the_warmup_check_fails_on_the_crash_of_issue_17(tmp_path: Path) -> None:
    """Without the fix (output_size_per_partition left at the true width while the
    packed weight is padded), the fork's warmup hands the GEMM an output narrower
    than the weight, and the stand-in refuses it as the kernel does."""
    realfork.modules_or_skip()
    tree = _export_patched("v1.2.1", tmp_path / "fork")
    source = tree / FP8
    text = source.read_text()
    fix = "            layer.output_size_per_partition = qweight.shape[0]\n            self._pack_for_sm70("
    assert text.count(fix) == 1, "the SM70 branch of packed-repack changed: update this test"
    source.write_text(text.replace(fix, "            self._pack_for_sm70("))
    result = _run_checks(tree, "sm70-warmup")
    assert result.returncode != 0, result.stdout
    assert "the fork's SM70 warmup fails on the patched layers" in result.stderr
    assert "fp8_gemm_sm70: output cols must match weight output dim." in result.stderr
