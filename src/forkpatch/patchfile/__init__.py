"""Patch files: parse a description header plus a diff, check paths, canonical bytes.

A patch file (``patches/<slug>.patch``) is free-form description text followed by
a diff: what ``git diff-tree -p --full-index --binary`` prints, or a plain unified
diff (``diff -u``, quilt, ``-p0`` or ``-p1`` paths). Everything works on bytes and
every file section keeps its input bytes, so that a patch round-trips byte for byte.

This is the package's face; its modules, one job each, from the bottom:

- :mod:`~forkpatch.patchfile.model`: the frozen data (``PatchFile``, ``FilePatch``,
  ``Hunk``, ``HunkLine``) and the limits a file section is held to;
- :mod:`~forkpatch.patchfile.lines`: lines split on LF alone, shown in messages; a
  whole file's line endings; the mails of an mbox;
- :mod:`~forkpatch.patchfile.names`: git's C-quoted names and strip levels;
- :mod:`~forkpatch.patchfile.binary`: ``GIT binary patch`` block data;
- :mod:`~forkpatch.patchfile.hunks`: hunk bodies, checked, then parsed by unidiff;
- :mod:`~forkpatch.patchfile.parser`: :func:`parse_patch`, everything around the hunks;
- :mod:`~forkpatch.patchfile.safety`: paths that stay inside the fork tree;
- :mod:`~forkpatch.patchfile.render`: canonical bytes, a file section's git text;
- :mod:`~forkpatch.patchfile.refs`: the upstream commits a patch names.
"""

from __future__ import annotations

from forkpatch.patchfile.binary import decode_binary_block
from forkpatch.patchfile.lines import (
    MBOX_SEPARATOR,
    crlf_throughout,
    in_line_endings_of,
    lf_form,
    show_line,
    split_lines,
    split_mails,
)
from forkpatch.patchfile.model import (
    DEV_NULL,
    FILE_MODES,
    MAX_NAME_BYTES,
    MAX_PATH_BYTES,
    FilePatch,
    Hunk,
    HunkLine,
    PatchFile,
    normalise_header,
)
from forkpatch.patchfile.names import git_header_name, quote_path
from forkpatch.patchfile.parser import parse_patch
from forkpatch.patchfile.refs import upstream_refs
from forkpatch.patchfile.render import format_patch, render_file_patch
from forkpatch.patchfile.safety import check_path, check_paths

__all__ = [
    "DEV_NULL",
    "FILE_MODES",
    "MAX_NAME_BYTES",
    "MAX_PATH_BYTES",
    "MBOX_SEPARATOR",
    "FilePatch",
    "Hunk",
    "HunkLine",
    "PatchFile",
    "check_path",
    "check_paths",
    "crlf_throughout",
    "decode_binary_block",
    "format_patch",
    "git_header_name",
    "in_line_endings_of",
    "lf_form",
    "normalise_header",
    "parse_patch",
    "quote_path",
    "render_file_patch",
    "show_line",
    "split_lines",
    "split_mails",
    "upstream_refs",
]
