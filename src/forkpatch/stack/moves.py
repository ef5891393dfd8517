"""The rebase's face of the stack: where it stands before a rebase moves it
(:meth:`StackMoves.position`, checked to hold no unsaved work), the guard before it
moves (:meth:`StackMoves.guard_move`), and the stack rebuilt on the new base or put
back where it was (:meth:`StackMoves.rebuild_on`, :meth:`StackMoves.put_back`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from forkpatch import log
from forkpatch.errors import StateError
from forkpatch.series import Series
from forkpatch.stack import worktree
from forkpatch.stack.model import StackModel
from forkpatch.stack.sync import OutsideCheck, Sync
from forkpatch.stack.writer import StackWriter
from forkpatch.stackstate import StackPosition


class StackMoves:
    """What a rebase asks of the stack, on the command's model, writer and sync record."""

    def __init__(self, model: StackModel, writer: StackWriter, sync: Sync) -> None:
        self.model = model
        self.writer = writer
        self.sync = sync
        self.project = model.project
        self.store = model.store

    def put_back(self, position: StackPosition) -> None:
        """Move the stack back to ``position`` (an aborted rebase)."""
        self.writer.put_back(position)

    def begin_guard(self) -> None:
        """Start the editing work tree's ``git status`` that :meth:`position` and
        :meth:`guard_move` read, to run beside the rebase's own work until they do."""
        path = self.model.worktree_path()
        if path is not None and (path / ".git").exists():
            self.model.begin_status(self.model.wt(check_base=False))

    def position(self, command: str, doing: str) -> StackPosition | None:
        """Where the stack stands (None: no work tree), checked to hold no unsaved work
        before ``command`` (``doing``, for messages) moves it: no edit pending, no edits
        in no object, every patch refreshed; what changed outside forkpatch in patches/
        is taken first."""
        path = self.model.worktree_path()
        if path is None or not (path / ".git").exists():
            return None
        editing = self.model.state.editing
        if editing is not None:
            raise StateError(
                f"patch '{editing.patch}' is being edited in {path}",
                tip="run `forkpatch refresh` first",
            )
        wt = self.model.wt()
        self.model.guard_worktree(wt, doing)
        applied = self.model.applied(wt)
        # patches/ is read as it is: what changed outside forkpatch is taken, unless the
        # work tree has edits of its own there too.
        taken = self.sync.check_outside_changes(wt, OutsideCheck(command, take=True), applied)
        self.sync.require_refreshed(wt, applied)
        self.sync.say_taken(command, taken)
        return StackPosition(
            head=self.model.head(wt),
            base=self.model.base_commit(),
            applied=tuple(a.name for a in applied),
        )

    def guard_move(self, doing: str, *, conflict_tree: Path, unless_at: str | None) -> None:
        """Before ``doing`` moves the stack: refuse edits in no object (see
        :meth:`StackModel.guard_worktree`). ``unless_at``: nothing moves when the stack's
        head is still this commit, and the edits are kept (said so)."""
        path = self.model.worktree_path()
        if path is None or not (path / ".git").exists():
            return
        wt = self.model.wt(check_base=False)
        if unless_at is not None and self.model.head(wt) == unless_at:
            kept = self.model.changes(wt)
            if kept:
                log.info(
                    f"the uncommitted changes in {wt.work_tree} are kept (the stack does not "
                    f"move): {worktree.describe_changes(kept)}"
                )
            return
        self.model.guard_worktree(wt, doing, rebase=conflict_tree)

    def begin_rebuild(
        self, base: str, series: Series, names: Iterable[str], made: Mapping[str, str]
    ) -> None:
        """Start the work tree's move to the stack :meth:`rebuild_on` will make on
        ``base`` (``series``: the series.yaml about to be written), to run while the
        caller writes the patch files; :meth:`rebuild_on` then waits for it. Begun only
        where the stack is made of ``made`` alone and this command found the tree clean
        (see :meth:`StackWriter.begin_move`); else rebuild_on moves it as usual."""
        path = self.model.worktree_path()
        if path is None or not (path / ".git").exists():
            return
        _entries, head = self.writer.restacked(series, base, set(names), made)
        if head is not None:
            self.writer.begin_move(self.model.wt(check_base=False), head)

    def end_move(self) -> None:
        """Wait for a move :meth:`begin_rebuild` began (a way out of the command)."""
        self.writer.end_move()

    def rebuild_on(
        self, base: str, names: Iterable[str], made: Mapping[str, str] | None = None
    ) -> None:
        """After series.yaml moved to ``base`` (a rebase): the stack on ``base``, up to
        the prefix of the series that holds every one of ``names`` still in it.
        ``made``: the commits the rebase made on ``base`` for the patches (name ->
        commit), taken as the stack's instead of applying the files again."""
        path = self.model.worktree_path()
        if path is None or not (path / ".git").exists():
            return
        self.writer.save(self.model.state.with_(base=base, editing=None))
        self.writer.rebuild_applied(set(names), made=made)
        self.sync.remember(None)
