"""The ``forkpatch`` command line (:mod:`forkpatch.cli.app`: the group, the table of
commands, :func:`main`); one module per group of commands beside it."""

from __future__ import annotations

from forkpatch.cli.app import cli, main

__all__ = ["cli", "main"]
