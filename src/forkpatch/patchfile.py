"""Patch files: parse a description header plus a diff, check paths, canonical bytes.

A patch file (``patches/<slug>.patch``) is free-form description text followed by
a diff. The diff is normally what ``git diff-tree -p --full-index --binary``
prints, but plain unified diffs (``diff -u``, quilt, ``-p0`` or ``-p1`` paths)
are accepted too, so that imported patches need no conversion.

Everything works on bytes. Lines are split on ``b"\\n"`` only: a CRLF file's
``\\r``, form feeds and invalid UTF-8 in file content survive untouched, and each
file section keeps its exact input bytes (``FilePatch.raw``) so that a patch
round-trips byte for byte.

Hunk bodies are parsed by unidiff (``unidiff.PatchSet``, public API, the same in
0.7.5 and 1.0.x): each hunk's lines, decoded as latin-1 (one code point per
byte, so the bytes come back exactly) and passed as a list (unidiff would split
a string with ``str.splitlines()``, which also breaks at ``\\r``, form feeds
and ``\\x85``), under a stand-in ``--- a``/``+++ b`` header. Its ``Line``
objects become our ``HunkLine``; a ``\\`` line takes the newline off the line
before it.

Everything around the hunks is ours, because unidiff does not model it or not
closely enough: the description header, git extended headers (modes, renames,
copies, similarity, ``index``), binary sections, C-quoted names, ``-p0``/``-p1``
detection for plain diffs, ``diff -N`` epoch timestamps, and where a hunk ends
and a section ends. Before unidiff sees a hunk, our validator checks its body
against the ``@@`` counts: unidiff's errors name neither the input line nor
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

import base64
import re
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol

from unidiff.errors import UnidiffParseError
from unidiff.patch import Hunk as UnidiffHunk
from unidiff.patch import PatchSet

from forkpatch.errors import PatchEncodingError, PatchParseError, PathSafetyError
from forkpatch.fsutil import relpath_problem

__all__ = [
    "FilePatch",
    "Hunk",
    "HunkLine",
    "PatchFile",
    "check_path",
    "check_paths",
    "format_patch",
    "normalise_header",
    "parse_patch",
    "quote_path",
    "render_file_patch",
    "split_lines",
    "split_mails",
    "upstream_refs",
]

DEV_NULL = "/dev/null"
_ZERO_OID = re.compile(r"\A0+\Z")
_HUNK_HEADER = re.compile(rb"\A@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@ ?(.*)\Z", re.DOTALL)
_INDEX_LINE = re.compile(rb"\Aindex ([0-9a-fA-F]+)\.\.([0-9a-fA-F]+)(?: ([0-7]+))?\Z")
_MODE = re.compile(rb"\A[0-7]{6}\Z")
#: The modes of files git keeps and forkpatch applies: regular, executable, symlink.
FILE_MODES = ("100644", "100755", "120000")
_MODE_PROBLEMS = {
    "160000": "mode 160000 is a submodule (gitlink), which forkpatch does not patch",
    "040000": "mode 040000 is a directory, not a file",
    "000000": "mode 000000 is not a file mode",
}
#: Limits of common file systems (NAME_MAX and PATH_MAX - 1 on Linux), in UTF-8 bytes.
MAX_NAME_BYTES = 255
MAX_PATH_BYTES = 4095
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


# Lines a plain (non-git) diff tool prints before a file's ---/+++ pair.
_PLAIN_PREFIX = re.compile(rb"\A(?:Index: |={10,}\Z|diff |Only in |Binary files )")

# unidiff gets each hunk under a stand-in file header: the real names, quoting
# and git extended headers are read by us (see the module docstring).
_UNIDIFF_FILE_HEADER = ("--- a\n", "+++ b\n")
_UNIDIFF_NO_NEWLINE = "\\ No newline at end of file\n"
_HUNK_KINDS = frozenset(" -+")

_FIX_TIP = (
    "the patch file was cut short or edited by hand; regenerate it "
    "(forkpatch refresh) or fix the hunk and its @@ line counts"
)


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class HunkLine:
    """One line of a hunk body.

    ``kind`` is ``' '`` (context), ``'-'`` (removed) or ``'+'`` (added). ``text``
    is the line content with its original ending (``b"\\n"`` or ``b"\\r\\n"``);
    without one when a ``\\ No newline at end of file`` marker followed it.
    """

    kind: str
    text: bytes


@dataclass(frozen=True)
class Hunk:
    """One ``@@ -old_start,old_len +new_start,new_len @@ section`` hunk."""

    old_start: int
    old_len: int
    new_start: int
    new_len: int
    section: str
    lines: tuple[HunkLine, ...]

    @cached_property
    def old_lines(self) -> tuple[bytes, ...]:
        """The pre-image lines: context and removed lines, in order."""
        return tuple(ln.text for ln in self.lines if ln.kind != "+")

    @cached_property
    def new_lines(self) -> tuple[bytes, ...]:
        """The post-image lines: context and added lines, in order."""
        return tuple(ln.text for ln in self.lines if ln.kind != "-")

    @property
    def header(self) -> str:
        """The ``@@ ... @@`` line as git writes it (without the section text)."""
        return (
            f"@@ -{_range(self.old_start, self.old_len)} +{_range(self.new_start, self.new_len)} @@"
        )


@dataclass(frozen=True)
class FilePatch:
    """The changes to one file: a ``diff --git`` section or a plain ``---``/``+++`` one."""

    old_path: str | None
    new_path: str | None
    old_mode: str | None
    new_mode: str | None
    old_oid: str | None
    new_oid: str | None
    is_binary: bool
    is_rename: bool
    is_copy: bool
    similarity: int | None
    hunks: tuple[Hunk, ...]
    added: int
    removed: int
    raw: bytes
    # The modes came only from the ``index`` line: what the author's tree had, not
    # a change the patch makes.
    mode_from_index: bool = False

    @property
    def path(self) -> str:
        """The file's name after the patch (its old name when it is deleted)."""
        path = self.new_path if self.new_path is not None else self.old_path
        assert path is not None  # the parser never builds a FilePatch without a name
        return path

    def mode_after(self, tree_mode: str | None) -> str:
        """The file's mode once the patch is applied to a file of ``tree_mode``.

        ``old mode``/``new mode`` and ``new file mode`` lines change the mode. An
        ``index`` line's mode only records the author's tree (a checkout with
        ``core.fileMode=false`` records 100644 for an executable file): as with
        ``git apply``, the tree's own mode stands then.
        """
        if self.mode_from_index and tree_mode is not None:
            return tree_mode
        return self.new_mode or tree_mode or "100644"

    def index_mode_differs(self, tree_mode: str | None) -> bool:
        """The ``index`` line names another mode than the tree has (kept, see
        :meth:`mode_after`)."""
        return bool(self.mode_from_index and tree_mode and self.new_mode != tree_mode)

    @property
    def is_delete(self) -> bool:
        return self.new_path is None


@dataclass(frozen=True)
class PatchFile:
    """A parsed patch file: description header plus the file sections of its diff."""

    header: str
    files: tuple[FilePatch, ...]
    source: str
    diff: bytes

    @property
    def added(self) -> int:
        return sum(f.added for f in self.files)

    @property
    def removed(self) -> int:
        return sum(f.removed for f in self.files)

    @property
    def paths(self) -> tuple[str, ...]:
        """Every path the patch touches, old and new names, first-seen order, no repeats."""
        seen: dict[str, None] = {}
        for f in self.files:
            for p in (f.old_path, f.new_path):
                if p is not None:
                    seen.setdefault(p, None)
        return tuple(seen)


# ---------------------------------------------------------------------- canonical


def normalise_header(header: str) -> str:
    """The header as stored: trailing blank / whitespace-only lines and trailing spaces removed."""
    return header.rstrip()


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


def format_patch(header: str, diff: bytes) -> bytes:
    """Canonical bytes of a patch file: header, one blank line, the diff.

    Same inputs give the same bytes, and ``parse_patch(format_patch(h, d))``
    gives back ``normalise_header(h)`` and ``d``. A header-only patch (empty
    diff) is the header and one newline.
    """
    text = normalise_header(header)
    if not text:
        return diff
    head = text.encode("utf-8", "surrogateescape")
    if not diff:
        return head + b"\n"
    return head + b"\n\n" + diff


# ---------------------------------------------------------------------- path safety

# Code points HFS+ ignores when comparing names (git's is_hfs_dotgit list), so
# ".g\u200cit" is ".git" there.
_HFS_IGNORABLE = dict.fromkeys(
    [8204, 8205, 8206, 8207, 8234, 8235, 8236, 8237, 8238, *list(range(8298, 8304)), 65279]
)


def _is_dotgit(component: str) -> bool:
    """Whether a path component names the ``.git`` directory on some filesystem."""
    name = component.translate(_HFS_IGNORABLE).lower()
    name = name.split(":", 1)[0]  # NTFS alternate data streams: ".git::$INDEX_ALLOCATION"
    name = name.rstrip(" .")  # Windows drops trailing dots and spaces
    return name in (".git", "git~1")


def check_path(path: str, *, source: str) -> None:
    """Refuse a path that could write outside the fork tree or into ``.git``.

    This is a lexical check of one repository-relative path; symlinks in the
    tree are checked by the engine. Raises :class:`PathSafetyError` naming
    ``source``, the path and the reason.
    """
    reason = _path_problem(path)
    if reason is not None:
        raise PathSafetyError(
            f"{source}: unsafe path {path!r}: {reason}",
            tip="a patch may only touch files inside the fork tree; edit or remove this patch",
        )


def _path_problem(path: str) -> str | None:
    problem = relpath_problem(path)
    if problem is not None:
        return problem
    for component in path.split("/"):
        if _is_dotgit(component):
            return f"it goes into a .git directory ({component!r})"
    return None


def check_paths(patch: PatchFile) -> None:
    """Run :func:`check_path` on every old and new path of ``patch``."""
    for path in patch.paths:
        check_path(path, source=patch.source)


# ---------------------------------------------------------------------- quoting

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


def _unquote(data: bytes, start: int) -> tuple[bytes, int] | None:
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


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


# ---------------------------------------------------------------------- parsing


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


def _bare(line: bytes) -> bytes:
    """A structural line without its ending (b"\\n", b"\\r\\n")."""
    if line.endswith(b"\n"):
        line = line[:-1]
    if line.endswith(b"\r"):
        line = line[:-1]
    return line


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


class _Parser:
    """Single-pass parser over the lines of one patch file."""

    def __init__(self, data: bytes, source: str, strip: int | None = None) -> None:
        self.data = data
        self.source = source
        self.strip = None if strip is None else bool(strip)  # None: read from the names
        self.lines = split_lines(data)
        self.offsets = [0]
        for ln in self.lines:
            self.offsets.append(self.offsets[-1] + len(ln))

    # -- helpers

    def error(self, index: int, what: str, tip: str | None = _FIX_TIP) -> PatchParseError:
        return PatchParseError(f"{self.source} line {index + 1}: {what}", tip=tip)

    def line(self, i: int) -> bytes:
        return self.lines[i] if i < len(self.lines) else b""

    def is_plain_start(self, i: int) -> bool:
        return self.line(i).startswith(b"--- ") and self.line(i + 1).startswith(b"+++ ")

    def is_section_start(self, i: int) -> bool:
        return self.line(i).startswith(b"diff --git ") or self.is_plain_start(i)

    def at_section(self, i: int) -> bool:
        """Whether a file section starts at line ``i`` (its plain prefix lines included)."""
        if self.line(i).startswith(b"diff --git "):
            return True
        while i < len(self.lines) and _PLAIN_PREFIX.match(_bare(self.lines[i])):
            i += 1
        return self.is_plain_start(i)

    def plain_prefix_start(self, i: int, floor: int) -> int:
        """Walk back from a ``---`` line over ``Index:``/``====``/``diff -u`` lines."""
        while i > floor and _PLAIN_PREFIX.match(_bare(self.lines[i - 1])):
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
        names = _parse_git_names(_bare(self.lines[i])[len(b"diff --git ") :])
        if names is None:
            raise self.error(i, f"cannot read the file names in {show_line(self.lines[i])}")
        a_raw, b_raw = names
        strip = _should_strip(a_raw, b_raw) if self.strip is None else self.strip
        a_name = _strip(a_raw, strip)
        b_name = _strip(b_raw, strip)
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
            bare = _bare(ln)
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
            got = _unquote(rest, 0)
            if got is None or got[1] != len(rest):
                raise self.error(i, f"badly quoted name in {show_line(bare)}")
            rest = got[0]
        if not rest:
            raise self.error(i, f"missing file name in {show_line(bare)}")
        return _decode(rest)

    def header_name(self, i: int, strip: bool | None, otherwise: bool | None = None) -> str | None:
        """The name on a ``---``/``+++`` line; None for /dev/null.

        ``strip`` None means: decide per side (a/ on ---, b/ on +++), else
        ``otherwise``.
        """
        bare = _bare(self.lines[i])
        rest = bare[4:]
        if rest.startswith(b'"'):
            got = _unquote(rest, 0)
            if got is None:
                raise self.error(i, f"badly quoted name in {show_line(bare)}")
            name = got[0]
        else:
            name = rest.split(b"\t", 1)[0]
        if not name:
            raise self.error(i, f"missing file name in {show_line(bare)}")
        text = _decode(name)
        if text == DEV_NULL:
            return None
        if strip is None:
            strip = text.startswith("a/" if bare.startswith(b"---") else "b/") or bool(otherwise)
        return _strip(text, strip)

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
                    return _should_strip(a, b)
        return None

    def epoch_stamp(self, i: int) -> bool:
        """Whether a ``---``/``+++`` line carries the 1970 timestamp of a missing file."""
        _, tab, stamp = _bare(self.lines[i]).partition(b"\t")
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
            head = _bare(self.lines[i])
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
            while j < end and _bare(self.lines[j]):
                j += 1
            try:
                data = decode_binary_block(
                    [_bare(ln) for ln in self.lines[i + 1 : j]], limit=int(size)
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
        return _bare(self.line(i)) == b"-- "

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
            else _should_strip(a_raw, b_raw)
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
                raise self.error(
                    i,
                    f"hunk {last.header} of {path} has more lines than its header counts "
                    f"({last.old_len} old, {last.new_len} new): {show_line(ln)}",
                )
            i = self.skip_junk(i)
            break
        return tuple(hunks), i

    def parse_hunk(self, i: int, path: str) -> tuple[Hunk, int]:
        """One hunk at line ``i``: our validation of its extent, then unidiff's parse of it."""
        m = _HUNK_HEADER.match(_bare(self.lines[i]))
        if m is None:
            raise self.error(i, f"bad hunk header {show_line(self.lines[i])} in {path}")
        old_start = int(m.group(1))
        old_len = int(m.group(2)) if m.group(2) is not None else 1
        new_start = int(m.group(3))
        new_len = int(m.group(4)) if m.group(4) is not None else 1
        header = f"@@ -{_range(old_start, old_len)} +{_range(new_start, new_len)} @@"
        if (old_start == 0 and old_len != 0) or (new_start == 0 and new_len != 0):
            raise self.error(i, f"hunk {header} of {path} starts at line 0 but is not empty")
        end, trailing_marker = self.check_hunk_body(i, header, path, old_len, new_len)
        parsed = self.unidiff_hunk(i, end, trailing_marker, header, path)
        lines = _hunk_lines(parsed)
        hunk = Hunk(old_start, old_len, new_start, new_len, _decode(m.group(5)), lines or ())
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


def show_line(line: bytes, limit: int = 80) -> str:
    """A line of a file for a message: text in quotes (never a bytes repr), its line
    ending dropped, undecodable bytes and control characters escaped, shortened."""
    text = _bare(line).decode("utf-8", "backslashreplace")
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return repr(text)


def _hunk_lines(hunk: UnidiffHunk) -> tuple[HunkLine, ...] | None:
    """Our lines from unidiff's, or None when they are not what we validated.

    A ``\\ No newline at end of file`` line (unidiff's line type ``"\\"``) is
    not a line of ours: it takes the newline off the line before it.
    """
    body: list[HunkLine] = []
    for ln in hunk:
        kind = ln.line_type
        if kind in _HUNK_KINDS:
            body.append(HunkLine(kind, ln.value.encode("latin-1")))
        elif kind == "\\" and body and body[-1].text.endswith(b"\n"):
            last = body[-1]
            body[-1] = HunkLine(last.kind, last.text[:-1])
        else:
            return None
    return tuple(body)


def _range(start: int, length: int) -> str:
    return str(start) if length == 1 else f"{start},{length}"


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


def _should_strip(a: str, b: str) -> bool:
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


def _strip(name: str, strip: bool) -> str:
    if strip and "/" in name:
        return name.split("/", 1)[1]
    return name


def _parse_git_names(rest: bytes) -> tuple[str, str] | None:
    """The two names of a ``diff --git A B`` line (quoted or not, possibly with spaces)."""
    if rest.startswith(b'"'):
        got = _unquote(rest, 0)
        if got is None or rest[got[1] : got[1] + 1] != b" ":
            return None
        first, pos = got
        second_raw = rest[pos + 1 :]
        if second_raw.startswith(b'"'):
            got2 = _unquote(second_raw, 0)
            if got2 is None or got2[1] != len(second_raw):
                return None
            second_raw = got2[0]
        return (_decode(first), _decode(second_raw)) if second_raw else None
    if rest.endswith(b'"'):
        pos = rest.find(b' "')
        while pos != -1:
            got = _unquote(rest, pos + 1)
            if got is not None and got[1] == len(rest):
                return _decode(rest[:pos]), _decode(got[0])
            pos = rest.find(b' "', pos + 1)
        return None
    # Unquoted, possibly with spaces: git writes the same name twice, so split in
    # the middle when the two halves agree past their prefixes.
    if len(rest) % 2 == 1:
        half = len(rest) // 2
        a, b = rest[:half], rest[half + 1 :]
        if rest[half : half + 1] == b" " and a.split(b"/", 1)[-1] == b.split(b"/", 1)[-1]:
            return _decode(a), _decode(b)
    pos = rest.find(b" b/")
    if pos == -1:
        pos = rest.find(b" ")
    if pos <= 0:
        return None
    return _decode(rest[:pos]), _decode(rest[pos + 1 :])


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


# ---------------------------------------------------------------------- binary data


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


# ---------------------------------------------------------------------- rendering


def render_file_patch(fp: FilePatch) -> bytes:
    """Git-style text of a file section built from its fields (not from ``raw``).

    Used for patches made in memory (e.g. :func:`forkpatch.applier.reverse`).
    Binary sections come out as a ``Binary files ... differ`` line: the data of
    a ``GIT binary patch`` block is not kept.
    """
    a = fp.old_path if fp.old_path is not None else fp.new_path
    b = fp.new_path if fp.new_path is not None else fp.old_path
    out: list[str] = [f"diff --git {quote_path('a/' + str(a))} {quote_path('b/' + str(b))}\n"]
    if fp.old_path is None:
        out.append(f"new file mode {fp.new_mode or '100644'}\n")
    elif fp.new_path is None:
        out.append(f"deleted file mode {fp.old_mode or '100644'}\n")
    elif fp.old_mode and fp.new_mode and fp.old_mode != fp.new_mode:
        out.append(f"old mode {fp.old_mode}\nnew mode {fp.new_mode}\n")
    if fp.is_rename or fp.is_copy:
        word = "rename" if fp.is_rename else "copy"
        if fp.similarity is not None:
            out.append(f"similarity index {fp.similarity}%\n")
        out.append(f"{word} from {quote_path(str(fp.old_path))}\n")
        out.append(f"{word} to {quote_path(str(fp.new_path))}\n")
    if fp.old_oid or fp.new_oid:
        zero = "0" * 40
        index = f"index {fp.old_oid or zero}..{fp.new_oid or zero}"
        if (
            fp.old_path is not None
            and fp.new_path is not None
            and fp.old_mode == fp.new_mode
            and fp.new_mode
        ):
            index += f" {fp.new_mode}"
        out.append(index + "\n")
    minus = DEV_NULL if fp.old_path is None else quote_path("a/" + fp.old_path)
    plus = DEV_NULL if fp.new_path is None else quote_path("b/" + fp.new_path)
    if fp.is_binary:
        out.append(f"Binary files {minus} and {plus} differ\n")
        return "".join(out).encode("utf-8", "surrogateescape")
    if fp.hunks:
        out.append(f"--- {minus}\n+++ {plus}\n")
    parts = ["".join(out).encode("utf-8", "surrogateescape")]
    for h in fp.hunks:
        section = (" " + h.section) if h.section else ""
        parts.append(f"{h.header}{section}\n".encode("utf-8", "surrogateescape"))
        for ln in h.lines:
            parts.append(ln.kind.encode("ascii") + ln.text)
            if not ln.text.endswith(b"\n"):
                parts.append(b"\n\\ No newline at end of file\n")
    return b"".join(parts)


# ---------------------------------------------------------------------- upstream references

# A commit id: 7 to 64 hex digits standing alone. An abbreviated one must hold a
# letter (so that a bug number or a date is not taken for one).
_COMMIT_ID = re.compile(r"(?<![0-9A-Za-z])([0-9a-fA-F]{7,64})(?![0-9A-Za-z])")
# Lines that name the upstream commit a patch came from, and the group holding it
# (or, for the fields, the value to search for commit ids).
_REF_LINE = re.compile(
    r"^From ([0-9a-f]{40}) "  # a git format-patch mail's mbox line
    r"|\(cherry[ -]picked from commit ([0-9a-fA-F]{7,64})\)"
    r"|^commit ([0-9a-fA-F]{40}) upstream\.?[ \t]*$"  # Linux stable backports
    r"|^\[ *[Uu]pstream commit ([0-9a-fA-F]{7,64}) *\]",
    re.MULTILINE | re.IGNORECASE,
)
_REF_FIELD = re.compile(
    r"^[ \t]*(?:Upstream-Status[ \t]*:[ \t]*(?:Backport|Accepted)\b"
    r"|Origin[ \t]*:[ \t]*(?:upstream|backport)\b|Applied-Upstream[ \t]*:)(.*)$",
    re.MULTILINE | re.IGNORECASE,
)


class _HasUpstream(Protocol):
    upstream_commits: tuple[str, ...]
    origin: str
    upstream: str


def _commit_ids(text: str) -> list[str]:
    out = []
    for m in _COMMIT_ID.finditer(text):
        oid = m.group(1).lower()
        if (len(oid) in (40, 64) or any(c in "abcdef" for c in oid)) and oid.strip("0"):
            out.append(oid)
    return out


def upstream_refs(source: _HasUpstream | str | bytes) -> list[str]:
    """Upstream commit ids a patch names as its origin, first-seen order, no repeats.

    ``source`` is the text of a patch file (or of its header), or a series entry
    (:class:`forkpatch.series.PatchEntry`: its ``upstream-commits`` list, which
    ``import`` fills, plus ids in its ``origin`` and ``upstream`` texts). Found in
    text: a ``From <id> Mon Sep 17 00:00:00 2001`` mail line, ``(cherry picked
    from commit <id>)``, Linux-stable ``commit <id> upstream.`` and ``[ Upstream
    commit <id> ]``, and ids in the values of ``Upstream-Status: Backport|Accepted
    [...]``, DEP-3 ``Origin: upstream|backport, ...`` and ``Applied-Upstream:``
    (URLs such as ``.../commit/<id>`` or ``?id=<id>`` included). The all-zero id
    of ``format-patch --zero-commit`` is never one.

    These are *candidates*: a mail's ``From`` id may name a local commit. Whoever
    uses them (the rebase's upstream evidence) checks that the commit is in the
    target's history.
    """
    if isinstance(source, bytes):
        source = source.decode("utf-8", "surrogateescape")
    found: list[str] = []
    if isinstance(source, str):
        hits = [(m.start(), next(g for g in m.groups() if g)) for m in _REF_LINE.finditer(source)]
        hits += [(m.start(), m.group(1)) for m in _REF_FIELD.finditer(source)]
        for _pos, text in sorted(hits):
            found.extend(_commit_ids(text))
    else:
        found.extend(o.lower() for o in source.upstream_commits)
        texts = [f"Origin: {source.origin}", *source.upstream.split("; ")]
        found.extend(upstream_refs("\n".join(texts)))
    return list(dict.fromkeys(found))
