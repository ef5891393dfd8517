"""A parsed patch file as frozen data: its lines, hunks, file sections and header."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from forkpatch.kinds import HunkLineKind

DEV_NULL = "/dev/null"
#: The modes of files git keeps and forkpatch applies: regular, executable, symlink.
FILE_MODES = ("100644", "100755", "120000")
#: Limits of common file systems (NAME_MAX and PATH_MAX - 1 on Linux), in UTF-8 bytes.
MAX_NAME_BYTES = 255
MAX_PATH_BYTES = 4095


@dataclass(frozen=True)
class HunkLine:
    """One line of a hunk body.

    ``kind`` is ``' '`` (context), ``'-'`` (removed) or ``'+'`` (added). ``text``
    is the line content with its original ending (``b"\\n"`` or ``b"\\r\\n"``);
    without one when a ``\\ No newline at end of file`` marker followed it.
    """

    kind: HunkLineKind
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
        return hunk_header(self.old_start, self.old_len, self.new_start, self.new_len)


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


def normalise_header(header: str) -> str:
    """The header as stored: trailing blank / whitespace-only lines and trailing spaces removed."""
    return header.rstrip()


def hunk_header(old_start: int, old_len: int, new_start: int, new_len: int) -> str:
    """The ``@@ -a,b +c,d @@`` line as git writes it: a count of 1 is left out."""
    return f"@@ -{_range(old_start, old_len)} +{_range(new_start, new_len)} @@"


def _range(start: int, length: int) -> str:
    return str(start) if length == 1 else f"{start},{length}"
