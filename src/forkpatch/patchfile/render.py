"""Patch text from data: a patch file's canonical bytes, a file section's git text."""

from __future__ import annotations

from forkpatch.patchfile.model import DEV_NULL, FilePatch, normalise_header
from forkpatch.patchfile.names import quote_path


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
