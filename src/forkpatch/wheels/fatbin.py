"""Which GPU architectures a compiled module carries: its ELF ``.nv_fatbin`` section, read directly.

nvcc embeds the device code of a shared object in a *fat binary* in the section
``.nv_fatbin``: one or more containers (one per linked translation unit), each a
16-byte header (magic ``0xBA55ED50``, version, header size, payload size) and
entries. An entry's header says its kind (PTX text or an ELF cubin, i.e. SASS),
its size and the architecture it was compiled for (``sm`` as 70, 75, 80 ...);
the payload may be compressed, the headers never are. No CUDA tool is needed to
read them, so the check runs on any machine.

:func:`module_archs` reads one module from any seekable binary file (a member
of a wheel opened with :mod:`zipfile` seeks without unpacking the whole file);
:func:`wheel_archs` reads every ``*.so`` of a wheel.
"""

from __future__ import annotations

import struct
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

FATBIN_SECTION = ".nv_fatbin"
FATBIN_MAGIC = 0xBA55ED50
KIND_PTX, KIND_SASS = 1, 2
_ELF_MAGIC = b"\x7fELF"
_CONTAINER = struct.Struct("<IHHQ")  # magic, version, header size, payload size
_ENTRY = struct.Struct("<HHIQ")  # kind, flags, header size, payload size
_ENTRY_ARCH_AT = 28  # the entry's architecture (u32), from the start of its header


class FatbinFormatError(ValueError):
    """The module is not an ELF file forkpatch can read, or its fat binary is damaged."""


@dataclass(frozen=True)
class ModuleArchs:
    """The device code of one compiled module: SASS and PTX architectures (as 70, 80 ...)."""

    path: str
    sass: tuple[int, ...] = ()
    ptx: tuple[int, ...] = ()
    has_fatbin: bool = False

    @property
    def is_cuda(self) -> bool:
        return self.has_fatbin and bool(self.sass or self.ptx)

    def describe(self) -> str:
        if not self.has_fatbin:
            return f"{self.path}: no CUDA code"
        sass = ", ".join(f"sm_{a}" for a in self.sass) or "none"
        ptx = ", ".join(f"compute_{a}" for a in self.ptx) or "none"
        return f"{self.path}: SASS {sass}; PTX {ptx}"


def _read_at(fh: BinaryIO, offset: int, size: int) -> bytes:
    fh.seek(offset)
    data = fh.read(size)
    if len(data) != size:
        raise FatbinFormatError(f"truncated: {size} bytes wanted at offset {offset}")
    return data


def _fatbin_section(fh: BinaryIO, file_size: int) -> tuple[int, int] | None:
    """(offset, size) of ``.nv_fatbin`` in the ELF file ``fh`` of ``file_size`` bytes,
    None when it has none. Every offset and size is checked against the file's size
    before anything is read, so a lying header cannot make it read more than the file."""
    ident = _read_at(fh, 0, 64)
    if ident[:4] != _ELF_MAGIC:
        raise FatbinFormatError("not an ELF file")
    if ident[4] != 2 or ident[5] != 1:
        raise FatbinFormatError("not a 64-bit little-endian ELF file")
    (shoff,) = struct.unpack_from("<Q", ident, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", ident, 0x3A)
    if shoff == 0 or shnum == 0:
        return None
    if shentsize != 64 or shstrndx >= shnum or shoff + 64 * shnum > file_size:
        raise FatbinFormatError("damaged section header table")
    table = _read_at(fh, shoff, shentsize * shnum)
    sections = [
        struct.unpack_from("<IIQQQQ", table, i * shentsize)  # name, type, flags, addr, off, size
        for i in range(shnum)
    ]
    _, _, _, _, str_off, str_size = sections[shstrndx]
    if str_off + str_size > file_size:
        raise FatbinFormatError("damaged section name table")
    names = _read_at(fh, str_off, str_size)
    for name_at, sh_type, _, _, offset, size in sections:
        end = names.find(b"\0", name_at)
        if names[name_at : end if end >= 0 else None] == FATBIN_SECTION.encode():
            if sh_type == 8 or size == 0:  # SHT_NOBITS: nothing in the file
                return None
            if offset + size > file_size:
                raise FatbinFormatError(f"{FATBIN_SECTION} runs past the end of the file")
            return offset, size
    return None


def parse_fatbin(data: bytes) -> Iterator[tuple[int, int]]:
    """(kind, architecture) of every entry of the fat binary containers in ``data``."""
    at = 0
    while at + _CONTAINER.size <= len(data):
        magic, _version, header_size, payload = _CONTAINER.unpack_from(data, at)
        if magic != FATBIN_MAGIC:
            if data[at : at + 8] == b"\0" * 8:  # padding between containers
                at += 8
                continue
            raise FatbinFormatError(f"no fat binary header at offset {at} of {FATBIN_SECTION}")
        start = at + header_size
        end = start + payload
        if header_size < _CONTAINER.size or end > len(data):
            raise FatbinFormatError(f"the fat binary at offset {at} runs past its section")
        entry = start
        while entry + _ENTRY_ARCH_AT + 4 <= end:
            kind, _flags, entry_header, size = _ENTRY.unpack_from(data, entry)
            if entry_header < _ENTRY_ARCH_AT + 4 or entry + entry_header + size > end:
                raise FatbinFormatError(f"damaged fat binary entry at offset {entry}")
            (arch,) = struct.unpack_from("<I", data, entry + _ENTRY_ARCH_AT)
            yield kind, arch
            entry += entry_header + size
        at = end
        at += -at % 8


def module_archs(fh: BinaryIO, path: str, size: int | None = None) -> ModuleArchs:
    """The architectures of the ELF module ``fh`` of ``size`` bytes (default: what
    seeking to its end finds), named ``path`` in the result."""
    if size is None:
        size = fh.seek(0, 2)
    where = _fatbin_section(fh, size)
    if where is None:
        return ModuleArchs(path)
    offset, size = where
    sass: set[int] = set()
    ptx: set[int] = set()
    for kind, arch in parse_fatbin(_read_at(fh, offset, size)):
        if kind == KIND_SASS:
            sass.add(arch)
        elif kind == KIND_PTX:
            ptx.add(arch)
    return ModuleArchs(path, tuple(sorted(sass)), tuple(sorted(ptx)), has_fatbin=True)


def is_compiled_module(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return base.endswith(".so") or ".so." in base


def wheel_archs(wheel: Path) -> tuple[list[ModuleArchs], list[str]]:
    """Every compiled module of ``wheel`` and what it carries; and the modules that could
    not be read (each with the reason)."""
    found: list[ModuleArchs] = []
    unreadable: list[str] = []
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            if info.is_dir() or not is_compiled_module(info.filename):
                continue
            try:
                with zf.open(info) as fh:
                    found.append(module_archs(fh, info.filename, info.file_size))  # type: ignore[arg-type]
            except (FatbinFormatError, zipfile.BadZipFile, OSError, struct.error) as exc:
                unreadable.append(f"{info.filename}: {exc}")
    return found, unreadable
