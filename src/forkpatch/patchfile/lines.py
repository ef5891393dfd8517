"""A patch file's bytes as lines: split on LF alone, shown in messages, the line
endings of a whole file, and the mails of an mbox."""

from __future__ import annotations

import re

#: An mbox separator, strictly: "From <who> <asctime>" (format-patch: the commit id
#: and "Mon Sep 17 00:00:00 2001").
MBOX_SEPARATOR = re.compile(
    rb"^From \S+ +(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep"
    rb"|Oct|Nov|Dec) +\d{1,2} \d\d:\d\d:\d\d(?: [+-]\d{4})? \d{4}\r?$",
    re.MULTILINE,
)


def split_mails(data: bytes) -> list[bytes]:
    """The messages of an mbox, byte for byte; one item when it is not several mails."""
    if not MBOX_SEPARATOR.match(data):
        return [data]
    starts = [m.start() for m in MBOX_SEPARATOR.finditer(data)]
    if len(starts) < 2:
        return [data]
    return [data[a:b] for a, b in zip(starts, [*starts[1:], len(data)], strict=True)]


def crlf_throughout(data: bytes) -> bool:
    """Every line of ``data`` ends in CRLF (a Windows tool saved it, or a checkout with
    ``core.autocrlf=true`` wrote it); the last one may lack its line break. git never
    writes a CR at the end of a header line, so such a file is a converted one."""
    lines = data.split(b"\n")
    return len(lines) > 1 and all(x.endswith(b"\r") for x in lines[:-1])


_LONE_LF = re.compile(rb"(?<!\r)\n")


def lf_form(data: bytes) -> bytes:
    """``data`` with LF line endings when it has CRLF throughout, else as it is."""
    return data.replace(b"\r\n", b"\n") if crlf_throughout(data) else data


def in_line_endings_of(new: bytes, old: bytes | None) -> bytes:
    """``new`` (LF) as a file that had ``old``'s line endings is written: CRLF throughout
    where ``old`` had them (the checkout's convention is kept), else as it is."""
    if old is None or not crlf_throughout(old):
        return new
    return _LONE_LF.sub(b"\r\n", new)


def split_lines(data: bytes) -> list[bytes]:
    """Split on b"\\n" only, keeping the endings; the last line may have none."""
    if b"\r" not in data:
        # bytes.splitlines() breaks only at \n, \r and \r\n: without \r it is
        # exactly a split on \n, done in C.
        return data.splitlines(keepends=True)
    parts = data.split(b"\n")
    lines = [p + b"\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def bare_line(line: bytes) -> bytes:
    """A structural line without its ending (b"\\n", b"\\r\\n")."""
    if line.endswith(b"\n"):
        line = line[:-1]
    if line.endswith(b"\r"):
        line = line[:-1]
    return line


def show_line(line: bytes, limit: int = 80) -> str:
    """A line of a file for a message: text in quotes (never a bytes repr), its line
    ending dropped, undecodable bytes and control characters escaped, shortened."""
    text = bare_line(line).decode("utf-8", "backslashreplace")
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return repr(text)
