"""git's conflict markers of an unresolved merge in a project file (series.yaml, a
patch file): where they are, and the error that names them with the ways out."""

from __future__ import annotations

import re

_MARKER = re.compile(rb"^(<{7}|={7}|>{7}|\|{7})(?: |$)", re.MULTILINE)


def merge_markers(data: bytes) -> tuple[int, int, int] | None:
    """Where git's conflict markers of an unresolved merge are in ``data``: the lines
    (1-based) of the first ``<<<<<<<``, its ``=======`` and its ``>>>>>>>``, all at the
    start of a line and in that order; None when there is no such triple (a line of a
    diff starts with a space, ``+`` or ``-``: a marker the patch carries is not one)."""
    if b"<<<<<<<" not in data:
        return None
    start = sep = None
    for m in _MARKER.finditer(data):
        kind = m.group(1)[:1]
        line = data.count(b"\n", 0, m.start()) + 1
        if kind == b"<" and start is None:
            start = line
        elif kind == b"=" and start is not None and sep is None:
            sep = line
        elif kind == b">" and sep is not None:
            assert start is not None
            return start, sep, line
    return None


def unresolved_merge(rel: str, where: tuple[int, int, int], then: str) -> Exception:
    """The error for the project file ``rel`` holding conflict markers at ``where``;
    ``then``: the forkpatch command that takes the resolved file."""
    from forkpatch.errors import UnresolvedMergeError

    start, sep, end = where
    return UnresolvedMergeError(
        f"{rel}:{start}: unresolved merge: git's conflict markers are in the file "
        f"(<<<<<<< at line {start}, ======= at {sep}, >>>>>>> at {end}), left by a "
        "`git pull`, merge, rebase or stash pop",
        tip=f"resolve the markers in {rel} (keep what each side meant, delete the marker "
        f"lines), or take one side whole: `git checkout --ours {rel}` (yours) or "
        f"`git checkout --theirs {rel}` (theirs); then `git add {rel}` and {then}",
    )
