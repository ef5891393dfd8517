"""Human views of results, shared by the command line and the demo."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from forkpatch import log
from forkpatch.escape import terminal

if TYPE_CHECKING:
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
