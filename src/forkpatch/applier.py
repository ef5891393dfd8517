"""Pure-Python hunk application on bytes: exact, with an offset, or with fuzz.

The semantics follow GNU patch and ``git apply``:

* hunks apply in order; each is looked for at its ``@@`` line moved by the
  offset the previous hunks were found at, then outward from there (nearest
  first, the line before, then the line after) over the whole file, but never
  overlapping the region of a previous hunk;
* context must match exactly, bytes and line endings included;
* a hunk with less leading than trailing context is anchored at the start of
  the file, one with less trailing context at its end (the diff had no more
  lines there);
* with ``max_fuzz=N`` and no exact match anywhere, up to N context lines are
  ignored at each end (GNU patch's fuzz factor) and the status is ``'fuzz'``.

Files are split on ``b"\\n"`` only and rebuilt with ``b"".join``; locating a hunk
compares list slices, so a typical patch costs O(size of the file).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from forkpatch.kinds import HUNK_STATUSES, HunkStatus
from forkpatch.patchfile import (
    FilePatch,
    Hunk,
    HunkLine,
    render_file_patch,
    show_line,
    split_lines,
)

__all__ = ["FileApplyResult", "HunkFailed", "HunkResult", "apply_file_patch", "reverse"]

_RANK = {status: rank for rank, status in enumerate(HUNK_STATUSES)}


@dataclass(frozen=True)
class HunkResult:
    """Where and how one hunk applied.

    ``index`` is 1-based (hunk 1 is the first); ``line`` is the 1-based line of
    the original file where the hunk's (possibly fuzz-reduced) old side started;
    ``offset`` is that position minus the one the ``@@`` header gave.
    """

    index: int
    status: HunkStatus
    offset: int
    fuzz: int
    line: int


@dataclass(frozen=True)
class FileApplyResult:
    """The new content of one file (None: the file is deleted) and per-hunk results."""

    content: bytes | None
    status: HunkStatus  # worst of the hunks: 'clean' < 'offset' < 'fuzz'
    hunks: tuple[HunkResult, ...]


class HunkFailed(Exception):
    """A hunk (or the file patch as a whole) does not apply.

    Not a ForkpatchError: the engine turns it into a message or a 3-way merge.
    ``index`` is the 1-based hunk number, 0 when the file as a whole is the
    problem (create onto an existing file, binary patch, ...). ``line`` is the
    1-based line in the original where the hunk was expected (0 if none).
    """

    def __init__(self, index: int, line: int, reason: str) -> None:
        super().__init__(f"hunk {index} at line {line}: {reason}" if index else reason)
        self.index = index
        self.line = line
        self.reason = reason


def apply_file_patch(
    original: bytes | None,
    fp: FilePatch,
    *,
    max_fuzz: int = 0,
    allow_offset: bool = True,
) -> FileApplyResult:
    """Apply one file's hunks to ``original`` (None: the file does not exist).

    Returns the new content (None when the patch deletes the file). Raises
    :class:`HunkFailed` for the first hunk that does not apply, for a binary
    patch (the engine falls back to ``git apply``), for a creation onto an
    existing file, or a change to a missing one.
    """
    if fp.is_binary:
        raise HunkFailed(0, 0, "binary patch: needs git apply")
    if fp.old_path is None:
        if original is not None:
            raise HunkFailed(0, 0, f"{fp.path} already exists but the patch creates it")
        for n, hunk in enumerate(fp.hunks, 1):
            if hunk.old_len:
                raise HunkFailed(n, hunk.old_start, "a hunk of a new file must have no old lines")
        original = b""
    elif original is None:
        raise HunkFailed(0, 0, f"{fp.path} does not exist")
    if not fp.hunks:
        # Mode change, pure rename or copy, creation or deletion of an empty file.
        if fp.new_path is None:
            if original:
                raise HunkFailed(0, 1, f"{fp.path} is not empty but the patch deletes it as empty")
            return FileApplyResult(None, "clean", ())
        return FileApplyResult(original, "clean", ())

    deleting = fp.new_path is None
    lines = split_lines(original)
    content, results = _apply_hunks(lines, fp.hunks, 0 if deleting else max_fuzz, allow_offset)
    status: HunkStatus = max((r.status for r in results), key=_RANK.__getitem__, default="clean")
    if deleting:
        if content:
            raise HunkFailed(
                len(fp.hunks), len(lines), f"{fp.path} has lines the deletion patch does not remove"
            )
        return FileApplyResult(None, status, results)
    return FileApplyResult(content, status, results)


def _apply_hunks(
    lines: list[bytes], hunks: Sequence[Hunk], max_fuzz: int, allow_offset: bool
) -> tuple[bytes, tuple[HunkResult, ...]]:
    pieces: list[bytes] = []
    results: list[HunkResult] = []
    cursor = 0  # end of the previous hunk's region in `lines`; hunks may not go back
    shift = 0  # offset the previous hunk was found at
    for index, hunk in enumerate(hunks, 1):
        found = _locate(lines, hunk, cursor, shift, max_fuzz, allow_offset)
        if found is None:
            expected = max(hunk.old_start + shift, 1)
            raise HunkFailed(index, expected, _why(lines, hunk, cursor, expected, max_fuzz))
        pos, lead, trail, fuzz = found
        old = hunk.old_lines
        new = hunk.new_lines
        end = pos + len(old) - lead - trail
        pieces.extend(lines[cursor:pos])
        pieces.extend(new[lead : len(new) - trail])
        cursor = end
        start = _expected_index(hunk, 0)
        shift = (pos - lead) - start
        status: HunkStatus = "fuzz" if fuzz else ("offset" if shift else "clean")
        results.append(HunkResult(index, status, shift, fuzz, pos - lead + 1))
    pieces.extend(lines[cursor:])
    return b"".join(pieces), tuple(results)


def _expected_index(hunk: Hunk, shift: int) -> int:
    """0-based index in the original where the hunk's old side should start."""
    if hunk.old_len == 0:
        return hunk.old_start + shift  # "-5,0": insert after line 5
    return hunk.old_start - 1 + shift


def _context(hunk: Hunk) -> tuple[int, int]:
    """Number of leading and trailing context lines."""
    body = hunk.lines
    lead = 0
    while lead < len(body) and body[lead].kind == " ":
        lead += 1
    if lead == len(body):
        return lead, 0
    trail = 0
    while body[len(body) - 1 - trail].kind == " ":
        trail += 1
    return lead, trail


def _locate(
    lines: list[bytes],
    hunk: Hunk,
    floor: int,
    shift: int,
    max_fuzz: int,
    allow_offset: bool,
) -> tuple[int, int, int, int] | None:
    """Find where ``hunk`` applies: (index, dropped lead, dropped trail, fuzz) or None."""
    lead_ctx, trail_ctx = _context(hunk)
    context = max(lead_ctx, trail_ctx)
    old = list(hunk.old_lines)
    new = hunk.new_lines
    for fuzz in range(max(max_fuzz, 0) + 1):
        if fuzz > context:
            break
        # GNU patch: a side with less context than the diff's context size is at
        # the start (end) of the file, and stays anchored there while fuzzing.
        lead_drop = fuzz + lead_ctx - context
        trail_drop = fuzz + trail_ctx - context
        at_start = lead_drop < 0
        at_end = trail_drop < 0
        lead_drop = min(max(lead_drop, 0), lead_ctx)
        trail_drop = min(max(trail_drop, 0), trail_ctx)
        want = old[lead_drop : len(old) - trail_drop]
        # A new side without a final newline must end the file.
        new_tail = new[len(new) - 1 - trail_drop] if len(new) > trail_drop else b""
        if new_tail and not new_tail.endswith(b"\n"):
            at_end = True
        expected = _expected_index(hunk, shift) + lead_drop
        pos = _search(lines, want, expected, floor, at_start, at_end, allow_offset)
        if pos is not None:
            return pos, lead_drop, trail_drop, fuzz
    return None


def _search(
    lines: list[bytes],
    want: list[bytes],
    expected: int,
    floor: int,
    at_start: bool,
    at_end: bool,
    allow_offset: bool,
) -> int | None:
    """Index where ``want`` occurs in ``lines`` (at or after ``floor``), or None."""
    n = len(want)
    top = len(lines) - n  # last index where `want` fits
    if at_start:
        candidates = [0] if not at_end or top == 0 else []
    elif at_end:
        candidates = [top]
    else:
        # Without context (n == 0) there is nothing to search for: only the given place.
        candidates = [expected]
    if (at_start or at_end) and not allow_offset:
        candidates = [c for c in candidates if c == expected]
    for pos in candidates:
        if floor <= pos <= top and lines[pos : pos + n] == want:
            return pos
    if at_start or at_end or not allow_offset or n == 0:
        return None
    for pos in _nearest_matches(lines, want[0], expected, floor, top):
        if lines[pos : pos + n] == want:
            return pos
    return None


def _nearest_matches(
    lines: list[bytes], first: bytes, expected: int, floor: int, top: int
) -> list[int]:
    """Positions in [floor, top] whose line is ``first``, nearest ``expected`` first.

    On a tie the line before wins (GNU patch order). ``list.index`` does the
    scanning at C speed, so a file of thousands of lines costs no Python loop
    per line.
    """
    found: list[int] = []
    pos = floor
    while pos <= top:
        try:
            pos = lines.index(first, pos, top + 1)
        except ValueError:
            break
        found.append(pos)
        pos += 1
    found.sort(key=lambda p: (abs(p - expected), p > expected))
    return found


def _why(lines: list[bytes], hunk: Hunk, floor: int, expected: int, max_fuzz: int) -> str:
    """A short reason for a failed hunk: the first old line that differs at the expected place."""
    old = hunk.old_lines
    start = expected - 1 if hunk.old_len else expected
    if start < floor:
        return "it would overlap the previous hunk"
    if start > len(lines):
        return f"the file has only {len(lines)} lines"
    for k, want in enumerate(old):
        have = lines[start + k] if start + k < len(lines) else None
        if have != want:
            got = "end of file" if have is None else show_line(have)
            fuzz = f" (even with fuzz {max_fuzz})" if max_fuzz else ""
            return (
                f"no match anywhere in the file{fuzz}; at line {start + k + 1} "
                f"expected {show_line(want)}, found {got}"
            )
    return "its lines match but it is anchored to the start or end of the file"


def _reverse_lines(body: tuple[HunkLine, ...]) -> tuple[HunkLine, ...]:
    """Swap '+' and '-' and keep removals before additions in each change block."""
    out: list[HunkLine] = []
    minus: list[HunkLine] = []
    plus: list[HunkLine] = []
    for ln in body:
        if ln.kind == " ":
            out.extend(minus)
            out.extend(plus)
            minus, plus = [], []
            out.append(ln)
        elif ln.kind == "+":
            minus.append(HunkLine("-", ln.text))
        else:
            plus.append(HunkLine("+", ln.text))
    out.extend(minus)
    out.extend(plus)
    return tuple(out)


def reverse(fp: FilePatch) -> FilePatch:
    """The patch that undoes ``fp`` (used to see whether upstream already has a patch).

    ``raw`` of the result is rendered from its fields (git style); a binary
    patch stays binary (and so still needs ``git apply``).
    """
    hunks = tuple(
        Hunk(
            old_start=h.new_start,
            old_len=h.new_len,
            new_start=h.old_start,
            new_len=h.old_len,
            section=h.section,
            lines=_reverse_lines(h.lines),
        )
        for h in fp.hunks
    )
    rev = replace(
        fp,
        old_path=fp.new_path,
        new_path=fp.old_path,
        old_mode=fp.new_mode,
        new_mode=fp.old_mode,
        old_oid=fp.new_oid,
        new_oid=fp.old_oid,
        hunks=hunks,
        added=fp.removed,
        removed=fp.added,
        raw=b"",
    )
    return replace(rev, raw=render_file_patch(rev))
