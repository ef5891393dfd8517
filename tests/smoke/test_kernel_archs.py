"""static.kernel-archs: the GPU architectures of a wheel's compiled modules, read from
their ELF .nv_fatbin sections, on real objects.

Objects: nvcc (CUDA 13 builds sm_75+ SASS and compute_75+ PTX) compiles a kernel into a
shared object; sm_70 SASS comes from Debian's CUDA 12.4 ptxas and fatbinary when they
are unpacked (``FORKPATCH_CUDA124``, default ``~/.cache/forkpatch/cuda12.4``, see
ci/cuda-debs.sh), and from a fat binary assembled here byte by byte (always), put into
the object's .nv_fatbin with objcopy.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from forkpatch.smoke import kernels
from forkpatch.smoke.incheck import FAILED, NOT_RUN, PASSED
from forkpatch.wheels.fatbin import FATBIN_MAGIC, FatbinFormatError, module_archs, parse_fatbin
from support.cli import Runner
from support.wheelfactory import make_wheel

KERNEL = """\
__global__ void add(float *a, float b) { a[threadIdx.x] += b; }
extern "C" void launch(float *a) { add<<<1, 32>>>(a, 1.0f); }
"""
CUDA124 = Path(os.environ.get("FORKPATCH_CUDA124") or Path.home() / ".cache/forkpatch/cuda12.4")


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed")
    return path


@pytest.fixture(scope="module")
def objects(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Real shared objects: ``sm75_80`` from nvcc, ``plain`` from gcc (no CUDA code)."""
    d = tmp_path_factory.mktemp("objects")
    (d / "k.cu").write_text(KERNEL)
    nvcc = _tool("nvcc")
    subprocess.run(
        [
            nvcc,
            "-shared",
            "-Xcompiler",
            "-fPIC",
            "-gencode",
            "arch=compute_75,code=sm_75",
            "-gencode",
            "arch=compute_80,code=[sm_80,compute_80]",
            "k.cu",
            "-o",
            "sm75_80.so",
        ],
        cwd=d,
        check=True,
        capture_output=True,
    )
    (d / "plain.c").write_text("int answer(void) { return 42; }\n")
    subprocess.run(
        [_tool("gcc"), "-shared", "-fPIC", "plain.c", "-o", "plain.so"],
        cwd=d,
        check=True,
        capture_output=True,
    )
    return {"sm75_80": d / "sm75_80.so", "plain": d / "plain.so", "dir": d}


def _entry(kind: int, arch: int, payload: bytes) -> bytes:
    payload += b"\0" * (-len(payload) % 8)
    header = bytearray(0x48)
    struct.pack_into("<HHIQ", header, 0, kind, 0x0101, 0x48, len(payload))
    struct.pack_into("<HH", header, 24, 7, 1)
    struct.pack_into("<I", header, 28, arch)
    return bytes(header) + payload


def _fatbin(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", FATBIN_MAGIC, 1, 16, len(body)) + body


def _with_fatbin(obj: Path, fatbin: bytes, dest: Path) -> Path:
    blob = dest.with_suffix(".fatbin")
    blob.write_bytes(fatbin)
    subprocess.run(
        [
            _tool("objcopy"),
            "--remove-section",
            ".nv_fatbin",
            "--add-section",
            f".nv_fatbin={blob}",
            str(obj),
            str(dest),
        ],
        check=True,
        capture_output=True,
    )
    return dest


def _read(path: Path) -> tuple[tuple[int, ...], tuple[int, ...], bool]:
    with open(path, "rb") as fh:
        got = module_archs(fh, path.name)
    return got.sass, got.ptx, got.has_fatbin


def _wheel(tmp: Path, modules: dict[str, Path]) -> Path:
    members = {"vllm/__init__.py": b""}
    members.update({name: path.read_bytes() for name, path in modules.items()})
    return make_wheel(tmp / "1cat_vllm-1.2.1-py3-none-any.whl", members)


def test_nvcc_object_lists_sass_and_ptx(objects):
    assert _read(objects["sm75_80"]) == ((75, 80), (80,), True)
    assert _read(objects["plain"]) == ((), (), False)


def test_hand_assembled_sm70_fatbin_in_a_real_object(objects, tmp_path):
    fatbin = _fatbin(_entry(2, 70, b"\x7fELF-cubin"), _entry(1, 70, b".version 8.4\n"))
    # two containers, as a module linked from two translation units has, 8-aligned
    two = fatbin + b"\0" * 8 + _fatbin(_entry(2, 86, b"x" * 13))
    obj = _with_fatbin(objects["sm75_80"], two, tmp_path / "sm70.so")
    assert _read(obj) == ((70, 86), (70,), True)


def test_cuda_12_4_sm70_object(objects, tmp_path):
    """The builder's route for sm_70 (CUDA 12.4's ptxas and fatbinary), where unpacked."""
    ptxas, fatbinary = CUDA124 / "usr/bin/ptxas", CUDA124 / "usr/bin/fatbinary"
    if not (ptxas.is_file() and fatbinary.is_file()):
        pytest.skip(f"no CUDA 12.4 ptxas/fatbinary under {CUDA124} (ci/cuda-debs.sh)")
    d = objects["dir"]
    subprocess.run(
        [_tool("nvcc"), "-arch=compute_75", "-ptx", "k.cu", "-o", "k.ptx"], cwd=d, check=True
    )
    ptx = (d / "k.ptx").read_text()
    # CUDA 12.4 reads PTX ISA 8.4; the kernel uses nothing newer than sm_70 has.
    ptx = "\n".join(
        ".version 8.4"
        if ln.startswith(".version")
        else ln.replace(".target sm_75", ".target sm_70")
        for ln in ptx.splitlines()
    )
    (tmp_path / "k70.ptx").write_text(ptx + "\n")
    subprocess.run(
        [str(ptxas), "--gpu-name", "sm_70", "k70.ptx", "-o", "k70.cubin"], cwd=tmp_path, check=True
    )
    subprocess.run(
        [
            str(fatbinary),
            "--create",
            "k70.fatbin",
            "--image3=kind=elf,sm=70,file=k70.cubin",
            "--image3=kind=ptx,sm=70,file=k70.ptx",
        ],
        cwd=tmp_path,
        check=True,
    )
    obj = _with_fatbin(
        objects["sm75_80"], (tmp_path / "k70.fatbin").read_bytes(), tmp_path / "k70.so"
    )
    assert _read(obj) == ((70,), (70,), True)
    outcome, detail = kernels.kernel_archs(_wheel(tmp_path, {"vllm/_C.abi3.so": obj}))
    assert outcome == PASSED and "SASS sm_70; PTX compute_70" in detail


def test_wheel_without_sm70_sass_fails_naming_the_module(objects, tmp_path):
    wheel = _wheel(
        tmp_path,
        {"vllm/_C.abi3.so": objects["sm75_80"], "vllm/cpu_helpers.so": objects["plain"]},
    )
    outcome, detail = kernels.kernel_archs(wheel)
    assert outcome == FAILED
    assert "1 of 1 CUDA module(s) carry no sm_70 SASS (vllm/_C.abi3.so)" in detail
    assert "vllm/_C.abi3.so: SASS sm_75, sm_80; PTX compute_80" in detail
    assert "vllm/cpu_helpers.so: no CUDA code" in detail


def test_one_module_without_sm70_among_good_ones_fails(objects, tmp_path):
    good = _with_fatbin(objects["sm75_80"], _fatbin(_entry(2, 70, b"c")), tmp_path / "good.so")
    wheel = _wheel(tmp_path, {"vllm/_C.abi3.so": good, "vllm/_moe_C.abi3.so": objects["sm75_80"]})
    outcome, detail = kernels.kernel_archs(wheel)
    assert outcome == FAILED and "(vllm/_moe_C.abi3.so)" in detail
    only_good = _wheel(tmp_path / "g", {"vllm/_C.abi3.so": good})
    assert kernels.kernel_archs(only_good)[0] == PASSED


@pytest.mark.parametrize(
    "damage",
    [
        lambda fb: fb[:20],  # cut inside an entry
        lambda fb: b"\x11" * 8 + fb,  # not a fat binary
        lambda fb: fb[:8] + struct.pack("<Q", 1 << 40) + fb[16:],  # size past the section
    ],
)
def test_damaged_fatbin_fails_and_says_so(objects, tmp_path, damage):
    fb = _fatbin(_entry(2, 70, b"cubin"))
    with pytest.raises(FatbinFormatError):
        list(parse_fatbin(damage(fb)))
    obj = _with_fatbin(objects["sm75_80"], damage(fb), tmp_path / "bad.so")
    outcome, detail = kernels.kernel_archs(_wheel(tmp_path, {"vllm/_C.abi3.so": obj}))
    assert outcome == FAILED and "could not be read" in detail and "vllm/_C.abi3.so" in detail


def test_not_an_elf_file_is_unreadable_not_skipped(tmp_path):
    fake = tmp_path / "fake.so"
    fake.write_bytes(b"MZ not an ELF file" * 10)
    outcome, detail = kernels.kernel_archs(_wheel(tmp_path, {"vllm/_C.abi3.so": fake}))
    assert outcome == FAILED and "not an ELF file" in detail


def test_python_only_or_cpu_only_wheel_is_not_applicable(objects, tmp_path):
    for n, modules in enumerate(({}, {"vllm/cpu.so": objects["plain"]})):
        wheel = _wheel(tmp_path / str(n), modules)
        outcome, detail = kernels.kernel_archs(wheel)
        assert outcome == NOT_RUN and detail.startswith("not applicable"), detail
        plan: dict[str, list[str]] = {kernels.KERNEL_ARCHS: []}
        assert kernels.KERNEL_ARCHS in kernels.host_not_applicable(plan, wheel)
        # asked for by a patch: it stays, and reports not-run
        assert not kernels.host_not_applicable({kernels.KERNEL_ARCHS: ["p"]}, wheel)


@pytest.mark.slow
def test_smoke_reports_kernel_archs(objects, tmp_path, capsys):
    """Through `forkpatch smoke`: failed for the nvcc 13 wheel, a note for a Python-only one."""
    run = Runner(tmp_path, capsys)
    cuda = _wheel(tmp_path / "cuda", {"vllm/_C.abi3.so": objects["sm75_80"]})
    _code, out, _err = run("smoke", str(cuda), "--tier", "static", "--json", expect=None)
    checks = {c["id"]: c for c in json.loads(out)["checks"]}
    assert checks[kernels.KERNEL_ARCHS]["outcome"] == FAILED
    assert "sm_75, sm_80" in checks[kernels.KERNEL_ARCHS]["detail"]
    pure = _wheel(tmp_path / "pure", {})
    _code, out, _err = run("smoke", str(pure), "--tier", "static", "--json", expect=None)
    data = json.loads(out)
    assert kernels.KERNEL_ARCHS not in {c["id"] for c in data["checks"]}
    assert any(n.startswith(f"{kernels.KERNEL_ARCHS}: not applicable") for n in data["notes"])


# --------------------------------------------------------------------------- sm70.cuda-stack


class _Torch:
    def __init__(self, version: str, cuda: str | None) -> None:
        self.__version__ = version
        self.version = type("V", (), {"cuda": cuda})


@pytest.mark.parametrize(
    ("requires", "torch", "driver", "outcome", "says"),
    [
        (["torch==2.10.0"], ("2.10.0+cu128", "12.8"), 12080, "passed", "driver supports CUDA 12.8"),
        (["torch==2.10.0"], ("2.9.1+cu128", "12.8"), 12080, "failed", "pins torch==2.10.0"),
        (["torch==2.10.0"], ("2.10.0+cu128", "12.8"), 12040, "failed", "supports CUDA 12.4"),
        (["torch==2.10.0"], ("2.10.0+cpu", None), 12080, "failed", "CPU-only build"),
        (["numpy", "torch>=2"], ("2.10.0", "12.8"), 12080, "not-run", "pins no torch"),
        (["torch == 2.10.0 ; platform_system == 'Linux'"], ("2.10.0", "12.8"), 13000, "passed", ""),
    ],
)
def test_cuda_stack_check(monkeypatch, requires, torch, driver, outcome, says):
    import importlib.metadata as md

    from forkpatch.smoke import incheck

    monkeypatch.setattr(md, "requires", lambda dist: requires)
    monkeypatch.setattr(incheck.gpu, "import_torch", lambda: _Torch(*torch))
    monkeypatch.setattr(incheck.gpu, "driver_cuda", lambda: driver)
    defn = incheck.REGISTRY["sm70.cuda-stack"]
    # the device gate is the runner's (it needs a 7.0 card); the check itself here
    got = incheck.run_one(defn, incheck.Ctx(spec={"version": "1.3.0"}, device=_SM70_DEVICE))
    assert got["outcome"] == outcome, got
    assert says in got["detail"]


_SM70_DEVICE = {
    "torch": "2.10.0",
    "cuda_available": True,
    "devices": [{"index": 0, "name": "Tesla V100", "capability": [7, 0]}],
}


@pytest.mark.parametrize(
    ("offset", "fmt", "value"),
    [
        (0x28, "<Q", 1 << 40),  # e_shoff past the end of the file
        (0x3A, "<H", 128),  # e_shentsize not an ELF64 section header's
        (0x3C, "<H", 65_000),  # e_shnum: a table larger than the file
    ],
)
def test_a_lying_elf_header_is_refused_before_reading(objects, tmp_path, offset, fmt, value):
    data = bytearray(objects["sm75_80"].read_bytes())
    struct.pack_into(fmt, data, offset, value)
    bad = tmp_path / "lying.so"
    bad.write_bytes(bytes(data))
    with open(bad, "rb") as fh, pytest.raises(FatbinFormatError, match="damaged section"):
        module_archs(fh, bad.name)
    outcome, detail = kernels.kernel_archs(_wheel(tmp_path, {"vllm/_C.abi3.so": bad}))
    assert outcome == FAILED and "could not be read" in detail
