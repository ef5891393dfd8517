"""File names in diff headers: git's C quoting, the two names of a ``diff --git``
line, and the ``-p0``/``-p1`` strip level of plain diffs."""

from __future__ import annotations

_C_ESCAPES = {
    ord("a"): 7,
    ord("b"): 8,
    ord("t"): 9,
    ord("n"): 10,
    ord("v"): 11,
    ord("f"): 12,
    ord("r"): 13,
    ord('"'): 34,
    ord("\\"): 92,
}
_C_QUOTE = {v: k for k, v in _C_ESCAPES.items()}


def unquote(data: bytes, start: int) -> tuple[bytes, int] | None:
    """Decode a git C-style quoted name starting at ``data[start] == '"'``.

    Returns the name and the index just after the closing quote, or None when
    the quoting is broken.
    """
    out = bytearray()
    i = start + 1
    n = len(data)
    while i < n:
        c = data[i]
        if c == 0x22:  # closing quote
            return bytes(out), i + 1
        if c != 0x5C:
            out.append(c)
            i += 1
            continue
        if i + 1 >= n:
            return None
        e = data[i + 1]
        if e in _C_ESCAPES:
            out.append(_C_ESCAPES[e])
            i += 2
        elif (
            0x30 <= e <= 0x33 and i + 3 < n and all(0x30 <= d <= 0x37 for d in data[i + 2 : i + 4])
        ):
            out.append(int(data[i + 1 : i + 4], 8))
            i += 4
        else:
            return None
    return None


def quote_path(path: str) -> str:
    """Quote a path the way git does (core.quotePath=true) when it needs quoting."""
    raw = path.encode("utf-8", "surrogateescape")
    if not any(b < 0x20 or b >= 0x7F or b in (0x22, 0x5C) for b in raw):
        return path
    parts = ['"']
    for b in raw:
        if b in _C_QUOTE:
            parts.append("\\" + chr(_C_QUOTE[b]))
        elif b < 0x20 or b >= 0x7F:
            parts.append(f"\\{b:03o}")
        else:
            parts.append(chr(b))
    parts.append('"')
    return "".join(parts)


def decode_name(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def should_strip(a: str, b: str) -> bool:
    """Strip one leading component (-p1) when both names have one and they differ, or
    when both carry the same one of git's prefixes.

    ``a/x b/x`` and quilt's ``linux.orig/x linux/x`` are -p1, and so are hand-made
    diffs with both headers on one side (``a/x a/x``, ``b/x b/x``), which ``git
    apply`` and ``patch -p1`` read as ``x``; ``vllm/x vllm/x`` (``-p0`` or ``git diff
    --no-prefix``) is kept whole.
    """
    if "/" not in a or "/" not in b:
        return False
    top_a, top_b = a.split("/", 1)[0], b.split("/", 1)[0]
    return top_a != top_b or top_a in ("a", "b")


def strip_prefix(name: str, strip: bool) -> str:
    if strip and "/" in name:
        return name.split("/", 1)[1]
    return name


def parse_git_names(rest: bytes) -> tuple[str, str] | None:
    """The two names of a ``diff --git A B`` line (quoted or not, possibly with spaces)."""
    if rest.startswith(b'"'):
        got = unquote(rest, 0)
        if got is None or rest[got[1] : got[1] + 1] != b" ":
            return None
        first, pos = got
        second_raw = rest[pos + 1 :]
        if second_raw.startswith(b'"'):
            got2 = unquote(second_raw, 0)
            if got2 is None or got2[1] != len(second_raw):
                return None
            second_raw = got2[0]
        return (decode_name(first), decode_name(second_raw)) if second_raw else None
    if rest.endswith(b'"'):
        pos = rest.find(b' "')
        while pos != -1:
            got = unquote(rest, pos + 1)
            if got is not None and got[1] == len(rest):
                return decode_name(rest[:pos]), decode_name(got[0])
            pos = rest.find(b' "', pos + 1)
        return None
    # Unquoted, possibly with spaces: git writes the same name twice, so split in
    # the middle when the two halves agree past their prefixes.
    if len(rest) % 2 == 1:
        half = len(rest) // 2
        a, b = rest[:half], rest[half + 1 :]
        if rest[half : half + 1] == b" " and a.split(b"/", 1)[-1] == b.split(b"/", 1)[-1]:
            return decode_name(a), decode_name(b)
    pos = rest.find(b" b/")
    if pos == -1:
        pos = rest.find(b" ")
    if pos <= 0:
        return None
    return decode_name(rest[:pos]), decode_name(rest[pos + 1 :])


def git_header_name(rest: bytes) -> str | None:
    """The name of a ``---``/``+++`` line of git's (its prefix taken off; None for
    ``/dev/null``). git quotes a name with special bytes, and ends one holding a space
    with a tab."""
    if rest.startswith(b'"'):
        got = unquote(rest, 0)
        if got is None:
            return None
        name = got[0]
    else:
        name = rest.split(b"\t", 1)[0]
    if name == b"/dev/null" or b"/" not in name:
        return None
    return decode_name(name.split(b"/", 1)[1])
