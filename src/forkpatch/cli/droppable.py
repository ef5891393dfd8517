"""``forkpatch droppable``: a thin click command over :mod:`forkpatch.droppable`."""

from __future__ import annotations

from pathlib import Path

import click

from forkpatch import log
from forkpatch.cli import options
from forkpatch.cli.context import Ctx, pass_ctx
from forkpatch.errors import PatchesDroppable
from forkpatch.kinds import SmokeDeps

HELP = """Which patches the series no longer needs, on evidence.

\b
For each patch (or each NAME), its drop-when conditions are evaluated at the
series' base, or at REF after an in-memory rebase (--onto): `upstreamed: true`
holds when the patch is already in the target; `passes-without: [checks]`
when those smoke checks pass on the series built without the patch (an
overlay wheel from the target's base wheel, smoked in a fresh environment
with the tiers this machine has). A patch whose own smoke checks pass with it
and fail without it is needed. Verdicts: droppable, needed (the check that
fails without it, and how), not-evaluated (what is missing: a tier, a base
wheel, a condition in words only).
\b
  exit 0   no patch is droppable
  exit 11  at least one patch is droppable (`droppable` in --json)
  exit 1   error (unknown patch, missing base wheel file, ...)
"""


@click.command(help=HELP)
@click.argument("names", nargs=-1, metavar="[NAME]...")
@click.option(
    "--onto",
    metavar="REF",
    help="Evaluate on this tag, branch or commit of the fork (in-memory rebase).",
)
@options.base_wheel(for_what="for the target", exists=True)
@options.smoke_deps("--smoke-deps", "smoke_deps", default="system")
@options.smoke_python("--smoke-python", "smoke_python")
@options.as_json()
@pass_ctx
def droppable(
    c: Ctx,
    names: tuple[str, ...],
    onto: str | None,
    base_wheel: Path | None,
    smoke_deps: SmokeDeps,
    smoke_python: str | None,
    as_json: bool,
) -> None:
    from forkpatch.droppable import DroppableOptions, evaluate, print_result

    with c.locked_project() as project:
        result = evaluate(
            project,
            DroppableOptions(
                names=names,
                onto=onto,
                base_wheel=base_wheel,
                deps=smoke_deps,
                python=smoke_python,
            ),
        )
    if as_json:
        log.emit_json(result.to_json())
    print_result(result, emit=log.info if as_json else log.result)
    if result.droppable:
        raise PatchesDroppable(", ".join(result.droppable))
