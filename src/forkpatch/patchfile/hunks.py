"""Hunk bodies: checked against their ``@@`` counts, then parsed by unidiff.

Hunk bodies are parsed by unidiff (``unidiff.PatchSet``, public API, the same in
0.7.5 and 1.0.x): each hunk's lines, decoded as latin-1 (one code point per
byte, so the bytes come back exactly) and passed as a list (unidiff would split
a string with ``str.splitlines()``, which also breaks at ``\\r``, form feeds
and ``\\x85``), under a stand-in ``--- a``/``+++ b`` header. Its ``Line``
objects become our ``HunkLine``; a ``\\`` line takes the newline off the line
before it. Everything around the hunks (names, git extended headers, binary
sections, where a section ends) is the parser's (:mod:`forkpatch.patchfile.parser`).

Before unidiff sees a hunk, our validator checks its body against the ``@@``
counts: unidiff's errors name neither the input line nor
what was found there, it takes a ``\\`` line anywhere in a hunk, it knows a
trailing marker only in English, and it reads one line past a ``-N,0 +M,0``
hunk. So every malformed patch gets a message naming the file, the 1-based line
and what was expected; unidiff only parses hunks already known to be well
formed. Should it still fail or read a hunk differently (start or count), that
is a :class:`PatchParseError` too: no unidiff exception escapes.

unidiff costs time: its per-line regex match and ``Line`` object (plus our
validation pass and the latin-1 round trip) make parsing about 2-3x slower
in CPU time than the hand-written hunk loop it replaced (the 300-patch
benchmark series: about 22 ms before, 57 ms after), still small next to
applying the patches.
"""

from __future__ import annotations

import re

from unidiff.errors import UnidiffParseError
from unidiff.patch import Hunk as UnidiffHunk
from unidiff.patch import PatchSet

from forkpatch.errors import PatchParseError
from forkpatch.kinds import HUNK_LINE_KINDS, HunkLineKind
from forkpatch.patchfile.lines import bare_line, show_line, split_lines
from forkpatch.patchfile.model import Hunk, HunkLine, hunk_header
from forkpatch.patchfile.names import decode_name

_HUNK_HEADER = re.compile(rb"\A@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@ ?(.*)\Z", re.DOTALL)
# unidiff gets each hunk under a stand-in file header: the real names, quoting
# and git extended headers are read by the parser.
_UNIDIFF_FILE_HEADER = ("--- a\n", "+++ b\n")
_UNIDIFF_NO_NEWLINE = "\\ No newline at end of file\n"
_HUNK_KINDS: dict[str, HunkLineKind] = {k: k for k in HUNK_LINE_KINDS}

FIX_TIP = (
    "the patch file was cut short or edited by hand; regenerate it "
    "(forkpatch refresh) or fix the hunk and its @@ line counts"
)


class HunkReader:
    """The lines of one patch file, and the reading of the hunks in them; the patch
    parser (:mod:`forkpatch.patchfile.parser`) reads everything around the hunks."""

    def __init__(self, data: bytes, source: str) -> None:
        self.data = data
        self.source = source
        self.lines = split_lines(data)
        self.offsets = [0]
        for ln in self.lines:
            self.offsets.append(self.offsets[-1] + len(ln))

    def error(self, index: int, what: str, tip: str | None = FIX_TIP) -> PatchParseError:
        return PatchParseError(f"{self.source} line {index + 1}: {what}", tip=tip)

    def line(self, i: int) -> bytes:
        return self.lines[i] if i < len(self.lines) else b""

    def is_plain_start(self, i: int) -> bool:
        return self.line(i).startswith(b"--- ") and self.line(i + 1).startswith(b"+++ ")

    def parse_hunk(self, i: int, path: str) -> tuple[Hunk, int]:
        """One hunk at line ``i``: our validation of its extent, then unidiff's parse of it."""
        m = _HUNK_HEADER.match(bare_line(self.lines[i]))
        if m is None:
            raise self.error(i, f"bad hunk header {show_line(self.lines[i])} in {path}")
        old_start = int(m.group(1))
        old_len = int(m.group(2)) if m.group(2) is not None else 1
        new_start = int(m.group(3))
        new_len = int(m.group(4)) if m.group(4) is not None else 1
        header = hunk_header(old_start, old_len, new_start, new_len)
        if (old_start == 0 and old_len != 0) or (new_start == 0 and new_len != 0):
            raise self.error(i, f"hunk {header} of {path} starts at line 0 but is not empty")
        end, trailing_marker = self.check_hunk_body(i, header, path, old_len, new_len)
        parsed = self.unidiff_hunk(i, end, trailing_marker, header, path)
        lines = _hunk_lines(parsed)
        hunk = Hunk(old_start, old_len, new_start, new_len, decode_name(m.group(5)), lines or ())
        if (
            lines is None
            or (parsed.source_start, parsed.source_length, parsed.target_start)
            != (old_start, old_len, new_start)
            or parsed.target_length != new_len
            or len(hunk.old_lines) != old_len
            or len(hunk.new_lines) != new_len
        ):
            raise self.error(i, f"unidiff read hunk {header} of {path} differently from forkpatch")
        return hunk, end

    def check_hunk_body(
        self, i: int, header: str, path: str, old_len: int, new_len: int
    ) -> tuple[int, bool]:
        """Validate the body of the hunk whose ``@@`` line is ``i`` against its counts.

        unidiff checks the counts too, but its errors name neither the line nor
        what was found there, and it accepts a misplaced ``\\`` marker; this
        pass gives our precise messages. Returns the index just past the hunk
        (its trailing ``\\ No newline`` marker included) and whether such a
        trailing marker is there.
        """
        old_seen = new_seen = 0
        # Whether the body has a last line and it still ends with a newline: what
        # a "\\ No newline at end of file" marker needs.
        last_nl = False
        i += 1
        n = len(self.lines)
        while old_seen < old_len or new_seen < new_len:
            if i >= n:
                raise self.truncated(
                    n - 1 if n else 0, header, path, old_seen, old_len, new_seen, new_len
                )
            ln = self.lines[i]
            kind = ln[:1]
            if kind == b"\\":
                if not last_nl:
                    raise self.misplaced(i, header, path)
                last_nl = False
                i += 1
                continue
            if ln in (b"\n", b"\r\n"):
                # An empty line stands for an empty context line (editors strip the space).
                kind, ln = b" ", b" " + ln
            if kind == b" ":
                if old_seen >= old_len or new_seen >= new_len:
                    raise self.overflow(i, header, path, ln, old_len, new_len)
                old_seen += 1
                new_seen += 1
            elif kind == b"-":
                if old_seen >= old_len:
                    raise self.overflow(i, header, path, ln, old_len, new_len)
                old_seen += 1
            elif kind == b"+":
                if new_seen >= new_len:
                    raise self.overflow(i, header, path, ln, old_len, new_len)
                new_seen += 1
            elif ln.startswith((b"@@", b"diff --git ")) or self.is_plain_start(i):
                raise self.truncated(i, header, path, old_seen, old_len, new_seen, new_len)
            else:
                raise self.error(
                    i,
                    f"unexpected line {show_line(ln)} in hunk {header} of {path}: every hunk line "
                    f"must start with ' ', '-' or '+' ({old_seen} of {old_len} old and "
                    f"{new_seen} of {new_len} new lines read so far)",
                )
            last_nl = ln.endswith(b"\n")
            i += 1
        if i < n and self.lines[i].startswith(b"\\"):
            if not last_nl:
                raise self.misplaced(i, header, path)
            return i + 1, True
        return i, False

    def unidiff_hunk(
        self, i: int, end: int, trailing_marker: bool, header: str, path: str
    ) -> UnidiffHunk:
        """unidiff's parse of the (already validated) hunk on lines ``i`` to ``end - 1``.

        The lines go in as latin-1 text, which maps each byte to one code point
        and back, and as a list (unidiff splits a string with str.splitlines(),
        which also breaks at \\r, form feeds, \\x1c-\\x1e and \\x85).
        """
        text = [ln.decode("latin-1") for ln in self.lines[i:end]]
        if trailing_marker:
            # unidiff recognises a marker after the last counted line only in
            # English; we take any "\\" line there, as in the body.
            text[-1] = _UNIDIFF_NO_NEWLINE
        try:
            patched = PatchSet([*_UNIDIFF_FILE_HEADER, *text])
            if len(patched) == 1 and len(patched[0]) == 1:
                hunk: UnidiffHunk = patched[0][0]
                return hunk
            problem = f"{sum(len(f) for f in patched)} hunks instead of 1"
        except UnidiffParseError as exc:
            problem = str(exc)
        except Exception as exc:
            problem = f"{type(exc).__name__}: {exc}"
        raise self.error(
            i, f"unidiff cannot parse hunk {header} of {path}: {show_line(problem.encode())}"
        )

    def misplaced(self, i: int, header: str, path: str) -> PatchParseError:
        return self.error(i, f"misplaced {show_line(self.lines[i])} in hunk {header} of {path}")

    def truncated(
        self,
        i: int,
        header: str,
        path: str,
        old_seen: int,
        old_len: int,
        new_seen: int,
        new_len: int,
    ) -> PatchParseError:
        if old_seen < old_len:
            got = f"{old_seen} of {old_len} old lines"
        else:
            got = f"{new_seen} of {new_len} new lines"
        return self.error(i, f"hunk {header} of {path} ends after {got} (truncated patch?)")

    def overflow(
        self, i: int, header: str, path: str, ln: bytes, old_len: int, new_len: int
    ) -> PatchParseError:
        return self.error(
            i,
            f"hunk {header} of {path} has more lines than its header counts "
            f"({old_len} old, {new_len} new): {show_line(ln)}",
        )


def _hunk_lines(hunk: UnidiffHunk) -> tuple[HunkLine, ...] | None:
    """Our lines from unidiff's, or None when they are not what we validated.

    A ``\\ No newline at end of file`` line (unidiff's line type ``"\\"``) is
    not a line of ours: it takes the newline off the line before it.
    """
    body: list[HunkLine] = []
    for ln in hunk:
        kind = ln.line_type
        ours = _HUNK_KINDS.get(kind)
        if ours is not None:
            body.append(HunkLine(ours, ln.value.encode("latin-1")))
        elif kind == "\\" and body and body[-1].text.endswith(b"\n"):
            last = body[-1]
            body[-1] = HunkLine(last.kind, last.text[:-1])
        else:
            return None
    return tuple(body)
