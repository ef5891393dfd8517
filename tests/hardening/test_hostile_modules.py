"""static.kernel-archs reads every compiled module of a wheel bounded in memory and time,
and a module it cannot read is "cannot tell" (the check fails naming it), never "no CUDA
code" and never "not applicable".

Modules are ELF files written here (tests/support/elfwriter.py): an enormous fat binary
(sparse on disk; deflated in a wheel), 65,535 sections with a 64 MiB name table, damaged
and zstd-compressed wheel members, section headers stripped (found through the program
headers), and a read slower than the time bound.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from forkpatch.smoke import kernels
from forkpatch.smoke.incheck import FAILED, NOT_RUN, PASSED
from forkpatch.wheels import fatbin
from forkpatch.wheels.fatbin import Deadline, FatbinFormatError, module_archs, wheel_archs
from support.elfwriter import KIND_PTX, KIND_SASS, Section, container, entry, fatbin_elf, write_elf
from support.reliability import Row

GIB = 1 << 30


def _wheel(path: Path, modules: dict[str, Path], *, method: int = zipfile.ZIP_DEFLATED) -> Path:
    """A wheel whose modules are written through zipfile in pieces (never whole in memory)."""
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("vllm/__init__.py", "")
        for name, src in modules.items():
            info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            info.compress_type = method
            with open(src, "rb") as fh, zf.open(info, "w", force_zip64=True) as out:
                while piece := fh.read(1 << 20):
                    out.write(piece)
    return path


def _zip_write(path: Path, modules: dict[str, Path], method: int) -> Path:
    with zipfile.ZipFile(path, "w", compression=method) as zf:
        zf.writestr("vllm/__init__.py", "")
        for name, src in modules.items():
            zf.write(src, name)
    return path


def _huge(path: Path, payload: int, arch: int = 90) -> Path:
    """A module whose one SASS entry declares ``payload`` bytes (a sparse hole)."""
    head = container(entry(KIND_SASS, arch, payload_size=payload), payload_size=0x48 + payload)
    return write_elf(path, [Section(".nv_fatbin", head, size=len(head) + payload)])


def _in_child(code: str) -> dict:
    """Run ``code`` (it prints a JSON object) in a fresh interpreter; add its own peak RSS."""
    wrapped = (
        "import json, resource, sys, time\n"
        "t0 = time.monotonic()\n"
        f"{code}\n"
        "out['seconds'] = time.monotonic() - t0\n"
        # The peak of this interpreter's own memory (VmHWM starts again at exec, where
        # ru_maxrss keeps the high-water mark of the process that started it).
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')]\n"
        "out['rss_mib'] = int(hwm[0].split()[1]) / 1024 if hwm else "
        "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024\n"
        "print(json.dumps(out))\n"
    )
    got = subprocess.run(
        [sys.executable, "-c", wrapped], capture_output=True, text=True, timeout=300, check=False
    )
    assert got.returncode == 0, got.stderr
    return json.loads(got.stdout)


def test_a_1_gib_fatbin_is_read_in_bounded_memory_and_time(tmp_path):
    module = _huge(tmp_path / "huge.so", int(1.1 * GIB))
    assert module.stat().st_size > GIB
    got = _in_child(
        "from forkpatch.wheels.fatbin import module_archs\n"
        f"with open({str(module)!r}, 'rb') as fh:\n"
        "    m = module_archs(fh, 'huge.so')\n"
        "out = {'sass': m.sass}\n"
    )
    assert got["sass"] == [90]
    assert got["rss_mib"] < 150 and got["seconds"] < 20, got


def test_a_large_deflated_fatbin_in_a_wheel_is_streamed(tmp_path):
    module = _huge(tmp_path / "big.so", 256 << 20, arch=70)
    wheel = _wheel(tmp_path / "w-1-py3-none-any.whl", {"vllm/_C.abi3.so": module})
    assert wheel.stat().st_size < 16 << 20  # zeros deflate well
    got = _in_child(
        "from pathlib import Path\n"
        "from forkpatch.smoke import kernels\n"
        f"outcome, detail = kernels.kernel_archs(Path({str(wheel)!r}))\n"
        "out = {'outcome': outcome, 'detail': detail}\n"
    )
    assert got["outcome"] == PASSED and "vllm/_C.abi3.so: SASS sm_70" in got["detail"], got
    assert got["rss_mib"] < 200 and got["seconds"] < 60, got


@pytest.mark.parametrize("extended", [True, False], ids=["extended numbering", "e_shnum"])
def test_65535_sections_and_a_64_mib_name_table_read_in_seconds(tmp_path, extended):
    module = write_elf(
        tmp_path / "many.so",
        [Section(".nv_fatbin", container(entry(KIND_SASS, 70, b"c"), entry(KIND_PTX, 80, b"p")))],
        extra_sections=65_532,  # with the null section, .nv_fatbin and .shstrtab: 65,535
        names_size=64 << 20,
        extended=extended,
    )
    t0 = time.monotonic()
    with open(module, "rb") as fh:
        got = module_archs(fh, "many.so")
    assert time.monotonic() - t0 < 10
    assert (got.sass, got.ptx) == ((70,), (80,))
    # and inside a wheel (deflated: moving back means inflating again)
    wheel = _zip_write(tmp_path / "m-1-py3-none-any.whl", {"m.so": module}, zipfile.ZIP_DEFLATED)
    t0 = time.monotonic()
    modules, unreadable = wheel_archs(wheel)
    assert time.monotonic() - t0 < 20 and unreadable == []
    assert modules[0].sass == (70,)


def test_a_name_shared_as_a_suffix_is_found(tmp_path):
    """Linkers share a name's tail: ".rela.nv_fatbin" and ".nv_fatbin" may be one string."""
    module = write_elf(tmp_path / "s.so", [Section(".nv_fatbin", container(entry(2, 75, b"x")))])
    with open(module, "rb") as fh:
        assert module_archs(fh, "s.so").sass == (75,)


def _damage_deflate(wheel: Path, member: str) -> None:
    with zipfile.ZipFile(wheel) as zf:
        info = zf.getinfo(member)
    data = bytearray(wheel.read_bytes())
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    for i in range(start + 40, start + 60):
        data[i] ^= 0xFF
    wheel.write_bytes(bytes(data))


def _set_method(wheel: Path, member: str, method: int) -> None:
    """Mark ``member`` as compressed with ``method`` in both of the zip's headers."""
    with zipfile.ZipFile(wheel) as zf:
        info = zf.getinfo(member)
    data = bytearray(wheel.read_bytes())
    data[info.header_offset + 8 : info.header_offset + 10] = method.to_bytes(2, "little")
    name = member.encode()
    central = data.find(b"PK\x01\x02")
    while central >= 0 and data[central + 46 : central + 46 + len(name)] != name:
        central = data.find(b"PK\x01\x02", central + 4)
    assert central >= 0
    data[central + 10 : central + 12] = method.to_bytes(2, "little")
    wheel.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (lambda w: _damage_deflate(w, "vllm/_C.abi3.so"), "vllm/_C.abi3.so: cannot tell"),
        (lambda w: _set_method(w, "vllm/_C.abi3.so", 93), "zstd"),
        (lambda w: _set_method(w, "vllm/_C.abi3.so", 99), "vllm/_C.abi3.so: cannot tell"),
    ],
    ids=["damaged deflate", "zstd", "AES"],
)
def test_an_unreadable_member_is_cannot_tell_never_not_applicable(tmp_path, damage, says):
    module = fatbin_elf(tmp_path / "m.so", entry(KIND_SASS, 70, b"c" * 4096))
    wheel = _zip_write(
        tmp_path / "x-1-py3-none-any.whl", {"vllm/_C.abi3.so": module}, zipfile.ZIP_DEFLATED
    )
    damage(wheel)
    outcome, detail = kernels.kernel_archs(wheel)
    assert outcome == FAILED, detail
    first = detail.splitlines()[0]  # the line the terminal report prints
    assert says in first and "could not be read" in first, detail
    assert "Traceback" not in detail
    assert kernels.host_not_applicable({kernels.KERNEL_ARCHS: []}, wheel) == {}


@pytest.mark.parametrize(
    ("entries", "outcome", "says"),
    [
        (
            [entry(KIND_SASS, 90, b"cubin")],
            FAILED,
            "SASS sm_90; PTX none (section headers stripped",
        ),
        (
            [entry(KIND_SASS, 70, b"c"), entry(KIND_PTX, 70, b"p")],
            PASSED,
            "SASS sm_70; PTX compute_70",
        ),
    ],
)
def test_stripped_section_headers_are_read_through_the_program_headers(
    tmp_path, entries, outcome, says
):
    module = fatbin_elf(tmp_path / "s.so", *entries, strip_sections=True)
    wheel = _zip_write(tmp_path / "s-1-py3-none-any.whl", {"vllm/_C.abi3.so": module}, 8)
    got, detail = kernels.kernel_archs(wheel)
    assert got == outcome and says in detail.splitlines()[0], detail
    assert kernels.host_not_applicable({kernels.KERNEL_ARCHS: []}, wheel) == {}


def test_stripped_without_a_loadable_segment_is_cannot_tell(tmp_path):
    module = fatbin_elf(tmp_path / "s.so", entry(2, 90, b"c"), strip_sections=True, load=False)
    with open(module, "rb") as fh, pytest.raises(FatbinFormatError, match="stripped"):
        module_archs(fh, "s.so")
    wheel = _zip_write(tmp_path / "s-1-py3-none-any.whl", {"vllm/_C.abi3.so": module}, 8)
    outcome, detail = kernels.kernel_archs(wheel)
    assert outcome == FAILED and "cannot tell" in detail and outcome != NOT_RUN


def test_a_stripped_module_without_device_code_says_how_it_was_read(tmp_path):
    module = write_elf(tmp_path / "p.so", [Section(".text", b"\x90" * 64)], strip_sections=True)
    with open(module, "rb") as fh:
        got = module_archs(fh, "p.so")
    assert not got.is_cuda and "section headers stripped" in got.describe()


class _SlowFile:
    """A file whose every read waits: a slow disk or a network mount."""

    def __init__(self, path: Path) -> None:
        self.fh = open(path, "rb")  # noqa: SIM115 (closed by the test)

    def read(self, n: int = -1) -> bytes:
        time.sleep(0.05)
        return self.fh.read(n)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.fh.seek(offset, whence)


def test_a_read_past_the_time_bound_stops(tmp_path, monkeypatch):
    entries = [entry(KIND_SASS, 70 + i, b"x") for i in range(200)]
    module = fatbin_elf(tmp_path / "slow.so", *entries)
    slow = _SlowFile(module)
    t0 = time.monotonic()
    with pytest.raises(FatbinFormatError, match=r"took more than 0\.5 s"):
        module_archs(slow, "slow.so", deadline=Deadline.after(0.5))  # type: ignore[arg-type]
    slow.fh.close()
    assert time.monotonic() - t0 < 3
    # a wheel's modules share one bound: what is left over is named, not dropped
    monkeypatch.setattr(fatbin, "CHUNK", 1 << 12)
    big = _huge(tmp_path / "big.so", 64 << 20)
    wheel = _wheel(tmp_path / "b-1-py3-none-any.whl", {"vllm/a.so": big, "vllm/b.so": big})
    modules, unreadable = wheel_archs(wheel, seconds=0.2)
    assert any("took more than 0.2 s" in u for u in unreadable), (modules, unreadable)


RELIABILITY = [
    Row(
        "hostile wheels",
        "ELF modules for static.kernel-archs: a 1.1 GiB fat binary (a file; 256 MiB "
        "deflated in a wheel), 65,535 sections with a 64 MiB name table (extended "
        "numbering and a plain e_shnum), a name shared as a suffix, a read slower than the "
        "time bound",
        "6 cases",
        "headers read, payloads skipped: under 150 MiB and 20 s for 1.1 GiB; the time bound "
        "names what it stopped",
    ),
    Row(
        "hostile wheels",
        "modules that cannot be read or are read another way: damaged deflate, zstd, AES, "
        "section headers stripped (sm_90 only, sm_70; none; no loadable segment)",
        "3 + 2 + 2",
        "cannot tell, naming the module and why: the check fails, never not applicable; "
        "stripped modules read through their program headers",
        refused="4",
    ),
]
