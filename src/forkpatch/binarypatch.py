"""Apply ``GIT binary patch`` sections without git: base85 + zlib + git's delta format."""

from __future__ import annotations

import re

from forkpatch.git import Git, blob_id
from forkpatch.patchfile import FilePatch, decode_binary_block

_FULL_OID = re.compile(r"^[0-9a-f]{40}$")


class BinaryPatchError(Exception):
    """The binary section cannot be applied to this content."""


def _decode_block(lines: list[bytes]) -> bytes:
    try:
        return decode_binary_block(lines)
    except ValueError as exc:
        raise BinaryPatchError(f"binary patch: {exc}") from None


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data):
            raise BinaryPatchError("truncated delta header")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def apply_delta(source: bytes, delta: bytes) -> bytes:
    src_size, pos = _varint(delta, 0)
    dst_size, pos = _varint(delta, pos)
    if src_size != len(source):
        raise BinaryPatchError("binary delta was made for a different version of the file")
    out = bytearray()
    while pos < len(delta):
        op = delta[pos]
        pos += 1
        if op & 0x80:
            offset = size = 0
            for i in range(4):
                if op & (1 << i):
                    offset |= delta[pos] << (8 * i)
                    pos += 1
            for i in range(3):
                if op & (1 << (4 + i)):
                    size |= delta[pos] << (8 * i)
                    pos += 1
            size = size or 0x10000
            if offset + size > len(source):
                raise BinaryPatchError("binary delta copies past the end of the file")
            out += source[offset : offset + size]
        elif op:
            out += delta[pos : pos + op]
            pos += op
        else:
            raise BinaryPatchError("binary delta has a reserved opcode")
    if len(out) != dst_size:
        raise BinaryPatchError("binary delta produced the wrong size")
    return bytes(out)


def apply_binary(old: bytes | None, fp: FilePatch, git: Git | None = None) -> bytes | None:
    """Return the new content of a binary file patch (None when it deletes the file)."""
    if fp.new_path is None:
        return None
    if (
        fp.old_oid
        and _FULL_OID.match(fp.old_oid)
        and old is not None
        and fp.old_oid != "0" * 40
        and blob_id(old) != fp.old_oid
    ):
        raise BinaryPatchError(
            f"{fp.path}: the binary patch was made for another version of "
            "the file (its blob id differs)"
        )
    lines = fp.raw.split(b"\n")
    try:
        start = lines.index(b"GIT binary patch")
    except ValueError:
        # "Binary files a/x and b/x differ": only usable if we have the result.
        if git is not None and fp.new_oid and _FULL_OID.match(fp.new_oid):
            got = git.objects_exist([fp.new_oid])
            if got:
                with git.reader() as r:
                    data = r.blob(fp.new_oid)
                if data is not None:
                    return data
        raise BinaryPatchError(
            f"{fp.path}: the patch says only 'Binary files differ'; "
            "regenerate it with `git diff --binary`"
        ) from None
    kind, _, size_text = lines[start + 1].partition(b" ")
    block: list[bytes] = []
    for line in lines[start + 2 :]:
        if not line:
            break
        block.append(line)
    data = _decode_block(block)
    if kind == b"literal":
        if not size_text.isdigit() or len(data) != int(size_text):
            raise BinaryPatchError(f"{fp.path}: binary literal has the wrong size")
        result = data
    elif kind == b"delta":
        result = apply_delta(old or b"", data)
    else:
        raise BinaryPatchError(f"{fp.path}: unknown binary patch kind {kind!r}")
    if fp.new_oid and _FULL_OID.match(fp.new_oid) and blob_id(result) != fp.new_oid:
        raise BinaryPatchError(f"{fp.path}: binary patch result does not match its blob id")
    return result
