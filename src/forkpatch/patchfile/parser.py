"""Patch files parsed: the description header, then each file section of the diff.

A patch file (``patches/<slug>.patch``) is free-form description text followed by
a diff. The diff is normally what ``git diff-tree -p --full-index --binary``
prints, but plain unified diffs (``diff -u``, quilt, ``-p0`` or ``-p1`` paths)
are accepted too, so that imported patches need no conversion.

Everything works on bytes. Lines are split on ``b"\\n"`` only: a CRLF file's
``\\r``, form feeds and invalid UTF-8 in file content survive untouched, and each
file section keeps its exact input bytes (``FilePatch.raw``) so that a patch
round-trips byte for byte.

Everything around the hunks is read here, because unidiff does not model it or
not closely enough: the description header, git extended headers (modes,
renames, copies, similarity, ``index``), binary sections, C-quoted names,
``-p0``/``-p1`` detection for plain diffs, ``diff -N`` epoch timestamps, and where
a hunk ends and a section ends. The hunks themselves are read by
:class:`forkpatch.patchfile.hunks.HunkReader`, which checks each one against its
``@@`` counts before unidiff parses it. Every malformed patch gets a
:class:`PatchParseError` naming the file, the 1-based line and what was expected.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

from forkpatch.errors import PatchEncodingError, PatchParseError, PathSafetyError
from forkpatch.patchfile.binary import decode_binary_block
from forkpatch.patchfile.hunks import HunkReader
from forkpatch.patchfile.lines import MBOX_SEPARATOR, bare_line, show_line
from forkpatch.patchfile.model import (
    DEV_NULL,
    FILE_MODES,
    MAX_NAME_BYTES,
    MAX_PATH_BYTES,
    FilePatch,
    Hunk,
    PatchFile,
    normalise_header,
)
from forkpatch.patchfile.names import (
    decode_name,
    parse_git_names,
    should_strip,
    strip_prefix,
    unquote,
)

_ZERO_OID = re.compile(r"\A0+\Z")
_INDEX_LINE = re.compile(rb"\Aindex ([0-9a-fA-F]+)\.\.([0-9a-fA-F]+)(?: ([0-7]+))?\Z")
_MODE = re.compile(rb"\A[0-7]{6}\Z")
_MODE_PROBLEMS = {
    "160000": "mode 160000 is a submodule (gitlink), which forkpatch does not patch",
    "040000": "mode 040000 is a directory, not a file",
    "000000": "mode 000000 is not a file mode",
}

# Lines a plain (non-git) diff tool prints before a file's ---/+++ pair.
_PLAIN_PREFIX = re.compile(rb"\A(?:Index: |={10,}\Z|diff |Only in |Binary files )")


@dataclass
class _Section:
    """Mutable fields of a file section while its lines are read."""

    old_path: str | None = None
    new_path: str | None = None
    old_mode: str | None = None
    new_mode: str | None = None
    old_oid: str | None = None
    new_oid: str | None = None
    is_binary: bool = False
    is_rename: bool = False
    is_copy: bool = False
    similarity: int | None = None
    hunks: tuple[Hunk, ...] = ()
    mode_from_index: bool = False

    def build(self, raw: bytes) -> FilePatch:
        added, removed = _counts(self.hunks)
        return FilePatch(
            old_path=self.old_path,
            new_path=self.new_path,
            old_mode=self.old_mode,
            new_mode=self.new_mode,
            old_oid=self.old_oid,
            new_oid=self.new_oid,
            is_binary=self.is_binary,
            is_rename=self.is_rename,
            is_copy=self.is_copy,
            similarity=self.similarity,
            hunks=self.hunks,
            added=added,
            removed=removed,
            raw=raw,
            mode_from_index=self.mode_from_index,
        )


class _Parser(HunkReader):
    """Single-pass parser over the lines of one patch file."""

    def __init__(self, data: bytes, source: str, strip: int | None = None) -> None:
        super().__init__(data, source)
        self.strip = None if strip is None else bool(strip)  # None: read from the names

    def is_section_start(self, i: int) -> bool:
        return self.line(i).startswith(b"diff --git ") or self.is_plain_start(i)

    def at_section(self, i: int) -> bool:
        """Whether a file section starts at line ``i`` (its plain prefix lines included)."""
        if self.line(i).startswith(b"diff --git "):
            return True
        while i < len(self.lines) and _PLAIN_PREFIX.match(bare_line(self.lines[i])):
            i += 1
        return self.is_plain_start(i)

    def plain_prefix_start(self, i: int, floor: int) -> int:
        """Walk back from a ``---`` line over ``Index:``/``====``/``diff -u`` lines."""
        while i > floor and _PLAIN_PREFIX.match(bare_line(self.lines[i - 1])):
            i -= 1
        return i

    # -- top level

    def parse(self) -> PatchFile:
        first = self.find_first_section()
        header_bytes = self.data[: self.offsets[first]]
        header = self.decode_header(header_bytes)
        files: list[FilePatch] = []
        i = first
        n = len(self.lines)
        while i < n:
            start = i
            if self.line(i).startswith(b"diff --git "):
                section, i = self.parse_git_section(i)
            else:
                section, i = self.parse_plain_section(i)
            self.check_names(section, start)
            if i < n and not self.at_section(i):
                i = self.skip_junk(i)  # text after a section belongs to it
            files.append(section.build(self.data[self.offsets[start] : self.offsets[i]]))
        return PatchFile(
            header=normalise_header(header),
            files=tuple(files),
            source=self.source,
            diff=self.data[self.offsets[first] :],
        )

    def find_first_section(self) -> int:
        for i, ln in enumerate(self.lines):
            if ln.startswith(b"diff --git "):
                return i
            if ln.startswith(b"--- "):
                if self.line(i + 1).startswith(b"+++ "):
                    return self.plain_prefix_start(i, 0)
                if self.line(i + 1).startswith(b"@@ -"):
                    raise self.error(i + 1, f"expected a '+++' line after {show_line(ln)}")
        return len(self.lines)

    def decode_header(self, header: bytes) -> str:
        try:
            return header.decode("utf-8")
        except UnicodeDecodeError as exc:
            bad_line = header.count(b"\n", 0, exc.start)
            raise PatchEncodingError(
                f"{self.source} line {bad_line + 1}: the description header is not valid UTF-8",
                tip="re-save the description part of the patch as UTF-8",
            ) from None

    # -- git sections

    def parse_git_section(self, i: int) -> tuple[_Section, int]:
        diff_line = i
        names = parse_git_names(bare_line(self.lines[i])[len(b"diff --git ") :])
        if names is None:
            raise self.error(i, f"cannot read the file names in {show_line(self.lines[i])}")
        a_raw, b_raw = names
        strip = should_strip(a_raw, b_raw) if self.strip is None else self.strip
        a_name = strip_prefix(a_raw, strip)
        b_name = strip_prefix(b_raw, strip)
        f = _Section()
        created = deleted = False
        from_name: str | None = None
        to_name: str | None = None
        minus: str | None = None
        plus: str | None = None
        have_names = False
        hunks: tuple[Hunk, ...] = ()
        i += 1
        n = len(self.lines)
        while i < n:
            ln = self.lines[i]
            bare = bare_line(ln)
            if ln.startswith(b"diff --git "):
                break
            if bare.startswith(b"old mode "):
                if f.mode_from_index:
                    f.new_mode, f.mode_from_index = None, False
                f.old_mode = self.mode(i, bare[9:])
            elif bare.startswith(b"new mode "):
                if f.mode_from_index:
                    f.old_mode, f.mode_from_index = None, False
                f.new_mode = self.mode(i, bare[9:])
            elif bare.startswith(b"new file mode "):
                created = True
                f.new_mode = self.mode(i, bare[14:])
            elif bare.startswith(b"deleted file mode "):
                deleted = True
                f.old_mode = self.mode(i, bare[18:])
            elif bare.startswith((b"similarity index ", b"dissimilarity index ")):
                pct = bare.split(b" ")[-1]
                if not (pct.endswith(b"%") and pct[:-1].isdigit()):
                    raise self.error(i, f"bad similarity in {show_line(ln)}")
                if bare.startswith(b"similarity"):
                    f.similarity = int(pct[:-1])
            elif bare.startswith((b"rename from ", b"copy from ")):
                f.is_rename = f.is_rename or bare.startswith(b"rename")
                f.is_copy = f.is_copy or bare.startswith(b"copy")
                from_name = self.name_after(i, bare, bare.index(b" from ") + 6)
            elif bare.startswith((b"rename to ", b"copy to ")):
                f.is_rename = f.is_rename or bare.startswith(b"rename")
                f.is_copy = f.is_copy or bare.startswith(b"copy")
                to_name = self.name_after(i, bare, bare.index(b" to ") + 4)
            elif bare.startswith(b"index "):
                m = _INDEX_LINE.match(bare)
                if m is None:
                    raise self.error(i, f"cannot read {show_line(ln)}")
                f.old_oid = _oid(m.group(1))
                f.new_oid = _oid(m.group(2))
                if m.group(3):
                    mode = self.mode(i, m.group(3))
                    if f.old_mode is None and f.new_mode is None:
                        f.old_mode = f.new_mode = mode
                        f.mode_from_index = True
            elif bare == b"GIT binary patch":
                f.is_binary = True
                i = self.skip_binary(i + 1)
                break
            elif bare.startswith(b"Binary files ") and bare.endswith(b" differ"):
                f.is_binary = True
                i += 1
                break
            elif ln.startswith(b"--- "):
                if not self.line(i + 1).startswith(b"+++ "):
                    raise self.error(i + 1, f"expected a '+++' line after {show_line(ln)}")
                minus = self.header_name(i, strip)
                plus = self.header_name(i + 1, strip)
                have_names = True
                i += 2
                if self.line(i).startswith(b"GIT binary patch"):
                    continue
                hunks, i = self.parse_hunks(i, plus or minus or b_name)
                break
            elif ln.startswith(b"@@"):
                raise self.error(i, "hunk without '---' and '+++' file name lines before it")
            elif bare == b"" or self.is_trailer(i):
                i = self.skip_junk(i)
                break
            else:
                section = show_line(self.lines[diff_line])
                raise self.error(
                    i, f"unexpected line in the git header of {section}: {show_line(ln)}"
                )
            i += 1

        old_path: str | None = from_name or (minus if have_names else a_name)
        new_path: str | None = to_name or (plus if have_names else b_name)
        if created or (have_names and minus is None):
            old_path = None
        if deleted or (have_names and plus is None):
            new_path = None
        if old_path is None and new_path is None:
            raise self.error(diff_line, "a file section with neither an old nor a new name")
        f.old_path, f.new_path, f.hunks = old_path, new_path, hunks
        if created:
            f.old_mode = None
        if deleted:
            f.new_mode = None
        return f, i

    def mode(self, i: int, text: bytes) -> str:
        if not _MODE.match(text):
            raise self.error(i, f"bad file mode {show_line(text)}")
        mode = text.decode("ascii")
        if mode not in FILE_MODES:
            raise self.error(
                i,
                _MODE_PROBLEMS.get(mode, f"mode {mode} is not a git file mode")
                + " (forkpatch applies 100644, 100755 and 120000)",
                tip="regenerate the patch with `git diff` / `git format-patch`, or drop "
                "this file from it",
            )
        return mode

    def check_names(self, section: _Section, start: int) -> None:
        """Names a file system (and so git's checkout) cannot hold, refused here with the
        patch and line, not later as an error of git's that names neither."""
        for path in (section.old_path, section.new_path):
            if path is None:
                continue
            raw = path.encode("utf-8", "surrogateescape")
            if len(raw) > MAX_PATH_BYTES:
                raise self.error(
                    start,
                    f"the path {show_line(raw, 60)} is {len(raw)} bytes long; file systems "
                    f"take at most {MAX_PATH_BYTES}",
                    tip="shorten the file name in the patch",
                )
            for part in raw.split(b"/"):
                if len(part) > MAX_NAME_BYTES:
                    raise self.error(
                        start,
                        f"the file name {show_line(part, 60)} in {show_line(raw, 60)} is "
                        f"{len(part)} bytes long; file systems take at most {MAX_NAME_BYTES}",
                        tip="shorten the file name in the patch",
                    )

    def name_after(self, i: int, bare: bytes, pos: int) -> str:
        """A name at the end of a ``rename from``-style line (no a/ b/ prefix)."""
        rest = bare[pos:]
        if rest.startswith(b'"'):
            got = unquote(rest, 0)
            if got is None or got[1] != len(rest):
                raise self.error(i, f"badly quoted name in {show_line(bare)}")
            rest = got[0]
        if not rest:
            raise self.error(i, f"missing file name in {show_line(bare)}")
        return decode_name(rest)

    def header_name(self, i: int, strip: bool | None, otherwise: bool | None = None) -> str | None:
        """The name on a ``---``/``+++`` line; None for /dev/null.

        ``strip`` None means: decide per side (a/ on ---, b/ on +++), else
        ``otherwise``.
        """
        bare = bare_line(self.lines[i])
        rest = bare[4:]
        if rest.startswith(b'"'):
            got = unquote(rest, 0)
            if got is None:
                raise self.error(i, f"badly quoted name in {show_line(bare)}")
            name = got[0]
        else:
            name = rest.split(b"\t", 1)[0]
        if not name:
            raise self.error(i, f"missing file name in {show_line(bare)}")
        text = decode_name(name)
        if text == DEV_NULL:
            return None
        if strip is None:
            strip = text.startswith("a/" if bare.startswith(b"---") else "b/") or bool(otherwise)
        return strip_prefix(text, strip)

    @cached_property
    def file_strip(self) -> bool | None:
        """For a plain section with /dev/null on one side (a file created or deleted):
        the level the file's sections with two names have (quilt's ``pkg.orig/x``
        ``pkg/x`` is -p1, so is its ``--- /dev/null`` ``+++ pkg/new``), as a tool that
        applies the whole file at one level reads it; None when none has two names."""
        for i, ln in enumerate(self.lines[:-1]):
            if ln.startswith(b"--- ") and self.lines[i + 1].startswith(b"+++ "):
                try:
                    a, b = self.header_name(i, False), self.header_name(i + 1, False)
                except PatchParseError:
                    continue  # hunk lines that look like names ("-- x" removed)
                if a is not None and b is not None:
                    return should_strip(a, b)
        return None

    def epoch_stamp(self, i: int) -> bool:
        """Whether a ``---``/``+++`` line carries the 1970 timestamp of a missing file."""
        _, tab, stamp = bare_line(self.lines[i]).partition(b"\t")
        return bool(tab) and stamp.startswith((b"1970-01-01 ", b"1969-12-31 ", b"Thu Jan  1 "))

    def skip_binary(self, i: int) -> int:
        """Skip a ``GIT binary patch`` body (literal/delta blocks, base85 lines),
        checking that each block decodes to the size its header line states: a
        damaged block is an error of the file at its line, not a conflict later."""
        n = len(self.lines)
        start = i
        while i < n and not self.lines[i].startswith(b"diff --git ") and not self.is_trailer(i):
            i += 1
        self.check_binary_blocks(start, i)
        return i

    def check_binary_blocks(self, start: int, end: int) -> None:
        i = start
        while i < end:
            head = bare_line(self.lines[i])
            if not head:
                i += 1
                continue
            kind, _, size = head.partition(b" ")
            if kind not in (b"literal", b"delta") or not size.isdigit():
                if i == start:
                    raise self.error(
                        i, f"expected 'literal N' or 'delta N', found {show_line(head)}"
                    )
                return  # text after the blocks (a diffstat-less trailer, junk): not ours
            j = i + 1
            while j < end and bare_line(self.lines[j]):
                j += 1
            try:
                data = decode_binary_block(
                    [bare_line(ln) for ln in self.lines[i + 1 : j]], limit=int(size)
                )
            except ValueError as exc:
                raise self.error(i, f"{kind.decode()} block: {exc}") from None
            if len(data) != int(size):
                raise self.error(
                    i, f"{kind.decode()} block holds {len(data)} bytes, its header says {int(size)}"
                )
            i = j

    def is_trailer(self, i: int) -> bool:
        """format-patch's ``-- `` signature line: everything after it is not diff."""
        return bare_line(self.line(i)) == b"-- "

    def next_mail(self, i: int) -> int | None:
        """The first file section of a next mail, when the text from ``i`` on (after a
        ``-- `` signature, or in place of one) holds an mbox ``From`` line and a mail
        with a diff: several ``git format-patch`` mails in one file, which ``patch``
        and quilt apply as one patch. None when there is none."""
        n = len(self.lines)
        k = next((k for k in range(i, n) if MBOX_SEPARATOR.match(self.lines[k])), None)
        if k is None:
            return None
        for m in range(k + 1, n):
            if self.lines[m].startswith(b"diff --git "):
                return m
            if self.is_plain_start(m):
                return self.plain_prefix_start(m, k + 1)
        return None

    def skip_junk(self, i: int) -> int:
        """Skip text between sections up to the next section (or the end)."""
        n = len(self.lines)
        if self.is_trailer(i):
            return self.next_mail(i) or n
        first = i
        while i < n:
            ln = self.lines[i]
            if ln.startswith(b"diff --git "):
                return i
            if self.is_plain_start(i):
                return self.plain_prefix_start(i, first)
            if self.is_trailer(i) or MBOX_SEPARATOR.match(ln):
                return self.next_mail(i) or n
            if ln[:1] in (b" ", b"+", b"-", b"@"):
                raise self.error(i, f"unexpected diff line between file sections: {show_line(ln)}")
            i += 1
        return i

    # -- plain sections

    def parse_plain_section(self, i: int) -> tuple[_Section, int]:
        while i < len(self.lines) and not self.line(i).startswith(b"--- "):
            i += 1  # Index: / ==== / diff -u lines, already recognised by at_section()
        a_raw = self.header_name(i, False)
        b_raw = self.header_name(i + 1, False)
        strip: bool | None = (
            self.strip
            if self.strip is not None
            else None
            if a_raw is None or b_raw is None
            else should_strip(a_raw, b_raw)
        )
        # A created or deleted file: git's a/ or b/ on its side, else the file's level.
        level = self.file_strip if strip is None else None
        old_path = self.header_name(i, strip, level)
        new_path = self.header_name(i + 1, strip, level)
        hunks, end = self.parse_hunks(i + 2, new_path or old_path or "?")
        # `diff -N` (quilt) names a missing file with an epoch timestamp, not /dev/null.
        # An empty side alone is no proof: a -U0 hunk "-0,0" inserts at the top.
        if self.epoch_stamp(i) and all(h.old_len == 0 for h in hunks):
            old_path = None
        if self.epoch_stamp(i + 1) and all(h.new_len == 0 for h in hunks):
            new_path = None
        if old_path is not None and new_path is not None:
            old_path = new_path  # a plain diff cannot rename; `--- x.orig` names a backup
        if old_path is None and new_path is None:
            raise self.error(i, "both '---' and '+++' name /dev/null")
        return _Section(old_path=old_path, new_path=new_path, hunks=hunks), end

    # -- hunks

    def parse_hunks(self, i: int, path: str) -> tuple[tuple[Hunk, ...], int]:
        hunks: list[Hunk] = []
        n = len(self.lines)
        while i < n:
            ln = self.lines[i]
            if ln.startswith(b"@@"):
                hunk, i = self.parse_hunk(i, path)
                hunks.append(hunk)
                continue
            if self.is_section_start(i):
                break
            if ln.startswith(b"--- "):
                raise self.error(i + 1, f"expected a '+++' line after {show_line(ln)}")
            if not hunks and ln[:1] in (b" ", b"+", b"-"):
                raise self.error(i, f"diff line before any @@ hunk header: {show_line(ln)}")
            if hunks and ln[:1] in (b" ", b"+", b"-") and not self.is_trailer(i):
                last = hunks[-1]
                raise self.overflow(i, last.header, path, ln, last.old_len, last.new_len)
            i = self.skip_junk(i)
            break
        return tuple(hunks), i


def _oid(text: bytes) -> str | None:
    oid = text.decode("ascii").lower()
    return None if _ZERO_OID.match(oid) else oid


def _counts(hunks: Iterable[Hunk]) -> tuple[int, int]:
    added = removed = 0
    for h in hunks:
        for ln in h.lines:
            if ln.kind == "+":
                added += 1
            elif ln.kind == "-":
                removed += 1
    return added, removed


def parse_patch(data: bytes, *, source: str, strip: int | None = None) -> PatchFile:
    """Parse a patch file (description header + git or plain unified diff).

    ``source`` names the file in error messages. ``strip`` (0 or 1, quilt's -p):
    how many leading components the file names carry; None reads it from the
    names (``a/``/``b/``, or two different top directories, are stripped). Raises :class:`PatchParseError`
    (naming ``source`` and the 1-based line) for anything malformed; never any
    other exception on bad input. Paths are not checked here: call
    :func:`check_paths` before touching a tree.
    """
    try:
        return _Parser(data, source, strip).parse()
    except (PatchParseError, PathSafetyError):
        raise
    except (ValueError, IndexError, UnicodeError) as exc:  # a parser bug: still a clean error
        raise PatchParseError(
            f"{source}: cannot parse the patch ({type(exc).__name__}: {exc})",
            tip="check the diff part of the patch file; please report this as a forkpatch bug",
        ) from exc
