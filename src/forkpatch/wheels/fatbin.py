"""Which GPU architectures a compiled module carries: its ELF ``.nv_fatbin`` section, read directly.

nvcc embeds the device code of a shared object in a *fat binary* in the section
``.nv_fatbin``: one or more containers (one per linked translation unit), each a
16-byte header (magic ``0xBA55ED50``, version, header size, payload size) and
entries. An entry's header says its kind (PTX text or an ELF cubin, i.e. SASS),
its size and the architecture it was compiled for (``sm`` as 70, 75, 80 ...);
the payload may be compressed, the headers never are. No CUDA tool is needed to
read them, so the check runs on any machine.

Reading is bounded in memory and time whatever the module says about itself:

- only headers are read; payloads, however large, are skipped (seeked over in a
  file, read and dropped in pieces of :data:`CHUNK` in a compressed wheel member);
- the section name table is scanned in pieces for the one name wanted, never
  held whole nor searched once per section;
- every offset and size is checked against the file before it is used, and a
  :class:`Deadline` (:data:`MODULE_S` a module) stops a read that takes too long;
- a module whose section headers are stripped is read through its program
  headers: its loadable segments are scanned for a fat binary's header.

:func:`module_archs` reads one module from any seekable binary file (a member
of a wheel opened with :mod:`zipfile` seeks without unpacking the whole file);
:func:`wheel_archs` reads every ``*.so`` of a wheel. A module that cannot be read
(damaged, a compression the interpreter lacks, out of time) is named with the
reason: "cannot tell", never "no CUDA code".
"""

from __future__ import annotations

import io
import struct
import time
import zipfile
import zlib
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
_SECTION = struct.Struct("<IIQQQQIIQQ")  # an ELF64 section header (64 bytes)
_SEGMENT = struct.Struct("<IIQQQQQQ")  # an ELF64 program header (56 bytes)
_PT_LOAD, _SHT_NOBITS, _SHN_XINDEX = 1, 8, 0xFFFF
CHUNK = 1 << 20
MODULE_S = 60.0  # one module's read, at most
WHEEL_S = 300.0  # every module of one wheel together
MAX_ENTRIES = 1 << 16  # entries in one module's fat binaries


class FatbinFormatError(ValueError):
    """The module is not an ELF file forkpatch can read, or its fat binary is damaged."""


@dataclass(frozen=True)
class ModuleArchs:
    """The device code of one compiled module: SASS and PTX architectures (as 70, 80 ...)."""

    path: str
    sass: tuple[int, ...] = ()
    ptx: tuple[int, ...] = ()
    has_fatbin: bool = False
    how: str = ""  # how it was found, when not the usual way ("section headers stripped")

    @property
    def is_cuda(self) -> bool:
        return self.has_fatbin and bool(self.sass or self.ptx)

    def describe(self) -> str:
        how = f" ({self.how})" if self.how else ""
        if not self.has_fatbin:
            return f"{self.path}: no CUDA code{how}"
        sass = ", ".join(f"sm_{a}" for a in self.sass) or "none"
        ptx = ", ".join(f"compute_{a}" for a in self.ptx) or "none"
        return f"{self.path}: SASS {sass}; PTX {ptx}{how}"


@dataclass(frozen=True)
class Deadline:
    at: float
    seconds: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.monotonic() + seconds, seconds)

    def check(self) -> None:
        if time.monotonic() > self.at:
            raise FatbinFormatError(f"reading it took more than {self.seconds:g} s")

    def sooner(self, other: Deadline | None) -> Deadline:
        return self if other is None or self.at <= other.at else other


class _Reader:
    """Reads at offsets of a file of known size, every read checked against it. ``cheap``:
    seeking costs nothing (a file); otherwise (a compressed zip member) moving forward
    reads and drops pieces, and going back starts again from the beginning."""

    def __init__(self, fh: BinaryIO, size: int, deadline: Deadline, *, cheap: bool) -> None:
        self.fh, self.size, self.deadline, self.cheap = fh, size, deadline, cheap
        self.pos = 0
        fh.seek(0)

    def _move(self, offset: int) -> None:
        if self.cheap:
            self.fh.seek(offset)
            self.pos = offset
            return
        if offset < self.pos:
            self.fh.seek(0)
            self.pos = 0
        while self.pos < offset:
            self.deadline.check()
            got = len(self.fh.read(min(CHUNK, offset - self.pos)))
            if got == 0:
                raise FatbinFormatError(f"truncated before offset {offset}")
            self.pos += got

    def read_at(self, offset: int, size: int) -> bytes:
        if offset < 0 or size < 0 or offset + size > self.size:
            raise FatbinFormatError(f"truncated: {size} bytes wanted at offset {offset}")
        self.deadline.check()
        self._move(offset)
        data = self.fh.read(size)
        self.pos += len(data)
        if len(data) != size:
            raise FatbinFormatError(f"truncated: {size} bytes wanted at offset {offset}")
        return data

    def pieces(self, offset: int, size: int) -> Iterator[tuple[int, bytes]]:
        """(offset, bytes) of ``size`` bytes from ``offset``, :data:`CHUNK` at a time."""
        end = offset + size
        while offset < end:
            piece = self.read_at(offset, min(CHUNK, end - offset))
            yield offset, piece
            offset += len(piece)


def _sections(r: _Reader, ident: bytes) -> list[tuple[int, ...]] | None:
    """The section headers (None when the module has none: stripped)."""
    (shoff,) = struct.unpack_from("<Q", ident, 0x28)
    shentsize, shnum, _ = struct.unpack_from("<HHH", ident, 0x3A)
    if shoff == 0:
        return None
    if shentsize != _SECTION.size or shoff + _SECTION.size > r.size:
        raise FatbinFormatError("damaged section header table")
    if shnum == 0:  # more than 0xff00 sections: the count is in section 0's sh_size
        shnum = _SECTION.unpack(r.read_at(shoff, _SECTION.size))[5]
        if shnum == 0:
            return None
    if shoff + _SECTION.size * shnum > r.size:
        raise FatbinFormatError("damaged section header table")
    table = r.read_at(shoff, _SECTION.size * shnum)
    return [_SECTION.unpack_from(table, i * _SECTION.size) for i in range(shnum)]


def _name_offsets(r: _Reader, offset: int, size: int, name: bytes) -> set[int]:
    """Every offset in the name table where ``name`` (NUL-ended) starts, scanned in
    pieces: a table of any size costs one pass and :data:`CHUNK` of memory."""
    wanted = name + b"\0"
    found: set[int] = set()
    carry = b""
    for at, piece in r.pieces(offset, size):
        buf = carry + piece
        base = at - len(carry)
        i = buf.find(wanted)
        while i >= 0:
            found.add(base + i - offset)
            i = buf.find(wanted, i + 1)
        carry = buf[-(len(wanted) - 1) :]
    return found


def _fatbin_section(r: _Reader, ident: bytes) -> tuple[int, int] | str | None:
    """(offset, size) of ``.nv_fatbin``; None when the module has none; "stripped" when
    it has no section headers."""
    sections = _sections(r, ident)
    if sections is None:
        return "stripped"
    (shstrndx,) = struct.unpack_from("<H", ident, 0x3E)
    if shstrndx == _SHN_XINDEX:
        shstrndx = sections[0][6]  # sh_link of section 0
    if shstrndx >= len(sections):
        raise FatbinFormatError("damaged section header table")
    _, _, _, _, str_off, str_size, *_ = sections[shstrndx]
    if str_off + str_size > r.size:
        raise FatbinFormatError("damaged section name table")
    starts = _name_offsets(r, str_off, str_size, FATBIN_SECTION.encode())
    for name_at, sh_type, _, _, offset, size, *_ in sections:
        if name_at in starts:
            if sh_type == _SHT_NOBITS or size == 0:  # nothing in the file
                return None
            if offset + size > r.size:
                raise FatbinFormatError(f"{FATBIN_SECTION} runs past the end of the file")
            return offset, size
    return None


def _entries(r: _Reader, offset: int, size: int) -> Iterator[tuple[int, int]]:
    """(kind, architecture) of every entry of the containers in ``size`` bytes at
    ``offset``: headers read, payloads skipped."""
    at, end_all, count = offset, offset + size, 0
    while at + _CONTAINER.size <= end_all:
        head = r.read_at(at, _CONTAINER.size)
        magic, _version, header_size, payload = _CONTAINER.unpack(head)
        if magic != FATBIN_MAGIC:
            if head[:8] == b"\0" * 8:  # padding between containers
                at += 8
                continue
            raise FatbinFormatError(
                f"no fat binary header at offset {at - offset} of {FATBIN_SECTION}"
            )
        start = at + header_size
        end = start + payload
        if header_size < _CONTAINER.size or end > end_all:
            raise FatbinFormatError(f"the fat binary at offset {at - offset} runs past its section")
        entry = start
        while entry + _ENTRY_ARCH_AT + 4 <= end:
            head = r.read_at(entry, _ENTRY_ARCH_AT + 4)
            kind, _flags, entry_header, entry_size = _ENTRY.unpack_from(head)
            if entry_header < _ENTRY_ARCH_AT + 4 or entry + entry_header + entry_size > end:
                raise FatbinFormatError(f"damaged fat binary entry at offset {entry - offset}")
            count += 1
            if count > MAX_ENTRIES:
                raise FatbinFormatError(f"more than {MAX_ENTRIES} fat binary entries")
            (arch,) = struct.unpack_from("<I", head, _ENTRY_ARCH_AT)
            yield kind, arch
            entry += entry_header + entry_size
        at = end
        at += -(at - offset) % 8


def parse_fatbin(data: bytes) -> Iterator[tuple[int, int]]:
    """(kind, architecture) of every entry of the fat binary containers in ``data``."""
    r = _Reader(io.BytesIO(data), len(data), Deadline.after(MODULE_S), cheap=True)
    yield from _entries(r, 0, len(data))


def _segments(r: _Reader, ident: bytes) -> list[tuple[int, int]]:
    """(offset, size in the file) of each loadable segment."""
    (phoff,) = struct.unpack_from("<Q", ident, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", ident, 0x36)
    if phoff == 0 or phnum == 0:
        return []
    if phentsize != _SEGMENT.size or phoff + _SEGMENT.size * phnum > r.size:
        raise FatbinFormatError("damaged program header table")
    table = r.read_at(phoff, _SEGMENT.size * phnum)
    out = []
    for i in range(phnum):
        p_type, _flags, offset, _va, _pa, filesz, _memsz, _align = _SEGMENT.unpack_from(
            table, i * _SEGMENT.size
        )
        if p_type == _PT_LOAD and filesz:
            if offset + filesz > r.size:
                raise FatbinFormatError("a loadable segment runs past the end of the file")
            out.append((offset, filesz))
    return out


def _stripped_archs(r: _Reader, ident: bytes) -> list[tuple[int, int]] | None:
    """The entries of the fat binaries found in the loadable segments of a module without
    section headers (None: none found). A fat binary lies 8-aligned in its segment; a
    stray magic number that does not parse as one is passed over."""
    magic = struct.pack("<I", FATBIN_MAGIC)
    found: list[tuple[int, int]] = []
    segments = _segments(r, ident)
    if not segments:
        raise FatbinFormatError("section headers stripped and no loadable segment to read")
    for seg_off, seg_size in sorted(segments):
        hits: list[int] = []
        carry = b""
        for at, piece in r.pieces(seg_off, seg_size):
            buf, base = carry + piece, at - len(carry)
            i = buf.find(magic)
            while i >= 0:
                if (base + i - seg_off) % 8 == 0:
                    hits.append(base + i)
                i = buf.find(magic, i + 1)
            carry = buf[-3:]
        end = seg_off + seg_size
        for hit in hits:
            try:
                head = _CONTAINER.unpack(r.read_at(hit, _CONTAINER.size))
                if head[2] != _CONTAINER.size or hit + _CONTAINER.size + head[3] > end:
                    continue
                found.extend(_entries(r, hit, _CONTAINER.size + head[3]))
            except FatbinFormatError as exc:
                if "took more than" in str(exc):
                    raise
    return found or None


def module_archs(
    fh: BinaryIO,
    path: str,
    size: int | None = None,
    *,
    deadline: Deadline | None = None,
    cheap_seek: bool = True,
) -> ModuleArchs:
    """The architectures of the ELF module ``fh`` of ``size`` bytes (default: what
    seeking to its end finds), named ``path`` in the result. ``cheap_seek=False`` for a
    compressed stream (a wheel member); ``deadline`` bounds the whole read."""
    if size is None:
        size = fh.seek(0, 2)
    r = _Reader(fh, size, Deadline.after(MODULE_S).sooner(deadline), cheap=cheap_seek)
    ident = r.read_at(0, 64) if size >= 64 else b""
    if ident[:4] != _ELF_MAGIC:
        raise FatbinFormatError("not an ELF file")
    if ident[4] != 2 or ident[5] != 1:
        raise FatbinFormatError("not a 64-bit little-endian ELF file")
    where = _fatbin_section(r, ident)
    how = ""
    if where == "stripped":
        how = "section headers stripped; read through its program headers"
        entries = _stripped_archs(r, ident)
        if entries is None:
            return ModuleArchs(path, how=how + ": no fat binary in its loadable segments")
    elif where is None:
        return ModuleArchs(path)
    else:
        assert not isinstance(where, str)
        entries = list(_entries(r, *where))
    sass = {arch for kind, arch in entries if kind == KIND_SASS}
    ptx = {arch for kind, arch in entries if kind == KIND_PTX}
    return ModuleArchs(path, tuple(sorted(sass)), tuple(sorted(ptx)), has_fatbin=True, how=how)


def is_compiled_module(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return base.endswith(".so") or ".so." in base


_METHODS = {12: "bzip2", 14: "lzma", 93: "zstd", 95: "xz", 98: "ppmd"}


def _method(info: zipfile.ZipInfo) -> str:
    return _METHODS.get(info.compress_type, f"compression method {info.compress_type}")


def wheel_archs(wheel: Path, *, seconds: float = WHEEL_S) -> tuple[list[ModuleArchs], list[str]]:
    """Every compiled module of ``wheel`` and what it carries; and the modules that could
    not be read (each "name: reason"). All of them together take at most ``seconds``."""
    found: list[ModuleArchs] = []
    unreadable: list[str] = []
    deadline = Deadline.after(seconds)
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            if info.is_dir() or not is_compiled_module(info.filename):
                continue
            if info.flag_bits & 0x1:
                unreadable.append(f"{info.filename}: the member is encrypted")
                continue
            try:
                with zf.open(info) as fh:
                    found.append(
                        module_archs(
                            fh,  # type: ignore[arg-type]
                            info.filename,
                            info.file_size,
                            deadline=deadline,
                            cheap_seek=info.compress_type == zipfile.ZIP_STORED,
                        )
                    )
            except (FatbinFormatError, zipfile.BadZipFile, struct.error) as exc:
                unreadable.append(f"{info.filename}: {exc}")
            except NotImplementedError:
                unreadable.append(
                    f"{info.filename}: the member is compressed with {_method(info)}, which this "
                    "Python cannot read"
                )
            except (zlib.error, EOFError) as exc:
                unreadable.append(f"{info.filename}: its compressed data is damaged ({exc})")
            except Exception as exc:
                # A decompressor's own error (lzma, bz2, zstd where Python has it, an
                # encrypted member): whatever it is, this member cannot be told, and the
                # check says so by name instead of stopping as an internal error.
                unreadable.append(f"{info.filename}: {type(exc).__name__}: {exc}")
    return found, unreadable
