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

from forkpatch.intree import extract_tar
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
        extract_tar(tar, dest)
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


def _run_checks(
    tree: Path, *names: str, ops: str = "reference"
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(tree),
        "PYTHONDONTWRITEBYTECODE": "1",
        "VLLM_LOGGING_LEVEL": "ERROR",
    }
    return subprocess.run(
        [sys.executable, str(CHECKS), ops, *names],
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


# A cast as a GPU may compute it: the layer quantizes on the device, where CUDA's division
# by a scalar makes some e4m3 codes round the other way (400-2,500 a layer on an H200).
# Written into the exported tree's online/fp8.py: every STRIDE-th code moved STEP steps
# toward zero, the scales times SCALE.
_DEVICE_CAST = """

def _device_rounded_cast(x, block_size, use_ue8m0=False):
    from vllm.utils.deep_gemm import _per_block_cast_to_fp8_eager

    q, s = _per_block_cast_to_fp8_eager(x, block_size, use_ue8m0)
    flat = q.view(torch.uint8).clone().view(-1)
    idx = torch.arange(0, flat.numel(), {stride}, device=flat.device)
    mag = (flat[idx] & 0x7F).to(torch.int16)
    moved = torch.clamp(mag - {step}, min=0).to(torch.uint8)
    flat[idx] = (flat[idx] & 0x80) | moved
    return flat.view(q.shape).view(torch.float8_e4m3fn), s * {scale}


per_block_cast_to_fp8 = _device_rounded_cast
"""


def _with_device_cast(tmp_path: Path, *, stride: int, step: int, scale: str) -> Path:
    tree = _export_patched("v1.2.1", tmp_path / "fork")
    source = tree / FP8
    assert "per_block_cast_to_fp8(\n" in source.read_text(), "online/fp8.py changed"
    with source.open("a") as fh:
        fh.write(_DEVICE_CAST.format(stride=stride, step=step, scale=scale))
    return tree


def test_the_reference_is_the_layers_own_cast_on_a_device_that_rounds_otherwise(
    tmp_path: Path,
) -> None:
    """The layer quantizes on the device; the reference is computed from the weights it
    quantized (checked against the CPU cast: one step, 1% of the codes at most), so a
    device whose cast rounds a few codes the other way passes, bit-exact through the
    stand-ins. A reference recomputed from the CPU cast fails here."""
    realfork.modules_or_skip()
    tree = _with_device_cast(tmp_path, stride=997, step=1, scale="1.0")
    result = _run_checks(tree, "sm70-linear-odd-width", "sm70-linear-odd-width-bias")
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr[-6000:]}"


@pytest.mark.parametrize(
    ("stride", "step", "scale", "message"),
    [
        (997, 2, "1.0", "by up to 2 steps (at most 1)"),
        (20, 1, "1.0", "codes differ (at most"),
        (997, 0, "(1.0 + 1e-4)", "the layer's block scales differ from the CPU cast's"),
    ],
    ids=["two-steps", "too-many-codes", "scales"],
)
def test_a_cast_further_from_the_cpus_than_rounding_still_fails(
    tmp_path: Path, stride: int, step: int, scale: str, message: str
) -> None:
    """The reference follows the layer's cast only as far as rounding explains: a cast
    two steps off, one that differs in more than 1% of the codes, or scales that differ
    beyond their last bits fail, naming the cast."""
    realfork.modules_or_skip()
    tree = _with_device_cast(tmp_path, stride=stride, step=step, scale=scale)
    result = _run_checks(tree, "sm70-linear-odd-width-bias")
    assert result.returncode != 0, result.stdout
    assert message in result.stderr, result.stderr[-3000:]


# --------------------------------------------------------------------------- negative controls
# The stand-ins computing as a GPU does (fp32 accumulation): the layer checks compare each
# element within the tolerance of the reference's own rounding, not bit for bit. Each wrong
# kernel the sceptic built for the GPU must fail every layer check that computes, and so
# must the old reference of the CPU's cast, where the layer quantized on a device.
LINEAR_CHECKS = ["sm70-linear-odd-width", "sm70-linear-odd-width-bias", "sm70-linear-block-width"]


def test_the_layer_checks_pass_a_kernel_that_rounds_as_a_gpu_does(tmp_path: Path) -> None:
    realfork.modules_or_skip()
    tree = _export_patched("v1.2.1", tmp_path / "fork")
    result = _run_checks(tree, *LINEAR_CHECKS, "sm70-warmup", ops="gpu-like")
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr[-6000:]}"


@pytest.mark.parametrize(
    "fault", ["scale=1.02", "scale=1.003", "zero-cols=0-127", "misplaced-scales"]
)
def test_each_wrong_kernel_fails_each_layer_check(tmp_path: Path, fault: str) -> None:
    realfork.modules_or_skip()
    tree = _export_patched("v1.2.1", tmp_path / "fork")
    checks = [*LINEAR_CHECKS, "sm70-warmup"]
    result = _run_checks(tree, "--each", *checks, ops=f"gpu-like:{fault}")
    lines = result.stdout.splitlines()
    assert [ln.split(":")[0] for ln in lines] == [f"FAIL {c}" for c in checks], result.stdout
    assert all("outside their tolerance" in ln for ln in lines), result.stdout
    if fault == "zero-cols=0-127":
        assert all("column(s) 0-127" in ln for ln in lines), result.stdout


def test_the_cpu_cast_reference_fails_where_the_layer_quantized_on_a_device(tmp_path: Path) -> None:
    """The bug the last round fixed, kept as a control: with a device's cast (a code in
    997 one step off) the reference of the layer's own cast passes and the CPU's fails."""
    realfork.modules_or_skip()
    tree = _with_device_cast(tmp_path, stride=997, step=1, scale="1.0")
    ok = _run_checks(tree, "sm70-linear-odd-width", ops="gpu-like")
    assert ok.returncode == 0, ok.stderr[-3000:]
    bad = _run_checks(tree, "sm70-linear-odd-width", ops="gpu-like+cpu-cast-reference")
    assert bad.returncode != 0 and "outside their tolerance" in bad.stderr, bad.stderr[-3000:]
