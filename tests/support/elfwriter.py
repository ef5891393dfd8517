"""Small ELF64 little-endian files written byte by byte, for the kernel-architecture
tests: sections (with their name table), program headers, fat binaries, and the
damaged or enormous variants a hostile wheel may carry. Large parts are written
sparse (a seek past the end), so a 1 GiB section costs no disk or memory."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

FATBIN_MAGIC = 0xBA55ED50
KIND_PTX, KIND_SASS = 1, 2


def entry(kind: int, arch: int, payload: bytes = b"", *, payload_size: int | None = None) -> bytes:
    """A fat binary entry header (0x48 bytes) and its payload; ``payload_size`` declares a
    size without the bytes (the caller writes them, or leaves a sparse hole)."""
    size = len(payload) if payload_size is None else payload_size
    header = bytearray(0x48)
    struct.pack_into("<HHIQ", header, 0, kind, 0x0101, 0x48, size)
    struct.pack_into("<HH", header, 24, 7, 1)
    struct.pack_into("<I", header, 28, arch)
    return bytes(header) + payload


def container(*entries: bytes, payload_size: int | None = None) -> bytes:
    body = b"".join(entries)
    size = len(body) if payload_size is None else payload_size
    return struct.pack("<IHHQ", FATBIN_MAGIC, 1, 16, size) + body


@dataclass
class Section:
    name: str
    data: bytes = b""
    sh_type: int = 1  # PROGBITS
    size: int | None = None  # declared size, when the bytes are a sparse hole


def _write_at(fh: BinaryIO, offset: int, data: bytes) -> None:
    fh.seek(offset)
    fh.write(data)


def write_elf(
    path: Path,
    sections: Sequence[Section] = (),
    *,
    strip_sections: bool = False,
    load: bool = True,
    names_size: int | None = None,
    extra_sections: int = 0,
    extended: bool = True,
) -> Path:
    """An ELF64 shared object at ``path`` holding ``sections`` (each 8-aligned) in one
    PT_LOAD segment. ``strip_sections``: no section header table (e_shoff 0), as
    ``strip --strip-section-headers`` leaves it; ``names_size`` pads the section name
    table to that many bytes of non-NUL filler; ``extra_sections`` adds that many empty
    sections, each with its own name, before the real ones. ``extended=False`` writes a
    count of 0xff00 or more straight into e_shnum (as some writers do) instead of ELF's
    extended numbering (the count in section 0)."""
    names = bytearray(b"\0")
    name_at: list[int] = []
    for i in range(extra_sections):
        name_at.append(len(names))
        names += f".x{i}".encode() + b"\0"
    for s in sections:
        name_at.append(len(names))
        names += s.name.encode() + b"\0"
    shstrtab_name = len(names)
    names += b".shstrtab\0"
    if names_size is not None and names_size > len(names):
        filler_at = len(names)
        names += b"a" * (names_size - len(names))
        # the extra sections' names point into the filler: strings with no end in sight
        for i in range(extra_sections):
            name_at[i] = filler_at + (i * 997) % (len(names) - filler_at)
    with open(path, "wb") as fh:
        offset = 64 + 56  # the ELF header, one program header
        placed = []
        for s in sections:
            offset += -offset % 8
            size = len(s.data) if s.size is None else s.size
            _write_at(fh, offset, s.data)
            placed.append((offset, size))
            offset += size
        load_end = offset
        offset += -offset % 8
        names_off = offset
        _write_at(fh, names_off, bytes(names))
        offset += len(names)
        offset += -offset % 8
        shoff = offset
        headers = [bytes(64)]
        headers += [
            struct.pack("<IIQQQQIIQQ", name_at[i], 1, 0, 0, 0, 0, 0, 0, 1, 0)
            for i in range(extra_sections)
        ]
        for i, (s, (off, size)) in enumerate(zip(sections, placed, strict=True)):
            headers.append(
                struct.pack(
                    "<IIQQQQIIQQ",
                    name_at[extra_sections + i],
                    s.sh_type,
                    2,
                    off,
                    off,
                    size,
                    0,
                    0,
                    8,
                    0,
                )
            )
        headers.append(
            struct.pack("<IIQQQQIIQQ", shstrtab_name, 3, 0, 0, names_off, len(names), 0, 0, 1, 0)
        )
        shnum = len(headers)
        if not strip_sections:
            _write_at(fh, shoff, b"".join(headers))
        end = fh.seek(0, 2)
        phdr = struct.pack("<IIQQQQQQ", 1 if load else 4, 5, 0, 0, 0, load_end, load_end, 0x1000)
        ident = bytearray(64)
        ident[:4] = b"\x7fELF"
        ident[4], ident[5], ident[6] = 2, 1, 1  # 64-bit, little-endian, version 1
        struct.pack_into("<HHI", ident, 16, 3, 62, 1)  # ET_DYN, x86-64
        struct.pack_into("<QQQ", ident, 24, 0, 64, 0 if strip_sections else shoff)
        struct.pack_into("<IHHHHHH", ident, 48, 0, 64, 56, 1, 64, 0, 0)
        if not strip_sections:
            big = extended and shnum >= 0xFF00  # extended numbering: count, index in section 0
            struct.pack_into("<HH", ident, 60, 0 if big else shnum, 0xFFFF if big else shnum - 1)
            if big:
                _write_at(fh, shoff + 32, struct.pack("<QI", shnum, shnum - 1))
        _write_at(fh, 0, bytes(ident) + phdr)
        fh.truncate(max(end, fh.seek(0, 2)))
    return path


def fatbin_elf(path: Path, *entries: bytes, **kwargs: object) -> Path:
    """A module whose .nv_fatbin holds one container of ``entries``."""
    return write_elf(path, [Section(".nv_fatbin", container(*entries))], **kwargs)  # type: ignore[arg-type]
