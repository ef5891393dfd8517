"""Stack: the stack's commands for one command of the CLI (or the rebase, the importer,
the demo), a thin face over the parts it composes.

Each part holds the same :class:`~forkpatch.stack.model.StackModel`, so that what one
reads (state.json, the applied patches, ``git status``) the others reuse until a
write makes the model ask git again:

- :class:`~forkpatch.stack.model.StackModel`: the stack read (what ``top`` and
  ``status`` take alone);
- :class:`~forkpatch.stack.writer.StackWriter`: the work tree and state.json written;
- :class:`~forkpatch.stack.sync.Sync`: what changed outside forkpatch, and the record;
- :class:`~forkpatch.stack.checkout.Checkout` (apply),
  :class:`~forkpatch.stack.editing.EditLoop` (push, pop, edit),
  :class:`~forkpatch.stack.refresh.Refresh`, :class:`~forkpatch.stack.export.Export`,
  :class:`~forkpatch.stack.edits.SeriesEdits` (new, delete, rename, move) and
  :class:`~forkpatch.stack.moves.StackMoves` (the rebase's face).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from forkpatch.engine import SeriesResult
from forkpatch.project import Project
from forkpatch.results import PatchResult
from forkpatch.series import PatchEntry, Series
from forkpatch.stack import worktree
from forkpatch.stack.checkout import Checkout
from forkpatch.stack.editing import EditLoop
from forkpatch.stack.edits import SeriesEdits
from forkpatch.stack.export import Export
from forkpatch.stack.model import StackModel
from forkpatch.stack.moves import StackMoves
from forkpatch.stack.refresh import Refresh
from forkpatch.stack.sync import Sync
from forkpatch.stack.writer import StackWriter
from forkpatch.stackstate import Layout, StackPosition

if TYPE_CHECKING:
    from forkpatch.importer import ImportOptions


class Stack:
    """The editable stack of a project (see the package's docstring), for one command."""

    def __init__(self, project: Project) -> None:
        self.project = project
        self.model = StackModel(project)
        self.writer = StackWriter(self.model)
        self.sync = Sync(self.model)
        self.loop = EditLoop(self.model, self.writer, self.sync)
        self.moves = StackMoves(self.model, self.writer, self.sync)
        self._checkout = Checkout(self.model, self.writer, self.sync)
        self._refresh = Refresh(self.model, self.writer, self.sync)
        self._export = Export(self.model, self.sync)
        self._edits = SeriesEdits(self.model, self.writer, self.sync, self.loop)

    # What the CLI shows after a command.
    def layout(self) -> Layout:
        return self.model.layout()

    def top(self) -> str | None:
        return self.model.top()

    def worktree_path(self) -> Path | None:
        return self.model.worktree_path()

    def pending_edits(self) -> list[worktree.Change]:
        return self.model.pending_edits()

    # The commands.
    def apply(
        self,
        where: Path | None = None,
        force: bool = False,
        upto: str | None = None,
        sparse: bool | None = None,
    ) -> tuple[Path, SeriesResult]:
        return self._checkout.apply(where, force=force, upto=upto, sparse=sparse)

    def push(
        self, name: str | None = None, all_: bool = False, merge: bool = False
    ) -> list[PatchResult]:
        return self.loop.push(name, all_=all_, merge=merge)

    def pop(self, name: str | None = None, all_: bool = False, force: bool = False) -> list[str]:
        return self.loop.pop(name, all_=all_, force=force)

    def edit(self, name: str) -> Path:
        return self.loop.edit(name)

    def refresh(self, force: bool = False, offsets: bool = False) -> list[str]:
        return self._refresh.refresh(force=force, offsets=offsets)

    def export(
        self, offsets: bool = False, force: bool = False, skip_changed: bool = False
    ) -> tuple[list[str], list[str]]:
        return self._export.export(offsets=offsets, force=force, skip_changed=skip_changed)

    def new(self, name: str, summary: str | None = None) -> PatchEntry:
        return self._edits.new(name, summary)

    def delete(self, name: str, keep_file: bool = False) -> None:
        self._edits.delete(name, keep_file=keep_file)

    def rename(self, old: str, new: str) -> PatchEntry:
        return self._edits.rename(old, new)

    def move(
        self,
        name: str,
        *,
        before: str | None = None,
        after: str | None = None,
        position: int | None = None,
    ) -> list[str]:
        return self._edits.move(name, before=before, after=after, position=position)

    def stack_for_insert(self, position: int) -> set[str] | None:
        return self._edits.stack_for_insert(position)

    def import_(self, files: list[Path], opts: ImportOptions) -> list[PatchEntry]:
        """Import patch files (see :func:`forkpatch.importer.import_patches`) after
        ``opts.after`` (default: at the end). Inserted among the applied patches, the new
        ones join the stack: checked first (nothing unsaved in the work tree), rebuilt
        once the files are written. The caller holds the project's lock."""
        from forkpatch.importer import import_patches

        series = self.project.series
        position = len(series.patches) if opts.after is None else series.index(opts.after) + 1
        rebuild = self.stack_for_insert(position)
        entries = import_patches(self.project, files, opts)
        self.after_series_change(rebuild)
        return entries

    def after_series_change(self, rebuild: set[str] | None) -> None:
        self._edits.after_series_change(rebuild)

    # The rebase's face.
    def position(self, command: str, doing: str) -> StackPosition | None:
        return self.moves.position(command, doing)

    def begin_guard(self) -> None:
        self.moves.begin_guard()

    def drop_begun(self) -> None:
        self.model.drop_begun()

    def guard_move(self, doing: str, *, conflict_tree: Path, unless_at: str | None) -> None:
        self.moves.guard_move(doing, conflict_tree=conflict_tree, unless_at=unless_at)

    def put_back(self, position: StackPosition) -> None:
        self.moves.put_back(position)

    def begin_rebuild(
        self, base: str, series: Series, names: Iterable[str], made: Mapping[str, str]
    ) -> None:
        self.moves.begin_rebuild(base, series, names, made)

    def end_move(self) -> None:
        self.moves.end_move()

    def rebuild_on(
        self, base: str, names: Iterable[str], made: Mapping[str, str] | None = None
    ) -> None:
        self.moves.rebuild_on(base, names, made)
