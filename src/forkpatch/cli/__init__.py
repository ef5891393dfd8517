"""The ``forkpatch`` command line: :func:`main` (:mod:`forkpatch.cli.dispatch`: the
error boundary, the plain forms of `top` and `status`), the click group ``cli`` and its
table of commands (:mod:`forkpatch.cli.app`, loaded when first asked for); one module
per group of commands beside them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from forkpatch.cli.dispatch import main

if TYPE_CHECKING:
    from forkpatch.cli.app import cli

__all__ = ["cli", "main"]


def __getattr__(name: str) -> Any:
    if name == "cli":  # the group loads click: only when it is asked for
        from forkpatch.cli.app import cli

        return cli
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
