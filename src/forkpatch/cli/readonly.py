"""The read-only commands a developer runs between two edits, `top` and `status`, as
plain functions of the command's context: their click commands (in cli/stack.py and
cli/project.py) call them, and :mod:`forkpatch.cli.dispatch` runs them without loading
click for their plain command lines."""

from __future__ import annotations

from forkpatch import log
from forkpatch.cli.context import Ctx
from forkpatch.errors import PatchesConflict, StateError
from forkpatch.views import print_results


def top(c: Ctx) -> None:
    """`forkpatch top`: the name of the top applied patch."""
    name = c.stack_model().top()
    if name is None:  # exit 1 as quilt's "No patches applied": a state, not a usage error
        raise StateError("no patch is applied", tip="`forkpatch push` applies the next one")
    log.result(name)


def status(c: Ctx, *, as_json: bool, upstream: bool) -> None:
    """`forkpatch status`: the patches in order and how each applies to the base."""
    from forkpatch.ops import series_status

    project = c.project()
    report = series_status(project)
    ups: dict[str, dict[str, object]] = {}
    if upstream:
        from forkpatch.upstream_status import describe, upstream_states

        ups = upstream_states(project, project.series.patches)
    if as_json:
        data = report.to_json()
        patches = data.get("patches")
        for p in patches if isinstance(patches, list) else []:
            if isinstance(p, dict) and p.get("name") in ups:
                p["upstream"] = ups[p["name"]]
        log.emit_json(data)
    else:
        log.result(
            f"base {report.base_tag} ({report.base_commit[:12]}), "
            f"{len(report.results)} patch(es)"
            + (f", work tree {report.worktree}" if report.worktree else "")
        )
        print_results(report.results, report.applied, emit=log.result)
        if ups:
            log.result("upstream:")
            for name, up in ups.items():
                log.result(describe(name, up))
        if report.editing:
            log.result(
                f"editing '{report.editing}': `forkpatch refresh` re-applies the patches above it"
            )
        if report.interrupted_worktree:
            log.warn(
                f"{report.interrupted_worktree} is a work tree an interrupted `forkpatch "
                "apply` left half made; `forkpatch apply` makes it again"
            )
        if report.worktree_problem:
            log.warn(f"{report.worktree_problem}; `forkpatch apply --force` rebuilds it")
        for change in report.changes:
            log.warn(change.describe())
            if (way := change.way_out()) is not None:
                log.detail(f"  tip: {way}")
        takes = [ch for ch in report.changes if ch.way_out() is None]
        sides = {ch.side for ch in takes if ch.applied and not ch.unrecorded}
        if "file" in sides:
            log.info("`forkpatch apply` (or `edit NAME`) takes the files into the work tree")
        if "both" in sides or any(ch.unrecorded for ch in takes):
            log.info(
                "where both sides changed: `forkpatch export --force` keeps the work tree, "
                "`forkpatch apply --force` takes the files (discarding the work tree's edits)"
            )
        for o in report.orphans:
            meant = project.meant_by(o)
            if meant is not None:
                # Importing it would make a second patch of the same change.
                log.warn(
                    f"patches/{o} is not listed in series.yaml: entry '{meant.name}' names "
                    f"patches/{meant.file}, which does not exist; did you mean `file: {o}`?"
                )
                continue
            log.warn(
                f"patches/{o} is not listed in series.yaml (orphan); "
                f"`forkpatch import patches/{o}` adds it"
            )
    if any(r.status == "conflict" for r in report.results):
        raise PatchesConflict("a patch conflicts")
