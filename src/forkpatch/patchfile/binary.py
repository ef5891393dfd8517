"""The data of ``GIT binary patch`` blocks: base85 lines, zlib-compressed."""

from __future__ import annotations

import base64
import zlib


def decode_binary_block(lines: list[bytes], limit: int | None = None) -> bytes:
    """The bytes of one ``GIT binary patch`` block: base85 lines (a length letter,
    then the data), zlib-compressed. ``limit``: inflate at most this many bytes and
    one more (so a block claiming a small size cannot inflate to gigabytes).
    Raises ValueError naming what is wrong."""
    out = bytearray()
    for line in lines:
        if not line:
            continue
        c = line[0]
        if ord("A") <= c <= ord("Z"):
            n = c - ord("A") + 1
        elif ord("a") <= c <= ord("z"):
            n = c - ord("a") + 27
        else:
            raise ValueError(f"bad length character {chr(c)!r}")
        try:
            out += base64.b85decode(line[1:])[:n]
        except ValueError as exc:
            raise ValueError(f"corrupt base85 data: {exc}") from None
    try:
        inflater = zlib.decompressobj()
        if limit is None:
            return inflater.decompress(bytes(out)) + inflater.flush()
        data = inflater.decompress(bytes(out), limit + 1)
        if not inflater.eof and len(data) <= limit:
            raise ValueError("truncated compressed data")
        return data
    except zlib.error as exc:
        raise ValueError(f"corrupt compressed data ({exc})") from None
