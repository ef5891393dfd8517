"""The header of a patch file: everything before its diff, read without changing a byte.

A header has one of two forms:

* **mail**: an mbox ``From <id> <date>`` line and/or an RFC 822 header block
  (``From:``, ``Date:``, ``Subject:``, ...) ended by a blank line, then the body,
  as ``git format-patch`` writes it. The summary is the ``Subject:`` (RFC 2047
  decoded, folded lines joined, ``[PATCH n/m]``-style prefixes stripped); the
  description is the body.
* **plain**: free text, possibly DEP-3 fields (``Description:``, ``Origin:``,
  ``Bug:``, ``Forwarded:``, ...) as quilt and Debian series write it. The
  description is the text itself.

In both forms the description ends at the first line that is exactly ``---``:
what follows it (format-patch's diffstat, ``Upstream-Status:`` written below
``---``, DEP-3's ``---`` separator) is the *notes*, kept in the file but not in
the description. A diffstat block anywhere in the header is found so that it
can be regenerated when the diff changes.

:class:`HeaderLayout` knows where each part lies (character offsets into the
header text, which is the file's bytes decoded as UTF-8 with surrogateescape,
so every byte comes back) and rewrites one part while keeping every other
character in place. Nothing here runs git.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "HeaderLayout",
    "description_of",
    "header_fields",
    "strip_subject_prefix",
]

# An mbox separator line: "From <sender or commit id> <asctime date>".
_MBOX_FROM = re.compile(r"\AFrom \S+ .*\d\d:\d\d:\d\d.*\Z")
_HEADER_LINE = re.compile(r"\A([!-9;-~]+):(.*)\Z", re.DOTALL)
_MAIL_FIELDS = frozenset({"from", "date", "subject", "message-id", "to", "cc", "in-reply-to"})
# Leading subject tags that say "this is a patch mail", not part of the summary:
# [PATCH], [PATCH 2/7], [PATCH v3 2/7], [RFC PATCH net-next], [RFC], [2/7], [v2].
_SUBJECT_TAG = re.compile(r"\s*\[(?:[^\]]*\bpatch\b[^\]]*|rfc|v\d+|\d+/\d+)\]\s*", re.IGNORECASE)
_REPLY = re.compile(r"\s*(?:re|fwd?):\s*", re.IGNORECASE)  # used with .match(text, pos)

# A diffstat block: "<path> | <n> +-" lines (git or the diffstat tool), the total
# line, then git's --summary lines.
_STAT_LINE = re.compile(r"\A \S.*? +\| +(?:\d+(?: [+-]*)?|Bin(?: \d+ -> \d+ bytes)?)\s*\Z")
_STAT_TOTAL = re.compile(
    r"\A \d+ files? changed(?:, \d+ insertions?\(\+\))?(?:, \d+ deletions?\(-\))?\s*\Z"
)
# Any line of a file that could be a diffstat's total line: a cheap test, before the file
# is parsed, of whether its header may carry a diffstat to regenerate.
_ANY_STAT_TOTAL = re.compile(rb"^ \d+ files? changed", re.MULTILINE)
_STAT_SUMMARY = re.compile(
    r"\A (?:(?:create|delete) mode \d{6} .+|(?:rename|copy|rewrite) .+ \(\d+%\)"
    r"|mode change \d{6} => \d{6} .+)\Z"
)

# Metadata fields read from anywhere in a header (DEP-3, Yocto/OE, git trailers).
_FIELD = re.compile(
    r"^(Description|Subject|Origin|Bug(?:-[A-Za-z0-9]+)?|Forwarded|Applied-Upstream"
    r"|Upstream-Status|Author|From|Last-Update|CVE|Reviewed-by)[ \t]*:[ \t]*(.*)$",
    re.MULTILINE | re.IGNORECASE,
)


def _lines(text: str) -> list[tuple[int, int, str]]:
    """(start, end, content) of each line: ``end`` is past its line end, ``content``
    has neither ``\n`` nor a trailing ``\r``."""
    out = []
    pos = 0
    n = len(text)
    while pos < n:
        nl = text.find("\n", pos)
        end = n if nl == -1 else nl + 1
        content = text[pos : nl if nl != -1 else n]
        if content.endswith("\r"):
            content = content[:-1]
        out.append((pos, end, content))
        pos = end
    return out


def strip_subject_prefix(subject: str) -> tuple[str, str]:
    """``"[PATCH 2/7] x: y"`` -> (``"[PATCH 2/7] "``, ``"x: y"``)."""
    pos = 0
    while True:
        m = _SUBJECT_TAG.match(subject, pos) or _REPLY.match(subject, pos)
        if m is None or m.end() == pos:
            break
        pos = m.end()
    return subject[:pos], subject[pos:]


def _decode_rfc2047(value: str) -> str:
    """A header value with RFC 2047 encoded words decoded and whitespace collapsed."""
    if "=?" not in value:  # no encoded word: email.header (slow to import) is not needed
        return " ".join(value.split())
    import email.header

    try:
        parts = email.header.decode_header(value)
    except (ValueError, LookupError):
        return " ".join(value.split())
    out = []
    for chunk, charset in parts:
        if isinstance(chunk, bytes):
            try:
                out.append(chunk.decode(charset or "ascii", "replace"))
            except LookupError:
                out.append(chunk.decode("utf-8", "replace"))
        else:
            out.append(chunk)
    # decode_header drops the whitespace between an encoded and a plain word.
    joined = "".join(
        (" " if i and isinstance(parts[i][0], bytes) != isinstance(parts[i - 1][0], bytes) else "")
        + piece
        for i, piece in enumerate(out)
    )
    return " ".join(joined.split())


@dataclass(frozen=True)
class HeaderLayout:
    """Where the parts of one header lie (offsets into ``text``)."""

    text: str
    mail: bool
    body_start: int  # first character of the body (0 for a plain header)
    desc_start: int
    desc_end: int
    notes_start: int  # the "---" line, or len(text)
    subject_span: tuple[int, int] | None  # the Subject: header lines, folds included
    subject_raw: str  # the Subject value, unfolded, RFC 2047 decoded
    stat_span: tuple[int, int] | None
    fields: tuple[tuple[str, str], ...]  # the mail header block's (name, value) pairs

    # ------------------------------------------------------------------ reading

    @classmethod
    def parse(cls, text: str) -> HeaderLayout:
        lines = _lines(text)
        block, body_at = _mail_block(lines)
        mail = block is not None
        body_start = lines[body_at][0] if body_at < len(lines) else len(text)
        subject_span = None
        subject_raw = ""
        for name, value, start, end in block or ():
            if name.lower() == "subject" and subject_span is None:
                subject_span = (start, end)
                subject_raw = _decode_rfc2047(value)
        notes_start = len(text)
        for start, _end, line in lines[body_at:]:
            if line.rstrip() == "---":
                notes_start = start
                break
        region = text[body_start:notes_start]
        stripped = region.strip()
        if stripped:
            desc_start = body_start + (len(region) - len(region.lstrip()))
            desc_end = desc_start + len(stripped)
        else:
            desc_start = desc_end = body_start
        return cls(
            text=text,
            mail=mail,
            body_start=body_start,
            desc_start=desc_start,
            desc_end=desc_end,
            notes_start=notes_start,
            subject_span=subject_span,
            subject_raw=subject_raw,
            stat_span=_find_stat(lines),
            fields=tuple((name, value) for name, value, _s, _e in block or ()),
        )

    @property
    def description(self) -> str:
        """What a commit message carries: the body (or plain text) above ``---``, stripped."""
        return self.text[self.desc_start : self.desc_end]

    @property
    def subject(self) -> str:
        """The summary a mail's Subject gives (tags such as ``[PATCH 1/3]`` stripped)."""
        return strip_subject_prefix(self.subject_raw)[1].strip()

    @property
    def notes(self) -> str:
        return self.text[self.notes_start :]

    # ------------------------------------------------------------------ rewriting

    def with_description(self, description: str) -> str:
        """The header with its description replaced; every other character kept."""
        new = description.strip()
        if new == self.description:
            return self.text
        head, tail = self.text[: self.desc_start], self.text[self.desc_end :]
        if not self.mail and not head.strip() and not tail.strip():
            # Only a description: its line ends are kept; none at all without one.
            return new + tail if new else ""
        if not new:
            # Drop the description and the line end after it.
            if tail.startswith("\r\n"):
                tail = tail[2:]
            elif tail.startswith("\n"):
                tail = tail[1:]
            return head + tail
        if self.desc_start == self.desc_end:
            # There was none: put it where the body starts, on lines of its own.
            if not self.mail and not head:
                return new + ("\n" if tail.startswith("---") else "\n\n") + tail
            sep = "\n" if tail.startswith(("---", "\n")) else "\n\n"
            if not head.endswith("\n"):
                head += "\n\n"
            return head + new + sep + tail
        return head + new + tail

    def with_subject(self, summary: str) -> str:
        """A mail header with its Subject line(s) saying ``summary`` (the tag prefix kept)."""
        if not self.mail or self.subject_span is None or summary.strip() == self.subject:
            return self.text
        start, end = self.subject_span
        old = self.text[start:end]
        newline = "\r\n" if old.endswith("\r\n") else "\n"
        prefix = strip_subject_prefix(self.subject_raw)[0]
        value = prefix + summary.strip()
        if value.isascii():
            encoded = value
        else:
            import email.header

            encoded = email.header.Header(value, "utf-8", header_name="Subject").encode()
        return self.text[:start] + f"Subject: {encoded}" + newline + self.text[end:]

    def with_stat(self, stat: str) -> str:
        """The header with its diffstat block replaced by ``stat`` (lines ending in \\n)."""
        if self.stat_span is None:
            return self.text
        start, end = self.stat_span
        return self.text[:start] + stat + self.text[end:]


def _mail_block(
    lines: list[tuple[int, int, str]],
) -> tuple[list[tuple[str, str, int, int]] | None, int]:
    """A mail's header fields and the index of the body's first line, or (None, 0).

    Each field is (name, unfolded value, start, end): the span of its lines,
    continuation lines and line end included.
    """
    i = 0
    mbox = bool(lines) and _MBOX_FROM.match(lines[0][2]) is not None
    if mbox:
        i = 1
    block: list[tuple[str, str, int, int]] = []
    n = len(lines)
    while i < n:
        start, end, line = lines[i]
        if not line.strip():
            break
        m = _HEADER_LINE.match(line)
        if m is not None and line[:1] not in (" ", "\t"):
            block.append((m.group(1), m.group(2).strip(), start, end))
        elif line[:1] in (" ", "\t") and block:
            name, value, first, _end = block[-1]
            block[-1] = (name, f"{value} {line.strip()}", first, end)
        else:
            # Not a header block: an mbox line followed by text is still a mail.
            return ([], 1) if mbox else (None, 0)
        i += 1
    names = {name.lower() for name, *_ in block}
    if not (mbox or ("subject" in names and names & (_MAIL_FIELDS - {"subject"}))):
        return None, 0
    return block, min(i + 1, n)  # the body starts past the blank line


def _find_stat(lines: list[tuple[int, int, str]]) -> tuple[int, int] | None:
    """The span of the first diffstat block, line ends included."""
    n = len(lines)
    i = 0
    while i < n:
        if not _STAT_LINE.match(lines[i][2]):
            i += 1
            continue
        j = i
        while j < n and _STAT_LINE.match(lines[j][2]):
            j += 1
        if j < n and _STAT_TOTAL.match(lines[j][2]):
            j += 1
            while j < n and _STAT_SUMMARY.match(lines[j][2]):
                j += 1
            return lines[i][0], lines[j - 1][1]
        i = j
    return None


def may_carry_stat(data: bytes) -> bool:
    """Whether a patch file may have a diffstat block (False: it surely has none)."""
    return _ANY_STAT_TOTAL.search(data) is not None


def description_of(header: str) -> str:
    """The description of a patch file's header: what its commit message carries.

    A mail's body, or a plain header's text, above the first ``---`` line;
    surrounding blank lines and whitespace removed. For a header without mail
    headers and without a ``---`` line that is simply ``header.strip()``.
    """
    return HeaderLayout.parse(header).description


def header_fields(text: str) -> list[tuple[str, str]]:
    """DEP-3 / OE / trailer metadata lines found anywhere in a header: (name as written,
    value) in order. Only a field's first line is read (a DEP-3 continuation line,
    one starting with a space, is description, not metadata we map)."""
    return [(m.group(1), m.group(2).strip()) for m in _FIELD.finditer(text) if m.group(2).strip()]
