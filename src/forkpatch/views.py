"""Human views of results, shared by the command line and the demo."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from forkpatch import log
from forkpatch.escape import terminal

if TYPE_CHECKING:
    from forkpatch.ops import StatusReport
    from forkpatch.results import PatchResult


def table(rows: list[list[str]], headers: list[str]) -> str:
    # Escaped before the widths are measured: a cell is as wide as what is shown.
    rows = [[terminal(str(c)) for c in row] for row in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows, strict=False)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    for row in rows:
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)


def print_results(
    results: Sequence[PatchResult],
    applied: Sequence[str] | None = None,
    emit: Callable[[str], None] = log.info,
) -> None:
    """One table row per patch (``*`` marks the applied ones), then each patch's details,
    through ``emit`` (log.result where the table is the command's result); warnings
    always go to stderr."""
    rows = []
    for i, r in enumerate(results, 1):
        files = ", ".join(r.files[:3]) + (f" (+{len(r.files) - 3})" if len(r.files) > 3 else "")
        if not r.files and any(d.startswith("build step") for d in r.detail):
            files = "(build step)"
        mark = ""
        if applied is not None:
            mark = "*" if r.name in applied else " "
        rows.append([f"{mark}{i}", r.name, r.status, f"+{r.added}/-{r.removed}", files or "-"])
    emit(table(rows, ["#", "patch", "status", "lines", "files"]))
    for r in results:
        for line in r.detail:
            if r.status not in ("clean",):
                emit(f"  {r.name}: {line}")
        for line in r.warnings:
            log.warn(f"{r.name}: {line}")
        for c in r.conflicts:
            emit(f"  {r.name}: {c.reason}")
        if r.evidence:
            emit(f"  {r.name}: {r.evidence}")


def show_status(report: StatusReport) -> None:
    """`forkpatch status` for humans: the base, the table, then what needs the user's
    eye (upstream answers, the patch being edited, outside changes, orphans)."""
    log.result(
        f"base {report.base_tag} ({report.base_commit[:12]}), {len(report.results)} patch(es)"
        + (f", work tree {report.worktree}" if report.worktree else "")
    )
    print_results(report.results, report.applied, emit=log.result)
    if report.upstream:
        log.result("upstream:")
        for name, up in report.upstream.items():
            log.result(up.describe(name))
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
    _show_changes(report)
    for o in report.orphans:
        if o.meant_by is not None:
            name, file = o.meant_by
            log.warn(
                f"patches/{o.file} is not listed in series.yaml: entry '{name}' names "
                f"patches/{file}, which does not exist; did you mean `file: {o.file}`?"
            )
        else:
            log.warn(
                f"patches/{o.file} is not listed in series.yaml (orphan); "
                f"`forkpatch import patches/{o.file}` adds it"
            )


def _show_changes(report: StatusReport) -> None:
    """Outside changes, each with its way out; then how to take the rest either way."""
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
