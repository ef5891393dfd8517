"""Read a wheel's zip structure and write a new zip that copies members raw.

Why not :mod:`zipfile` for writing: ``zipfile`` can only add a member by
compressing its bytes again. A vLLM wheel is ~80 MB of mostly compiled
libraries; decompressing and recompressing all of it to change three ``.py``
files is what makes ``wheel unpack`` + ``wheel pack`` slow. Here an untouched
member's local header and compressed data are copied byte for byte (coalesced
into as few ``copy_file_range`` calls as possible) and only the central
directory is written anew, with the new offsets.

Scope, on purpose: no zip64 (a wheel over 4 GiB or with 65,535+ members is
refused with a clear message), no encryption, compression ``stored`` or
``deflate`` for the members we must read. Output is deterministic: members
appear in the order given, members whose bytes we write get one fixed
timestamp (``SOURCE_DATE_EPOCH`` when set, else 1980-01-01 00:00:00), and the
file is written to a temporary name in the destination directory, fsynced and
renamed, so a reader never sees half a wheel.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import hashlib
import io
import itertools
import os
import struct
import tempfile
import time
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from forkpatch import settings
from forkpatch.errors import BuildError, ForkpatchError
from forkpatch.fsutil import (
    TMP_SUFFIX,
    naming,
    new_file_mode,
    open_regular,
    relpath_problem,
    write_event,
)

__all__ = [
    "CopyMember",
    "NewMember",
    "OutMember",
    "RecordCheck",
    "WheelZip",
    "ZipEntry",
    "check_record",
    "fixed_date_time",
    "record_digest",
    "write_zip",
]

_LOCAL = struct.Struct("<4s2B4HL2L2H")  # 30 bytes, same layout as zipfile.structFileHeader
_CENTRAL = struct.Struct("<4s4B4HL2L5H2L")  # 46 bytes, zipfile.structCentralDir
_EOCD = struct.Struct("<4s4H2LH")  # 22 bytes, zipfile.structEndArchive
_LOCAL_SIG = b"PK\x03\x04"
_CENTRAL_SIG = b"PK\x01\x02"
_EOCD_SIG = b"PK\x05\x06"
_ZIP64_LOCATOR_SIG = b"PK\x06\x07"
_DESCRIPTOR_SIG = b"PK\x07\x08"

_FLAG_ENCRYPTED = 0x1
_FLAG_DESCRIPTOR = 0x8
_FLAG_UTF8 = 0x800
_STORED = 0
_DEFLATED = 8
_U32_MAX = 0xFFFFFFFF
_U16_MAX = 0xFFFF
_CENTRAL_OFFSET_FIELD = 42  # byte offset of "relative offset of local header" in a central record

#: (create_version, create_system) for members we write: zip 2.0, made on Unix,
#: like the ``wheel`` package and ``zipfile`` on Linux.
_MADE_BY = (20, 3)
_EXTRACT_VERSION = 20
DEFAULT_FILE_ATTR = (0o100644 & 0xFFFF) << 16


#: Limits on what a wheel may make forkpatch inflate. A member is read in bounded
#: chunks and must inflate to exactly its declared size; the declared sizes are
#: capped per member read into memory and in total (``FORKPATCH_WHEEL_MAX_BYTES``).
MAX_TOTAL_BYTES = 16 << 30  # unless FORKPATCH_WHEEL_MAX_BYTES says otherwise
MAX_MEMBER_IN_MEMORY = 512 << 20
#: Deflate cannot compress better than about 1032:1; a member declaring more is a bomb.
MAX_DEFLATE_RATIO = 1100
_CHUNK = 1 << 20


def member_name_problem(name: str) -> str | None:
    """Why a member name is unsafe to extract or copy (None when it is safe).

    A member is a relative path inside the wheel (a directory entry may end in
    ``/``); anything :func:`forkpatch.fsutil.relpath_problem` refuses could put a
    file outside the directory a wheel is installed or unpacked into ("zip slip").
    """
    if not name or name == "/":
        return "the name is empty" if not name else "it is absolute"
    return relpath_problem(name[:-1] if name.endswith("/") else name)


def check_member_names(names: Iterable[str], *, source: Path) -> None:
    """Refuse (BuildError naming ``source`` and the member) any unsafe or duplicate name."""
    seen: set[str] = set()
    for name in names:
        problem = member_name_problem(name)
        if problem is not None:
            raise BuildError(
                f"{source}: member {name!r} is unsafe ({problem}); forkpatch refuses this wheel",
                tip="a wheel's members must be relative paths inside it (no '..', no "
                "absolute paths, no backslashes or drive letters); rebuild it with a "
                "standard tool",
            )
        key = name.rstrip("/")
        if key in seen:
            raise BuildError(
                f"{source}: member {name!r} appears twice; forkpatch refuses this wheel",
                tip="rebuild the wheel with a standard tool",
            )
        seen.add(key)


@dataclass(frozen=True)
class SizeFacts:
    """What the central directory declares about a member, for :func:`check_sizes`."""

    name: str
    method: int
    compress_size: int
    file_size: int
    start: int  # offset of the local header
    end: int  # where the member's record ends (at least)


def check_sizes(members: Iterable[SizeFacts], *, source: Path) -> None:
    """Refuse a wheel whose declared sizes make it a zip bomb (BuildError naming it).

    - a deflated member may not declare more than deflate can produce from its
      compressed size (about 1032:1);
    - a stored member's two sizes must agree;
    - members may not overlap (one compressed stream listed many times is how the
      smallest bombs multiply themselves; no real wheel does it);
    - the declared sizes may not add up to more than ``FORKPATCH_WHEEL_MAX_BYTES``.
    """
    total = 0
    ranges = []
    for m in members:
        if (
            m.method == _DEFLATED
            and m.file_size > max(m.compress_size, 1) * MAX_DEFLATE_RATIO + 4096
        ):
            raise _fail(
                source,
                f"member {m.name} declares {m.file_size:,} bytes from {m.compress_size:,} "
                "compressed (more than deflate can produce: a zip bomb)",
            )
        if m.method == _STORED and m.file_size != m.compress_size:
            raise _fail(source, f"member {m.name} is stored with two different sizes")
        total += m.file_size
        if total > (cap := settings.size("FORKPATCH_WHEEL_MAX_BYTES", MAX_TOTAL_BYTES)):
            raise BuildError(
                f"{source}: its members add up to more than {cap:,} bytes "
                "uncompressed; forkpatch refuses it",
                tip="raise FORKPATCH_WHEEL_MAX_BYTES if this wheel is really that large",
            )
        ranges.append((m.start, m.end, m.name))
    for (_s1, end1, n1), (start2, _e2, n2) in itertools.pairwise(sorted(ranges)):
        if start2 < end1:
            raise _fail(source, f"members {n1} and {n2} overlap (a zip bomb)")


def _fail(path: Path, what: str) -> BuildError:
    return BuildError(
        f"{path}: {what}",
        tip="the file is not a valid wheel (truncated download or corrupt build?); "
        "download or build it again",
    )


@dataclass(frozen=True)
class ZipEntry:
    """One member as described by the central directory, plus where it lives."""

    name: str
    flag_bits: int
    compress_type: int
    dos_time: int
    dos_date: int
    crc: int
    compress_size: int
    file_size: int
    external_attr: int
    header_offset: int
    #: offset of the compressed data (after the local header)
    data_offset: int
    #: end of local header + data (+ data descriptor): the verbatim copy extent
    record_end: int
    #: the member's raw central directory record (46 bytes + name + extra + comment)
    central_record: bytes
    central_extra: bytes
    comment: bytes
    create_version: int
    create_system: int
    internal_attr: int

    @property
    def is_dir(self) -> bool:
        return self.name.endswith("/")


@dataclass(frozen=True)
class CopyMember:
    """Copy ``entry`` raw. With ``name`` set, store it under that new name (a
    new local header, the same compressed bytes)."""

    entry: ZipEntry
    name: str | None = None

    @property
    def out_name(self) -> str:
        return self.name if self.name is not None else self.entry.name


@dataclass(frozen=True)
class NewMember:
    """A member whose bytes we write (deflated, fixed timestamp)."""

    name: str
    data: bytes
    external_attr: int = DEFAULT_FILE_ATTR

    @property
    def out_name(self) -> str:
        return self.name


OutMember = CopyMember | NewMember


def fixed_date_time() -> tuple[int, int]:
    """(dos_date, dos_time) for members we write.

    ``SOURCE_DATE_EPOCH`` (reproducible-builds convention, UTC, clamped to the
    zip epoch) when set, else 1980-01-01 00:00:00.
    """
    raw = os.environ.get("SOURCE_DATE_EPOCH")
    tm: tuple[int, ...] = (1980, 1, 1, 0, 0, 0)
    if raw:
        try:
            epoch = int(raw)
        except ValueError:
            raise BuildError(
                f"SOURCE_DATE_EPOCH={raw!r} is not an integer",
                tip="unset it or set it to seconds since 1970-01-01 UTC",
            ) from None
        tm = tuple(time.gmtime(max(epoch, 315532800))[:6])
    year, month, day, hour, minute, sec = tm
    year = min(year, 2107)
    dos_date = (year - 1980) << 9 | month << 5 | day
    dos_time = hour << 11 | minute << 5 | sec // 2
    return dos_date, dos_time


class WheelZip:
    """A read-only view of a zip file's members (central directory parsed once).

    Use as a context manager. ``entries`` keeps the central directory order.
    ``read()`` decompresses one member and checks its CRC.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            # Held for the reader's life and closed by close() / __exit__.
            self._fh = os.fdopen(open_regular(self.path), "rb")
        except OSError as exc:
            raise BuildError(
                f"cannot open wheel {self.path}: {exc.strerror}",
                tip="check the path of the base wheel",
            ) from None
        try:
            self.fd = self._fh.fileno()
            self.size = os.fstat(self.fd).st_size
            self.entries: list[ZipEntry] = self._parse()
        except BaseException:
            self._fh.close()
            raise
        self.by_name: dict[str, ZipEntry] = {e.name: e for e in self.entries}

    def __enter__(self) -> WheelZip:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._fh.close()

    def _pread(self, offset: int, n: int) -> bytes:
        data = os.pread(self.fd, n, offset)
        if len(data) != n:
            raise _fail(self.path, f"unexpected end of file at offset {offset}")
        return data

    def _parse(self) -> list[ZipEntry]:
        if self.size < _EOCD.size:
            raise _fail(self.path, "too small to be a zip file")
        tail_len = min(self.size, _EOCD.size + _U16_MAX)
        tail = self._pread(self.size - tail_len, tail_len)
        pos = tail.rfind(_EOCD_SIG)
        if pos < 0 or len(tail) - pos < _EOCD.size:
            raise _fail(self.path, "not a zip file (no end-of-central-directory record)")
        _sig, disk, cd_disk, n_disk, n_total, cd_size, cd_offset, _clen = _EOCD.unpack_from(
            tail, pos
        )
        eocd_offset = self.size - tail_len + pos
        if (
            (pos >= 20 and tail[pos - 20 : pos - 16] == _ZIP64_LOCATOR_SIG)
            or _U32_MAX
            in (
                cd_size,
                cd_offset,
            )
            or n_total == _U16_MAX
        ):
            raise BuildError(
                f"{self.path}: is a zip64 archive, which the overlay builder does not handle",
                tip="wheels of this size need the container build (`forkpatch build --mode container`)",
            )
        if disk != 0 or cd_disk != 0 or n_disk != n_total:
            raise _fail(self.path, "multi-disk zip archives are not supported")
        if cd_offset + cd_size > eocd_offset:
            raise _fail(self.path, "central directory points past its end record")
        cd = self._pread(cd_offset, cd_size)
        entries: list[ZipEntry] = []
        seen: set[str] = set()
        p = 0
        for _ in range(n_total):
            if cd[p : p + 4] != _CENTRAL_SIG or p + _CENTRAL.size > len(cd):
                raise _fail(self.path, f"bad central directory record #{len(entries) + 1}")
            (
                _s,
                create_version,
                create_system,
                _extract_version,
                _reserved,
                flags,
                method,
                dtime,
                ddate,
                crc,
                csize,
                usize,
                nlen,
                xlen,
                clen,
                _disk_start,
                internal_attr,
                external_attr,
                offset,
            ) = _CENTRAL.unpack_from(cd, p)
            end = p + _CENTRAL.size + nlen + xlen + clen
            if end > len(cd):
                raise _fail(self.path, f"central directory record #{len(entries) + 1} truncated")
            raw_name = cd[p + _CENTRAL.size : p + _CENTRAL.size + nlen]
            name = raw_name.decode("utf-8" if flags & _FLAG_UTF8 else "cp437")
            extra = cd[p + _CENTRAL.size + nlen : p + _CENTRAL.size + nlen + xlen]
            comment = cd[p + _CENTRAL.size + nlen + xlen : end]
            record = cd[p:end]
            p = end
            if flags & _FLAG_ENCRYPTED:
                raise _fail(self.path, f"member {name} is encrypted")
            if _U32_MAX in (csize, usize, offset) or _has_zip64_extra(extra):
                raise BuildError(
                    f"{self.path}: member {name} uses zip64 fields, which the overlay "
                    "builder does not handle",
                    tip="use the container build for this wheel",
                )
            if member_name_problem(name) is not None or name.rstrip("/") in seen:
                check_member_names([*seen, name], source=self.path)
            seen.add(name.rstrip("/"))
            # The local header's name/extra lengths may differ from the central
            # one's, so the data offset must be read from the local header.
            local = self._pread(offset, _LOCAL.size) if offset + _LOCAL.size <= self.size else b""
            if local[:4] != _LOCAL_SIG:
                raise _fail(self.path, f"member {name}: no local header at offset {offset}")
            lnlen, lxlen = struct.unpack_from("<2H", local, 26)
            data_offset = offset + _LOCAL.size + lnlen + lxlen
            record_end = data_offset + csize
            if flags & _FLAG_DESCRIPTOR:
                sig = self._pread(record_end, 4) if record_end + 4 <= self.size else b""
                record_end += 16 if sig == _DESCRIPTOR_SIG else 12
            if record_end > cd_offset:
                raise _fail(self.path, f"member {name} runs into the central directory")
            entries.append(
                ZipEntry(
                    name=name,
                    flag_bits=flags,
                    compress_type=method,
                    dos_time=dtime,
                    dos_date=ddate,
                    crc=crc,
                    compress_size=csize,
                    file_size=usize,
                    external_attr=external_attr,
                    header_offset=offset,
                    data_offset=data_offset,
                    record_end=record_end,
                    central_record=record,
                    central_extra=extra,
                    comment=comment,
                    create_version=create_version,
                    create_system=create_system,
                    internal_attr=internal_attr,
                )
            )
        check_sizes(
            (
                SizeFacts(
                    e.name,
                    e.compress_type,
                    e.compress_size,
                    e.file_size,
                    e.header_offset,
                    e.record_end,
                )
                for e in entries
            ),
            source=self.path,
        )
        return entries

    def raw_data(self, entry: ZipEntry) -> bytes:
        """The member's compressed bytes, exactly as stored."""
        return self._pread(entry.data_offset, entry.compress_size)

    def read(self, name_or_entry: str | ZipEntry) -> bytes:
        """Decompress one member into memory (checked as :meth:`chunks` does)."""
        entry = self.by_name[name_or_entry] if isinstance(name_or_entry, str) else name_or_entry
        if entry.file_size > MAX_MEMBER_IN_MEMORY:
            raise _fail(
                self.path,
                f"member {entry.name} declares {entry.file_size:,} bytes, more than forkpatch "
                f"reads into memory ({MAX_MEMBER_IN_MEMORY:,})",
            )
        return b"".join(self.chunks(entry))

    def chunks(self, entry: ZipEntry) -> Iterator[bytes]:
        """The member's bytes in bounded chunks; never more than its declared size.

        Inflating stops (BuildError) as soon as the output would pass the size the
        central directory declares, and the size and CRC are checked at the end: a
        member that inflates to gigabytes while declaring a few bytes costs one chunk.
        """
        if entry.compress_type not in (_STORED, _DEFLATED):
            raise BuildError(
                f"{self.path}: member {entry.name} uses compression method "
                f"{entry.compress_type}; only stored and deflate are supported",
                tip="rebuild the wheel with a standard tool (pip wheel / python -m build)",
            )
        inflate = zlib.decompressobj(-15) if entry.compress_type == _DEFLATED else None
        crc = 0
        produced = 0
        offset, left = entry.data_offset, entry.compress_size
        limit = entry.file_size

        def emit(data: bytes) -> bytes:
            nonlocal crc, produced
            produced += len(data)
            if produced > limit:
                raise _fail(
                    self.path,
                    f"member {entry.name} inflates past its declared {limit:,} bytes "
                    "(a zip bomb or corrupt data)",
                )
            crc = zlib.crc32(data, crc)
            return data

        try:
            while left > 0 or (inflate is not None and inflate.unconsumed_tail):
                if inflate is not None and inflate.unconsumed_tail:
                    raw = inflate.unconsumed_tail
                else:
                    raw = self._pread(offset, min(left, _CHUNK))
                    offset += len(raw)
                    left -= len(raw)
                if inflate is None:
                    yield emit(raw)
                    continue
                # max_length bounds the output of each step, whatever the input holds.
                out = inflate.decompress(raw, min(_CHUNK, limit - produced + 1))
                if out:
                    yield emit(out)
                if inflate.eof:
                    break
            if inflate is not None:
                rest = inflate.flush(1) if not inflate.eof else b""
                if rest:
                    yield emit(rest)
        except zlib.error as exc:
            raise _fail(self.path, f"member {entry.name} does not inflate ({exc})") from None
        if produced != entry.file_size or crc != entry.crc:
            raise _fail(self.path, f"member {entry.name} fails its CRC check (corrupt data)")


def _has_zip64_extra(extra: bytes) -> bool:
    p = 0
    while p + 4 <= len(extra):
        hid, hlen = struct.unpack_from("<2H", extra, p)
        if hid == 0x0001:
            return True
        p += 4 + hlen
    return False


def _encode_name(name: str) -> tuple[bytes, int]:
    try:
        return name.encode("ascii"), 0
    except UnicodeEncodeError:
        return name.encode("utf-8"), _FLAG_UTF8


class _Out:
    """Sequential writer on a raw fd: small writes are buffered, raw copies
    from the source are coalesced into contiguous ranges."""

    def __init__(self, fd: int, src_fd: int) -> None:
        self.fd = fd
        self.src_fd = src_fd
        self.offset = 0
        self._buf = bytearray()
        self._run: tuple[int, int] | None = None  # pending source range to copy

    def write(self, data: bytes) -> None:
        self._flush_run()
        self._buf += data
        self.offset += len(data)
        if len(self._buf) >= 1 << 20:
            self._flush_buf()

    def copy(self, start: int, end: int) -> None:
        self._flush_buf()
        if self._run is not None and self._run[1] == start:
            self._run = (self._run[0], end)
        else:
            self._flush_run()
            self._run = (start, end)
        self.offset += end - start

    def finish(self) -> None:
        self._flush_run()
        self._flush_buf()

    def _flush_buf(self) -> None:
        view = memoryview(self._buf)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]
        self._buf = bytearray()

    def _flush_run(self) -> None:
        if self._run is None:
            return
        start, end = self._run
        self._run = None
        _copy_range(self.src_fd, self.fd, start, end - start)


def _copy_range(src: int, dst: int, offset: int, length: int) -> None:
    copy_file_range = getattr(os, "copy_file_range", None)
    while length > 0 and copy_file_range is not None:
        try:
            n = copy_file_range(src, dst, length, offset)
        except OSError:
            break  # EXDEV / ENOSYS / EINVAL on some filesystems: fall back to read/write
        if n <= 0:
            break
        offset += n
        length -= n
    while length > 0:
        chunk = os.pread(src, min(length, 4 << 20), offset)
        if not chunk:
            raise OSError(f"source ended early at offset {offset}")
        view = memoryview(chunk)
        while view:
            w = os.write(dst, view)
            view = view[w:]
        offset += len(chunk)
        length -= len(chunk)


def _deflate(data: bytes) -> bytes:
    co = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, -15)
    return co.compress(data) + co.flush()


def _write_members(out: _Out, members: Sequence[OutMember]) -> list[bytes]:
    dos_date, dos_time = fixed_date_time()
    central: list[bytes] = []
    for m in members:
        offset = out.offset
        if offset > _U32_MAX:
            raise BuildError(
                "the new wheel would exceed 4 GiB, which needs zip64 (not supported by "
                "the overlay builder)",
                tip="use the container build",
            )
        if isinstance(m, CopyMember) and m.name is None:
            e = m.entry
            out.copy(e.header_offset, e.record_end)
            rec = e.central_record
            central.append(
                rec[:_CENTRAL_OFFSET_FIELD]
                + struct.pack("<L", offset)
                + rec[_CENTRAL_OFFSET_FIELD + 4 :]
            )
            continue
        if isinstance(m, CopyMember):
            e = m.entry
            name_b, utf8 = _encode_name(m.out_name)
            flags = (e.flag_bits & ~(_FLAG_DESCRIPTOR | _FLAG_UTF8)) | utf8
            method, crc, csize, usize = e.compress_type, e.crc, e.compress_size, e.file_size
            mdate, mtime = e.dos_date, e.dos_time
            attr, extra, comment = e.external_attr, e.central_extra, e.comment
            made_by = (e.create_version, e.create_system)
            internal = e.internal_attr
            payload: bytes | None = None
        else:
            name_b, utf8 = _encode_name(m.name)
            flags = utf8
            method = _DEFLATED
            payload = _deflate(m.data)
            crc, csize, usize = zlib.crc32(m.data), len(payload), len(m.data)
            mdate, mtime = dos_date, dos_time
            attr, extra, comment = m.external_attr, b"", b""
            made_by = _MADE_BY
            internal = 0
            if usize > _U32_MAX or csize > _U32_MAX:
                raise BuildError(f"member {m.name} is over 4 GiB (zip64 is not supported)")
        out.write(
            _LOCAL.pack(
                _LOCAL_SIG,
                _EXTRACT_VERSION,
                0,
                flags,
                method,
                mtime,
                mdate,
                crc,
                csize,
                usize,
                len(name_b),
                0,
            )
            + name_b
        )
        if payload is None:
            assert isinstance(m, CopyMember)
            out.copy(m.entry.data_offset, m.entry.data_offset + m.entry.compress_size)
        else:
            out.write(payload)
        central.append(
            _CENTRAL.pack(
                _CENTRAL_SIG,
                made_by[0],
                made_by[1],
                _EXTRACT_VERSION,
                0,
                flags,
                method,
                mtime,
                mdate,
                crc,
                csize,
                usize,
                len(name_b),
                len(extra),
                len(comment),
                0,
                internal,
                attr,
                offset,
            )
            + name_b
            + extra
            + comment
        )
    return central


def write_zip(dest: Path, source: WheelZip, members: Sequence[OutMember]) -> None:
    """Write ``members`` (in this order) as a new zip at ``dest``, atomically.

    ``CopyMember`` entries come from ``source`` and are copied raw. On any
    error the temporary file is removed and ``dest`` is untouched.
    """
    dest = Path(dest)
    names = [m.out_name for m in members]
    if len(set(names)) != len(names):
        dupes = sorted({n for n in names if names.count(n) > 1})
        raise BuildError(f"internal error: duplicate members {dupes} for {dest.name}")
    if len(members) >= _U16_MAX:
        raise BuildError(
            f"{dest.name} would have {len(members)} members; 65,535 or more needs zip64, "
            "which the overlay builder does not write",
            tip="use the container build",
        )
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=TMP_SUFFIX, dir=dest.parent)
    try:
        with naming(dest):
            out = _Out(fd, source.fd)
            central = _write_members(out, members)
            cd_offset = out.offset
            cd = b"".join(central)
            if cd_offset + len(cd) > _U32_MAX:
                raise BuildError(
                    "the new wheel would exceed 4 GiB, which needs zip64",
                    tip="use the container build",
                )
            out.write(cd)
            out.write(
                _EOCD.pack(_EOCD_SIG, 0, 0, len(central), len(central), len(cd), cd_offset, 0)
            )
            out.finish()
            os.fchmod(fd, new_file_mode())  # the wheel file's; its members keep theirs
            os.fsync(fd)
        os.close(fd)
        fd = -1
        write_event(f"before-rename {dest.name}")
        os.replace(tmp, dest)
        write_event(f"after-rename {dest.name}")
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


# --------------------------------------------------------------------------- RECORD


@dataclass
class RecordCheck:
    """What :func:`check_record` found; empty lists: RECORD holds for every member."""

    #: "path: RECORD says sha256=… / 123 bytes, member has sha256=… / 124 bytes"
    mismatches: list[str] = field(default_factory=list)
    #: listed in RECORD, absent from the zip
    missing: list[str] = field(default_factory=list)
    #: in the zip, absent from RECORD
    extra: list[str] = field(default_factory=list)
    #: anything else (an unreadable RECORD or member, an unsafe or doubled line)
    errors: list[str] = field(default_factory=list)
    unreadable: bool = False  # RECORD itself could not be read: nothing was compared
    #: RECORD's lines: member -> (hash, size)
    listed: dict[str, tuple[str, str]] = field(default_factory=dict)

    def problems(self) -> list[str]:
        return (
            [f"hash/size mismatch: {m}" for m in self.mismatches]
            + [f"in RECORD but not in the wheel: {m}" for m in self.missing]
            + [f"in the wheel but not in RECORD: {m}" for m in self.extra]
            + self.errors
        )


def check_record(wz: WheelZip, record_name: str) -> RecordCheck:
    """Recompute every member's RECORD hash and size (streamed, CRC-checked)."""
    out = RecordCheck()
    try:
        record_text = wz.read(record_name).decode("utf-8")
        rows = [r for r in csv.reader(io.StringIO(record_text)) if r]
    except (ForkpatchError, UnicodeDecodeError, csv.Error) as exc:
        out.errors.append(f"{record_name} unreadable: {exc}")
        out.unreadable = True
        return out
    listed = out.listed
    for row in rows:
        if len(row) != 3:
            out.errors.append(f"{record_name}: malformed line {row!r}")
            continue
        problem = member_name_problem(row[0])
        if problem is not None:
            # An installer would write this path outside the environment (zip slip).
            out.errors.append(f"{record_name}: {row[0]!r} is unsafe ({problem})")
            continue
        if row[0] in listed:
            out.errors.append(f"{record_name}: {row[0]} listed twice")
        listed[row[0]] = (row[1], row[2])
    for e in wz.entries:
        if e.is_dir:
            continue
        if e.name not in listed:
            out.extra.append(e.name)
            continue
        want_hash, want_size = listed[e.name]
        if e.name == record_name:
            if want_hash or want_size:
                out.errors.append(f"{record_name} lists a hash for itself")
            continue
        algo = want_hash.partition("=")[0] or "sha256"
        try:
            # RECORD may use any hashlib algorithm >= sha256; recompute with it.
            hasher = hashlib.new(algo)
        except ValueError:
            out.errors.append(f"{e.name}: unknown hash algorithm {algo!r} in RECORD")
            continue
        size = 0
        try:
            for chunk in wz.chunks(e):  # streamed: bounded memory whatever the member
                hasher.update(chunk)
                size += len(chunk)
        except ForkpatchError as exc:
            out.errors.append(exc.message)
            continue
        digest = base64.urlsafe_b64encode(hasher.digest()).rstrip(b"=").decode()
        got_hash, got_size = f"{algo}={digest}", str(size)
        if (want_hash, want_size) != (got_hash, got_size):
            out.mismatches.append(
                f"{e.name}: RECORD says {want_hash or '-'} / {want_size or '-'} bytes, "
                f"member has {got_hash} / {got_size} bytes"
            )
    in_zip = set(wz.by_name)
    out.missing = [n for n in listed if n not in in_zip]
    return out


def record_digest(rows: Mapping[str, tuple[str, str]], *, skip: Iterable[str]) -> str:
    """sha256 over the RECORD lines of every member but ``skip`` (sorted by name): what
    a build records of its members, and verify recomputes from the wheel's RECORD."""
    skipped = set(skip)
    digest = hashlib.sha256()
    for name in sorted(n for n in rows if n not in skipped):
        digest.update(
            f"{name}\0{rows[name][0]}\0{rows[name][1]}\n".encode("utf-8", "surrogatepass")
        )
    return digest.hexdigest()
