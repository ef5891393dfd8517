"""The gpu-jit tier's build and loader, on the CPU: the fork's SM70 TurboMind units read
from its CMakeLists.txt at the series' base, the compiler refused unless CUDA 12, the
build's commands and cache (with a stand-in nvcc that records what it is asked), and
the library loader's errors. The checks themselves need a GPU of capability 7.0 or
newer and the built library (FORKPATCH_PTX_LIB): they skip here, saying so.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from forkpatch.errors import BuildError
from forkpatch.smoke import incheck, ptxbuild
from support import realfork

BASE = "v1.2.1"
BASE_COMMIT = "4e9fdbc807178baa3bc98a1a59af7af7d3b63131"


def _fork() -> Path:
    if not realfork.FIXTURE_FORK.is_dir():
        pytest.skip(f"the fork fixture {realfork.FIXTURE_FORK} is absent")
    return realfork.FIXTURE_FORK


def _cmake(fork: Path) -> str:
    return subprocess.run(
        ["git", "--git-dir", str(fork), "show", f"{BASE}:CMakeLists.txt"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def test_the_sources_are_the_forks_sm70_turbomind_list_at_the_base_less_the_torch_glue():
    fork = _fork()
    sources = ptxbuild.turbomind_sources(_cmake(fork), f"{BASE}:CMakeLists.txt")
    assert len(sources) == 24
    assert ptxbuild.TORCH_GLUE not in sources
    assert "csrc/sm70_turbomind/ops/tm_registry_sm70.cu" in sources
    assert (
        sum(s.endswith(("sm70_884_4.cu", "sm70_884_8.cu", "sm70_884_16.cu")) for s in sources) == 3
    )
    tree = subprocess.run(
        ["git", "--git-dir", str(fork), "ls-tree", "-r", "--name-only", BASE, "csrc"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert set(sources) <= set(tree)


@pytest.mark.parametrize(
    ("cmake", "message"),
    [
        ('set(OTHER "a.cu")\n', "CMakeLists.txt: no set(VLLM_SM70_TURBOMIND_SRCS ...)"),
        (
            (
                'set(R "${CMAKE_CURRENT_LIST_DIR}/csrc/sm70_turbomind")\n\n'
                'set(VLLM_SM70_TURBOMIND_SRCS\n  "${R}/a.cu"\n  "${NOT_SET}/b.cu")\n'
            ),
            "CMakeLists.txt:3: VLLM_SM70_TURBOMIND_SRCS names ${NOT_SET}",
        ),
        (
            'set(VLLM_SM70_TURBOMIND_SRCS "csrc/other/a.cu")\n',
            "lists 'csrc/other/a.cu' ('csrc/other/a.cu'), outside csrc/sm70_turbomind/",
        ),
        (
            'set(VLLM_SM70_TURBOMIND_SRCS "csrc/sm70_turbomind/../../etc/x.cu")\n',
            "outside csrc/sm70_turbomind/",
        ),
        (
            'set(VLLM_SM70_TURBOMIND_SRCS "csrc/sm70_turbomind/ops/awq_sm70_gemm.cu")\n',
            "lists no source besides the op glue",
        ),
    ],
    ids=["no-list", "unknown-variable", "outside", "dot-dot", "glue-only"],
)
def test_a_sources_list_forkpatch_cannot_read_is_refused_by_file_and_line(cmake, message):
    with pytest.raises(BuildError) as exc:
        ptxbuild.turbomind_sources(cmake)
    assert message in exc.value.message


@pytest.mark.parametrize(
    ("text", "ident", "message"),
    [
        ("Cuda compilation tools, release 12.4, V12.4.131\n", "nvcc12.4.131", None),
        ("Cuda compilation tools, release 12.8, V12.8.93\n", "nvcc12.8.93", None),
        ("Cuda compilation tools, release 13.0, V13.0.88\n", None, "needs a CUDA 12.x compiler"),
        ("Cuda compilation tools, release 11.8, V11.8.89\n", None, "needs a CUDA 12.x compiler"),
        ("clang version 18\n", None, "cannot read a CUDA release"),
    ],
)
def test_only_a_cuda_12_compiler_is_taken(text, ident, message):
    if message is None:
        assert ptxbuild.compiler_of(Path("nvcc"), text).ident == ident
    else:
        with pytest.raises(BuildError, match=message):
            ptxbuild.compiler_of(Path("nvcc"), text)


def test_the_cache_is_keyed_by_fork_commit_compiler_and_interface():
    c12 = ptxbuild.Compiler(Path("nvcc"), "12.4.131")
    c128 = ptxbuild.Compiler(Path("nvcc"), "12.8.93")
    key = ptxbuild.cache_key(BASE_COMMIT, c12, b"capi")
    assert key.startswith("4e9fdbc80717-nvcc12.4.131-")
    assert len({key, ptxbuild.cache_key("0" * 40, c12, b"capi")}) == 2
    assert len({key, ptxbuild.cache_key(BASE_COMMIT, c128, b"capi")}) == 2
    assert len({key, ptxbuild.cache_key(BASE_COMMIT, c12, b"capi2")}) == 2
    # the fork's objects do not depend on forkpatch's interface
    assert ptxbuild.objects_key(BASE_COMMIT, c12) != ptxbuild.objects_key(BASE_COMMIT, c128)


# A stand-in nvcc: reports CUDA $FAKE_CUDA, logs each call, writes the -o file.
FAKE_NVCC = """#!/bin/sh
if [ "$1" = --version ]; then echo "Cuda compilation tools, release $FAKE_CUDA, V$FAKE_CUDA.1"; exit 0; fi
echo "$*" >> "$FAKE_LOG"
while [ $# -gt 0 ]; do [ "$1" = -o ] && echo obj > "$2"; shift; done
"""


@pytest.fixture
def fake_nvcc(tmp_path, monkeypatch):
    nvcc = tmp_path / "nvcc"
    nvcc.write_text(FAKE_NVCC)
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "nvcc.log"
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.setenv("FAKE_CUDA", "12.4")
    return nvcc, log


def _calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_the_build_compiles_each_unit_to_compute_70_ptx_links_and_caches(fake_nvcc, tmp_path):
    fork = _fork()
    nvcc, log = fake_nvcc
    cache = tmp_path / "cache"
    lib = ptxbuild.build_library(fork, BASE, nvcc, cache=cache, jobs=2)
    calls = _calls(log)
    compiles = [c for c in calls if " -c " in c]
    links = [c for c in calls if " -c " not in c]
    assert len(compiles) == 25  # the fork's 24 units and forkpatch's C interface
    assert all("-gencode arch=compute_70,code=compute_70" in c for c in calls)
    assert not any("sm_" in c for c in calls), "machine code asked for"
    assert len(links) == 1 and "-cudart static" in links[0]
    assert "-Xlinker=--wrap=cudaGetDeviceProperties_v2" in links[0]
    manifest = json.loads((lib.parent / "manifest.json").read_text())
    assert manifest["fork_commit"] == BASE_COMMIT and manifest["compiler"] == "nvcc12.4.1"
    assert len(manifest["sources"]) == 24
    # Cached: nothing runs again but `nvcc --version`.
    assert ptxbuild.build_library(fork, BASE, nvcc, cache=cache) == lib
    assert _calls(log) == calls


def test_a_new_interface_recompiles_it_alone_and_relinks(fake_nvcc, tmp_path, monkeypatch):
    fork = _fork()
    nvcc, log = fake_nvcc
    cache = tmp_path / "cache"
    first = ptxbuild.build_library(fork, BASE, nvcc, cache=cache)
    before = len(_calls(log))
    capi = tmp_path / "fp8_capi.cu"
    capi.write_bytes(ptxbuild.capi_source() + b"\n// changed\n")
    monkeypatch.setattr(ptxbuild, "CAPI_PATH", capi)
    second = ptxbuild.build_library(fork, BASE, nvcc, cache=cache)
    assert second != first and first.is_file()
    again = _calls(log)[before:]
    assert len(again) == 2 and "fp8_capi.cu" in again[0] and " -c " not in again[1]


def test_a_cuda_13_compiler_or_an_unknown_commit_is_refused_before_compiling(
    fake_nvcc, tmp_path, monkeypatch
):
    fork = _fork()
    nvcc, log = fake_nvcc
    monkeypatch.setenv("FAKE_CUDA", "13.0")
    with pytest.raises(BuildError, match=r"needs a CUDA 12\.x compiler"):
        ptxbuild.build_library(fork, BASE, nvcc, cache=tmp_path / "c")
    with pytest.raises(BuildError, match=r"no commit 'v0\.0\.0-none'"):
        ptxbuild.build_library(fork, "v0.0.0-none", nvcc, cache=tmp_path / "c")
    assert _calls(log) == []


def test_the_ci_script_resolves_the_sources_without_a_compiler():
    fork = _fork()
    script = Path(__file__).resolve().parents[2] / "ci" / "sm70-ptx-lib.sh"
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(ptxbuild.__file__).resolve().parents[2]),
        "PYTHON": sys.executable,
    }
    out = subprocess.run(
        ["bash", str(script), "--list-sources", "--fork-repo", str(fork)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.split()) == 24


# --------------------------------------------------------------------------- the loader


def _manifest(directory: Path, lib: Path | None = None, **extra: object) -> None:
    """The build's manifest beside ``lib``, with its sha256 (of ``lib``'s bytes)."""
    lib = lib or directory / "lib.so"
    sha = hashlib.sha256(lib.read_bytes()).hexdigest() if lib.is_file() else "0" * 64
    text = json.dumps({"fork_commit": BASE_COMMIT, "sha256": sha, **extra})
    (directory / "manifest.json").write_text(text)


def test_the_loader_names_a_missing_library_and_the_way_to_build_one(tmp_path):
    with pytest.raises(incheck.PtxLibraryError) as exc:
        incheck.load_ptx_library(str(tmp_path / "lib.so"))
    assert "no such file" in str(exc.value) and "ci/sm70-ptx-lib.sh" in str(exc.value)


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        (None, "no manifest.json beside it"),
        ("{not json", "is not JSON"),
        ("[]", "has no fork_commit"),
        (json.dumps({"fork_commit": BASE_COMMIT}), "has no sha256 of the library"),
        (json.dumps({"fork_commit": BASE_COMMIT, "sha256": "xyz"}), "has no sha256"),
    ],
)
def test_the_loader_wants_the_builds_manifest(tmp_path, manifest, message):
    lib = tmp_path / "lib.so"
    lib.write_bytes(b"\x7fELF")
    if manifest is not None:
        (tmp_path / "manifest.json").write_text(manifest)
    with pytest.raises(incheck.PtxLibraryError, match=message):
        incheck.load_ptx_library(str(lib))


def test_the_loader_names_a_file_that_does_not_load(tmp_path):
    lib = tmp_path / "lib.so"
    lib.write_bytes(b"not a shared library")
    _manifest(tmp_path, lib)
    with pytest.raises(incheck.PtxLibraryError) as exc:
        incheck.load_ptx_library(str(lib))
    assert f"PTX library {lib} does not load" in str(exc.value)


def test_the_loader_refuses_a_library_without_forkpatchs_interface(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build a foreign shared library")
    src = tmp_path / "other.c"
    src.write_text("int fpsm70_prepare(void) { return 0; }\n")
    lib = tmp_path / "libother.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    _manifest(tmp_path, lib)
    with pytest.raises(incheck.PtxLibraryError) as exc:
        incheck.load_ptx_library(str(lib))
    assert "is not forkpatch's SM70 FP8 library: it has no fpsm70_gemm" in str(exc.value)


def _constructor_library(tmp_path: Path, marker: Path) -> Path:
    """A shared library whose constructor writes ``marker`` when it is loaded."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build a shared library")
    src = tmp_path / "ctor.c"
    src.write_text(
        "#include <stdio.h>\n"
        "__attribute__((constructor)) static void ran(void) {\n"
        f'  FILE* f = fopen("{marker}", "w"); if (f) {{ fputs("ran", f); fclose(f); }}\n'
        "}\nint fpsm70_prepare(void) { return 0; }\n"
    )
    lib = tmp_path / "libctor.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return lib


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda lib: lib.write_bytes(lib.read_bytes() + b"\0"), id="appended"),
        pytest.param(lambda lib: lib.write_bytes(lib.read_bytes()[:-1] + b"\1"), id="last-byte"),
        pytest.param(lambda lib: None, id="other-sha-in-manifest"),
    ],
)
def test_a_library_that_is_not_its_manifests_is_never_loaded(tmp_path, change):
    """The bytes are checked against the manifest's sha256 before dlopen: a library
    changed after its build (or a manifest of another build) is refused and its
    constructor never runs."""
    marker = tmp_path / "constructor-ran"
    lib = _constructor_library(tmp_path, marker)
    _manifest(tmp_path, lib)
    change(lib)
    data = json.loads((tmp_path / "manifest.json").read_text())
    if hashlib.sha256(lib.read_bytes()).hexdigest() == data["sha256"]:  # the manifest's turn
        data["sha256"] = hashlib.sha256(b"another build").hexdigest()
        (tmp_path / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(incheck.PtxLibraryError, match="not the library that manifest describes"):
        incheck.load_ptx_library(str(lib))
    assert not marker.exists(), "the library's constructor ran before its bytes were checked"


def test_the_library_its_manifest_describes_is_loaded_from_the_checked_bytes(tmp_path):
    """With the right sha256 the library loads (its constructor runs), from a private
    copy of the checked bytes: a change to the file afterwards reaches nothing."""
    marker = tmp_path / "constructor-ran"
    lib = _constructor_library(tmp_path, marker)
    _manifest(tmp_path, lib)
    with pytest.raises(incheck.PtxLibraryError, match="it has no fpsm70_gemm"):
        incheck.load_ptx_library(str(lib))
    assert marker.read_text() == "ran"


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


@pytest.mark.parametrize(
    ("make", "message"),
    [
        pytest.param(_fifo, "is not a regular file", id="fifo"),
        pytest.param(lambda p: p.symlink_to("/dev/zero"), "is not a regular file", id="dev-zero"),
        pytest.param(lambda p: p.symlink_to("/dev/null"), "is not a regular file", id="dev-null"),
        pytest.param(
            lambda p: p.write_bytes(b" " * (incheck.ptxlib.MANIFEST_MAX_BYTES + 1)),
            "over the",
            id="too-large",
        ),
        pytest.param(lambda p: p.mkdir(), "is not a regular file", id="directory"),
        pytest.param(lambda p: p.symlink_to(p.parent / "gone"), "cannot open it", id="dangling"),
    ],
)
def test_the_manifest_is_read_as_a_bounded_regular_file(tmp_path, make, message):
    """A FIFO manifest does not block the loader, a link to a device is not read, a
    huge one is not read whole: each is refused, naming the file."""
    lib = tmp_path / "lib.so"
    lib.write_bytes(b"\x7fELF")
    make(tmp_path / "manifest.json")
    start = time.monotonic()
    with pytest.raises(incheck.PtxLibraryError, match=message) as exc:
        incheck.load_ptx_library(str(lib))
    assert time.monotonic() - start < 5
    assert "manifest.json" in str(exc.value)


def test_a_library_that_is_no_regular_file_is_refused(tmp_path):
    (tmp_path / "lib.so").symlink_to("/dev/zero")
    _manifest(tmp_path)
    with pytest.raises(incheck.PtxLibraryError, match=r"no such file|not a regular file"):
        incheck.load_ptx_library(str(tmp_path / "lib.so"))


def test_the_ptx_ops_stand_aside_for_a_build_with_its_own_sm70_ops(tmp_path):
    torch = pytest.importorskip("torch")
    if hasattr(torch.ops._C, "fp8_sm70_prepare"):
        pytest.skip("a compiled _C library with the SM70 ops is loaded in this process")
    own = torch.library.Library("_C", "FRAGMENT")
    own.define(
        "fp8_sm70_prepare(Tensor _kernel, Tensor _scaling_factors, int group_size, bool interleave_gated_silu) -> Tensor[]"
    )
    try:
        with pytest.raises(incheck.NotRun, match="own _C defines fp8_sm70_prepare"):
            incheck.PtxSm70Ops(str(tmp_path / "lib.so")).install()
    finally:
        own._destroy()


def test_the_ptx_ops_replace_the_static_tiers_cpu_stand_ins(tmp_path):
    torch = pytest.importorskip("torch")
    if hasattr(torch.ops._C, "fp8_sm70_prepare"):
        pytest.skip("a compiled _C library with the SM70 ops is loaded in this process")
    stand_ins = incheck.reference_ops()
    stand_ins.install()
    assert hasattr(torch.ops._C, "fp8_sm70_prepare")
    with pytest.raises(incheck.PtxLibraryError, match="no such file"):
        incheck.PtxSm70Ops(str(tmp_path / "lib.so")).install()
    assert not hasattr(torch.ops._C, "fp8_sm70_prepare"), "the CPU stand-ins are still there"


# --------------------------------------------------------------------------- on a GPU


def _gpu_and_library() -> str:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("gpu-jit needs an NVIDIA GPU of capability 7.0 or newer: no CUDA device")
    lib = os.environ.get("FORKPATCH_PTX_LIB")
    if not lib:
        pytest.skip("gpu-jit needs the PTX library: set FORKPATCH_PTX_LIB (ci/sm70-ptx-lib.sh)")
    return lib


@pytest.mark.parametrize(
    "check_id", ["gpu-jit.library", "gpu-jit.kernel-matrix", "gpu-jit.refusals"]
)
def test_the_kernel_checks_pass_on_a_gpu(monkeypatch, check_id):
    lib = _gpu_and_library()
    monkeypatch.setitem(incheck.run_spec(), "ptx_lib", lib)
    device = incheck.probe_device()
    result = incheck.run_one(
        incheck.REGISTRY[check_id], incheck.Ctx(spec={"version": "1"}, device=device)
    )
    assert result["outcome"] == "passed", result["detail"]
