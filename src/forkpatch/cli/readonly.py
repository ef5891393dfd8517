"""The read-only commands a developer runs between two edits, `top` and `status`, as
plain functions of the command's context: their click commands (in cli/stack.py and
cli/project.py) call them, and :mod:`forkpatch.cli.dispatch` runs them without loading
click for their plain command lines."""

from __future__ import annotations

from forkpatch import log
from forkpatch.cli.context import Ctx
from forkpatch.errors import PatchesConflict, StateError
from forkpatch.views import show_status


def top(c: Ctx) -> None:
    """`forkpatch top`: the name of the top applied patch."""
    name = c.stack_model().top()
    if name is None:  # exit 1 as quilt's "No patches applied": a state, not a usage error
        raise StateError("no patch is applied", tip="`forkpatch push` applies the next one")
    log.result(name)


def status(c: Ctx, *, as_json: bool, upstream: bool) -> None:
    """`forkpatch status`: the patches in order and how each applies to the base."""
    from forkpatch.ops import series_status

    report = series_status(c.project(), upstream=upstream)
    if as_json:
        log.emit_json(report.to_json())
    else:
        show_status(report)
    if report.conflicted:
        raise PatchesConflict("a patch conflicts")
