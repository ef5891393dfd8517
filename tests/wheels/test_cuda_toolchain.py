"""The real CUDA builder on the fork's SM70 sources (opt-in: GBs of downloads, long compiles).

What runs: the builder image with ``TOOLCHAIN=wheels`` (torch 2.10.0 cu128 and
the fork's build requirements from the hash-pinned ``ci/cuda-wheels.lock``,
installed offline from a wheelhouse served on the host's loopback) on the CUDA
stand-in base (Debian bookworm + Debian's NVIDIA CUDA 12.4 compiler packages:
PyPI has no CUDA 12.8 nvcc, see docs/container-build.md). In it, with
``TORCH_CUDA_ARCH_LIST=7.0``, the fork's CMake configures with CUTLASS from a
local copy, and the TurboMind SM70 FP8 GEMM units and one SM70 Marlin unit
compile; ``cuobjdump`` shows sm_70 code. Then one unit is changed and the units
are compiled again in a fresh container: ccache serves the unchanged ones.

Opt-in: ``FORKPATCH_CUDA_TEST=1`` or ``-m cuda``. Inputs (each skips with the
reason when it cannot be had):

- wheelhouse: ``FORKPATCH_CUDA_WHEELHOUSE`` (default ``~/.cache/forkpatch/cuda-wheelhouse``),
  downloaded with pip when incomplete (~4 GB);
- Debian CUDA packages: ``FORKPATCH_CUDA_DEBS`` (default ``~/.cache/forkpatch/cuda-debs``),
  downloaded with ``ci/cuda-debs.sh`` when absent (~1.6 GB);
- the fork: ``FORKPATCH_FORK_REPO`` or ``../shared/fixtures/1cat-vllm.git`` (tag v1.2.1);
- CUTLASS v4.4.2 (the fork's ``CUTLASS_REVISION``): ``FORKPATCH_CUTLASS_SRC``,
  else a shallow git clone of it;
- triton_kernels (Python files the fork's CMake copies at *install* time,
  never compiled): ``FORKPATCH_TRITON_KERNELS_SRC``, else a placeholder directory,
  which is enough to configure and compile but not to build a wheel.

``FORKPATCH_CUDA_REPORT=DIR`` keeps the timings, cuobjdump listings and logs.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from forkpatch.errors import BuildError
from forkpatch.wheels import wheelhouse
from forkpatch.wheels.container import CacheConfig, compile_in_container
from forkpatch.wheels.options import BuildOptions
from support import REPO_ROOT, realfork

pytestmark = [pytest.mark.docker, pytest.mark.cuda, pytest.mark.slow]

CUDA_STANDIN = "forkpatch-cuda-standin:bookworm-cuda12.4"
CACHE = Path(os.path.expanduser("~/.cache/forkpatch"))
CUTLASS_TAG = "v4.4.2"  # CMakeLists.txt CUTLASS_REVISION at the fork's v1.2.1
FORK_TAG = "v1.2.1"
#: The TurboMind SM70 FP8 GEMM behind fp8_sm70_prepare / fp8_gemm_sm70_out (the ops
#: themselves, the E4M3 kernel instances, the kernel registry) and one SM70 Marlin unit.
UNITS = (
    "csrc/sm70_turbomind/ops/awq_sm70_gemm.cu",
    "csrc/sm70_turbomind/lmdeploy/src/turbomind/kernels/gemm/kernel/sm70_884_8.cu",
    "csrc/sm70_turbomind/ops/tm_registry_sm70.cu",
    "csrc/quantization/marlin/sm70_marlin_fp8_gemm.cu",
)
TOUCHED = "csrc/sm70_turbomind/lmdeploy/src/turbomind/kernels/gemm/kernel/sm70_884_8.cu"
#: Units with tensor-core kernels (the registry unit is host code only).
KERNEL_UNITS = (UNITS[0], UNITS[1], UNITS[3])


@pytest.fixture(scope="module", autouse=True)
def _opt_in(request):  # type: ignore[no-untyped-def]
    selected = "cuda" in (request.config.option.markexpr or "")
    if not selected and os.environ.get("FORKPATCH_CUDA_TEST") != "1":
        pytest.skip(
            "opt-in: downloads ~4 GB of wheels and ~1.6 GB of Debian packages and compiles "
            "CUDA for many minutes; run with FORKPATCH_CUDA_TEST=1 or -m cuda"
        )


@pytest.fixture(scope="module")
def wheel_dir() -> Path:
    dest = Path(os.environ.get("FORKPATCH_CUDA_WHEELHOUSE") or CACHE / "cuda-wheelhouse")
    lock = REPO_ROOT / "ci" / "cuda-wheels.lock"
    try:
        wheelhouse.download(lock, dest, "3.11")  # pip skips files already there
    except BuildError as exc:
        pytest.skip(f"the locked CUDA wheels cannot be had: {str(exc).splitlines()[0]}")
    return dest


@pytest.fixture(scope="module")
def cuda_standin(docker_client) -> str:  # type: ignore[no-untyped-def]
    debs = Path(os.environ.get("FORKPATCH_CUDA_DEBS") or CACHE / "cuda-debs")
    if not list(debs.glob("*.deb")):
        proc = _run(["bash", str(REPO_ROOT / "ci" / "cuda-debs.sh"), str(debs)])
        if proc.returncode != 0:
            pytest.skip(f"Debian's CUDA packages cannot be had: {_last(proc.stdout)}")
    env = {**os.environ, "FORKPATCH_STANDIN_EXTRA": "g++,make", "FORKPATCH_STANDIN_DEBS": str(debs)}
    proc = _run(["bash", str(REPO_ROOT / "ci" / "standin-image.sh"), CUDA_STANDIN], env=env)
    if proc.returncode == 3:
        pytest.skip(f"cannot build the CUDA stand-in: {_last(proc.stdout)}")
    assert proc.returncode == 0, proc.stdout[-3000:]
    return CUDA_STANDIN


@pytest.fixture(scope="module")
def fork_tree(tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    repo = realfork.FORK or str(realfork.FIXTURE_FORK)
    dest = tmp_path_factory.mktemp("fork")
    archive = subprocess.run(
        ["git", "--git-dir", realfork.git_dir(repo), "archive", FORK_TAG],
        capture_output=True,
        check=False,
    )
    if archive.returncode != 0:
        pytest.skip(f"no fork at {repo} with {FORK_TAG}: {_last(archive.stderr.decode())}")
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return dest


@pytest.fixture(scope="module")
def cutlass() -> Path:
    given = os.environ.get("FORKPATCH_CUTLASS_SRC")
    if given:
        return Path(given)
    dest = CACHE / f"cutlass-{CUTLASS_TAG}"
    if not (dest / "include" / "cutlass" / "cutlass.h").is_file():
        shutil.rmtree(dest, ignore_errors=True)
        proc = _run(
            ["git", "clone", "--depth", "1", "--branch", CUTLASS_TAG,
             "https://github.com/NVIDIA/cutlass.git", str(dest)]
        )  # fmt: skip
        if proc.returncode != 0:
            pytest.skip(f"CUTLASS {CUTLASS_TAG} cannot be had: {_last(proc.stdout)}")
    return dest


@pytest.fixture(scope="module")
def triton_kernels(tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    given = os.environ.get("FORKPATCH_TRITON_KERNELS_SRC")
    if given:
        return Path(given)
    # The fork's CMake wants a non-empty directory; what it holds is only copied at install.
    placeholder = tmp_path_factory.mktemp("triton_kernels_placeholder")
    (placeholder / "FORKPATCH-PLACEHOLDER.txt").write_text(
        "triton v3.5.1 python/triton_kernels/triton_kernels is not available offline; "
        "these Python files are copied into the wheel at install time only\n"
    )
    return placeholder


def test_fork_sm70_units_compile_and_rebuild_from_ccache(  # type: ignore[no-untyped-def]
    docker_client, wheel_dir, cuda_standin, fork_tree, cutlass, triton_kernels, tmp_path
):
    report = Path(os.environ.get("FORKPATCH_CUDA_REPORT") or tmp_path / "report")
    report.mkdir(parents=True, exist_ok=True)
    volume = os.environ.get("FORKPATCH_CUDA_CCACHE_VOLUME") or "forkpatch-cuda-ccache"
    opts = BuildOptions(
        mode="container",
        out_dir=report / "first",
        arch_list="7.0",
        base_image=cuda_standin,
        toolchain="wheels",
        python_version="3.11",
        wheelhouse=wheel_dir,
        sources={"VLLM_CUTLASS_SRC_DIR": cutlass, "TRITON_KERNELS_SRC_DIR": triton_kernels},
        cache=CacheConfig(volume=volume),
    )

    t0 = time.monotonic()
    compile_in_container(fork_tree, opts, units=UNITS, log_path=report / "first.log")
    first_s = time.monotonic() - t0
    log = (report / "first.log").read_text()
    configure = (report / "first" / "cmake-configure.log").read_text()
    # The fork's CMake: CUDA 12.x, only 7.0, SM70 TurboMind + Marlin, CUTLASS from /deps.
    assert "CUDA supported target architectures: 7.0" in configure
    assert "Building SM70 TurboMind GEMM backend for archs: 7.0" in configure
    assert "Building SM70 Marlin kernels for archs: 7.0" in configure
    assert "The VLLM_CUTLASS_SRC_DIR is set, using /deps/vllm_cutlass" in configure
    assert "torch 2.10.0+cu128 cuda 12.8" in log  # the image's torch, from the wheel lock
    timings = _timings(report / "first" / "timings.tsv")
    assert sorted(timings) == sorted(UNITS)
    for unit in UNITS:
        listing = (report / "first" / f"cuobjdump-{Path(unit).name}.txt").read_text()
        archs = set(re.findall(r"arch = (sm_\d+)", listing))
        assert archs == {"sm_70"}, (unit, archs)  # one cubin, Volta only, no PTX
        assert "code for sm_70" in listing, unit
        if unit in KERNEL_UNITS:  # Volta tensor-core SASS in the GEMM kernels
            assert re.search(r"HMMA\.884\.", listing), f"no HMMA.884 SASS in {unit}"

    # Change one unit for real (not a comment: ccache's preprocessor mode ignores those),
    # compile all of them again in a fresh container: only that one misses.
    unit_path = fork_tree / TOUCHED
    unit_path.write_text(
        unit_path.read_text()
        + f"\nnamespace {{ [[maybe_unused]] constexpr int forkpatch_touch_{uuid.uuid4().hex} = 1; }}\n"
    )
    second = dataclasses.replace(opts, out_dir=report / "second")
    t0 = time.monotonic()
    compile_in_container(fork_tree, second, units=UNITS, log_path=report / "second.log")
    second_s = time.monotonic() - t0
    hits, misses = _ccache_counts((report / "second.log").read_text())
    assert misses >= 1 and hits >= len(UNITS) - 1, (hits, misses)
    # The changed unit really compiles (nvcc CPU seconds); the others come from the volume
    # in a fraction of that (ccache's totals also count CMake's own compiler checks).
    again = _timings(report / "second" / "timings.tsv")
    cpu = {unit: row[1] + row[2] for unit, row in again.items()}
    untouched = max(cpu[u] for u in UNITS if u != TOUCHED)
    assert cpu[TOUCHED] > 5 * max(untouched, 0.2), cpu
    print(f"\nfirst pass {first_s:.0f} s, after touching {TOUCHED}: {second_s:.0f} s")
    for unit in UNITS:
        print(f"  {unit}: {timings[unit]} -> {again[unit]}  (wall, user, sys s; MiB)")


def _timings(path: Path) -> dict[str, tuple[float, float, float, float]]:
    rows = [line.split("\t") for line in path.read_text().splitlines()[1:] if line.strip()]
    return {r[0]: (float(r[1]), float(r[2]), float(r[3]), float(r[4])) for r in rows}


def _ccache_counts(log: str) -> tuple[int, int]:
    hits = re.search(r"^\s*Hits:\s+(\d+)", log, re.MULTILINE)
    misses = re.search(r"^\s*Misses:\s+(\d+)", log, re.MULTILINE)
    assert hits and misses, "no ccache statistics in the log"
    return int(hits.group(1)), int(misses.group(1))


def _run(cmd: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, check=False
    )


def _last(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"
