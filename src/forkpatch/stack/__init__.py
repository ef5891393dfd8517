"""The editable stack: a work tree with one commit per applied patch.

The work tree is a ``git worktree`` of forkpatch's private store (never of the
user's clone of the fork), on the branch ``forkpatch/stack``. The commits from
the base to HEAD are the applied patches, each carrying its name in a
``Forkpatch-Patch:`` trailer; commits a developer makes by hand on top belong
to the patch below them until the next ``refresh`` folds them in.

``patches/`` stays the source of truth: commands that change it (refresh,
export, new, delete, rename, move, import) first compute everything in memory
and write patch files and series.yaml last, each atomically.
"""

from typing import TYPE_CHECKING

from forkpatch.stack.model import BRANCH, AppliedPatch, StackModel
from forkpatch.stack.worktree import describe_changes
from forkpatch.stackstate import StackPosition, StackState

if TYPE_CHECKING:
    from forkpatch.stack.commands import Stack
    from forkpatch.stack.sync import OutsideChange, Sync

__all__ = [
    "BRANCH",
    "AppliedPatch",
    "OutsideChange",
    "Stack",
    "StackModel",
    "StackPosition",
    "StackState",
    "Sync",
    "describe_changes",
]


def __getattr__(name: str) -> object:
    """``Stack`` (the commands, with the engine and the patch texts) and ``Sync`` (what
    changed outside forkpatch, for ``status``) load when first asked for: ``top`` reads
    the stack through :class:`StackModel` alone."""
    if name == "Stack":
        from forkpatch.stack.commands import Stack

        return Stack
    if name in ("Sync", "OutsideChange"):
        from forkpatch.stack import sync

        return getattr(sync, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
