"""Text from outside (file names, subjects, tag names, git's and tools' output, what the
wheel under test printed) made safe for the place it is shown: one helper per boundary.

- :func:`terminal`: a line for a terminal. Control characters (escape sequences, a
  carriage return that overwrites the line, a backspace), C1 controls, bidirectional
  overrides and bytes that were not UTF-8 (lone surrogates) are written as visible
  escapes (``\\x1b``, ``\\u202e``); newlines and tabs stay. The log module applies it to
  everything it prints.
- :func:`xml_text`: a text or attribute value for XML 1.0 (JUnit): what
  :func:`terminal` escapes and every other character XML 1.0 forbids become visible
  escapes (a CI page shows the text too); ElementTree escapes ``<``, ``&`` and quotes.
- :func:`md_text`, :func:`md_cell`, :func:`md_code`: Markdown (reports, pull request
  bodies): controls escaped; in a table cell ``|`` escaped and newlines joined (a
  value cannot add a row or a column); inline code fenced longer than any run of
  backticks inside it.

JSON needs no helper: ``json.dumps`` escapes every control character itself.
"""

from __future__ import annotations

import re

# C0 controls but tab and newline, DEL, C1 controls, bidirectional marks and overrides,
# lone surrogates (undecodable bytes kept by surrogateescape).
_TERMINAL_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
# What XML 1.0 does not allow in a document (section 2.2, Char), plus the C1 controls and
# DEL it discourages: a reader of JUnit must never see them raw. Compiled when first used
# (only a JUnit report needs it): this class costs milliseconds to compile, every start-up.
_XML_UNSAFE = "[^\t\n\r\x20-\x7e\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]"


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # a byte surrogateescape kept: show the byte
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal(text: str) -> str:
    """``text`` with every character that could act on a terminal written visibly."""
    return _TERMINAL_UNSAFE.sub(_visible, text)


def xml_text(text: str) -> str:
    """``text`` with every character XML 1.0 forbids (or a terminal would act on) escaped."""
    return re.sub(_XML_UNSAFE, _visible, terminal(text))


def md_text(text: str) -> str:
    """Markdown running text: controls escaped (newlines stay)."""
    return terminal(text)


def md_cell(text: str) -> str:
    """A Markdown table cell: controls escaped, ``|`` escaped, newlines joined."""
    return terminal(text).replace("\t", " ").replace("\n", " ").replace("|", "\\|")


def md_fence(text: str) -> str:
    """A run of backticks longer than any inside ``text`` (at least three: a code block)."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def md_code(text: str) -> str:
    """``text`` as inline code that no backtick, newline or ``|`` inside it can end."""
    body = md_cell(text)
    longest = max((len(m) for m in re.findall(r"`+", body)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if body.startswith("`") or body.endswith("`") else ""
    return f"{fence}{pad}{body}{pad}{fence}"
