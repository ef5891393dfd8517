"""What applying a patch gave: its status, the conflicts, the details shown (frozen).

Apart from the engine that makes them (:mod:`forkpatch.engine`, which gives the same
names), so that reading a kept answer back (`status` with nothing changed) needs
neither the engine nor the patch parser.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from forkpatch.kinds import PATCH_STATUSES, PatchStatus


def worst(statuses: Iterable[str]) -> PatchStatus:
    """The worst of ``statuses`` (PATCH_STATUSES runs from the best to the worst): a
    patch's files may end differently, and the worst wins."""
    ranked = [PATCH_STATUSES.index(s) for s in statuses if s in PATCH_STATUSES]
    return PATCH_STATUSES[max(ranked)] if ranked else "clean"


@dataclass(frozen=True)
class FileConflict:
    """Why one file of a patch does not apply: the engine's answer, a rebase's outcome
    (its journal, its report, ``check --json``) and ``track``'s forecast alike."""

    path: str
    reason: str
    hunks: tuple[int, ...] = ()  # 1-based hunk numbers
    line: int | None = None
    #: the file with conflict markers, when a 3-way merge ran (the engine's, for the
    #: conflict work tree; never in a file: not in to_json, not compared)
    merged: bytes | None = field(default=None, compare=False, repr=False)

    def to_json(self) -> dict[str, object]:
        return {
            "path": self.path,
            "reason": self.reason,
            "hunks": list(self.hunks),
            "line": self.line,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, object]) -> FileConflict:
        """From :meth:`to_json`'s form, checked (ValueError naming the field)."""
        path, reason, line = raw.get("path"), raw.get("reason"), raw.get("line")
        hunks = raw.get("hunks") or []
        if not (isinstance(path, str) and isinstance(reason, str)):
            raise ValueError("conflicts: path/reason")
        if not (
            isinstance(hunks, (list, tuple))
            and all(isinstance(h, int) and not isinstance(h, bool) for h in hunks)
        ):
            raise ValueError("conflicts: hunks")
        if not (line is None or (isinstance(line, int) and not isinstance(line, bool))):
            raise ValueError("conflicts: line")
        return cls(path, reason, tuple(hunks), line)


@dataclass(frozen=True)
class PatchResult:
    name: str
    status: PatchStatus
    files: tuple[str, ...] = ()
    added: int = 0
    removed: int = 0
    detail: tuple[str, ...] = ()
    evidence: str | None = None
    conflicts: tuple[FileConflict, ...] = ()
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
            out["conflicts"] = [c.to_json() for c in self.conflicts]
        return out
