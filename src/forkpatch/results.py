"""What applying a patch gave: its status, the conflicts, the details shown (frozen).

Apart from the engine that makes them (:mod:`forkpatch.engine`, which gives the same
names), so that reading a kept answer back (`status` with nothing changed) needs
neither the engine nor the patch parser.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from forkpatch.kinds import PATCH_STATUSES, PatchStatus


def worst(statuses: Iterable[str]) -> PatchStatus:
    """The worst of ``statuses`` (PATCH_STATUSES runs from the best to the worst): a
    patch's files may end differently, and the worst wins."""
    ranked = [PATCH_STATUSES.index(s) for s in statuses if s in PATCH_STATUSES]
    return PATCH_STATUSES[max(ranked)] if ranked else "clean"


@dataclass(frozen=True)
class Conflict:
    path: str
    reason: str
    hunks: tuple[int, ...] = ()  # 1-based hunk numbers
    line: int | None = None
    merged: bytes | None = None  # content with conflict markers, when a 3-way ran


@dataclass(frozen=True)
class PatchResult:
    name: str
    status: PatchStatus
    files: tuple[str, ...] = ()
    added: int = 0
    removed: int = 0
    detail: tuple[str, ...] = ()
    evidence: str | None = None
    conflicts: tuple[Conflict, ...] = ()
    commit: str | None = None
    # For each file the patch touched: content before and after (None = absent).
    # Used as the 3-way merge base when the same series is applied elsewhere.
    images: dict[str, tuple[bytes | None, bytes | None]] = field(default_factory=dict)
    # Shown whatever the status (e.g. a mode the patch names but the tree does not have).
    warnings: tuple[str, ...] = ()

    def describe_failure(self, onto: str) -> str:
        """Why the patch does not apply on ``onto`` (a tag, "the rebuilt stack"...), a
        line per conflict, for an error message."""
        lines = [f"patch '{self.name}' does not apply on {onto}:"]
        lines += [f"  - {c.reason}" for c in self.conflicts]
        return "\n".join(lines)

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "name": self.name,
            "status": self.status,
            "files": list(self.files),
            "added": self.added,
            "removed": self.removed,
        }
        if self.evidence:
            out["evidence"] = self.evidence
        if self.detail:
            out["detail"] = list(self.detail)
        if self.warnings:
            out["warnings"] = list(self.warnings)
        if self.conflicts:
            out["conflicts"] = [
                {"path": c.path, "reason": c.reason, "hunks": list(c.hunks), "line": c.line}
                for c in self.conflicts
            ]
        return out
