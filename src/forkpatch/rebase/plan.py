"""What the classification of a series on a new base gives: the data of a rebase.

:class:`Plan` is the classification: the :class:`Setup` (the series' base, the target,
how they relate), one :class:`Outcome` per patch and the head built below the first
conflict. ``check``, the rebase, its report and ``track``'s forecast all read it, and the
rebase's journal keeps it as it is (:mod:`forkpatch.rebase.state`), with the
:class:`RebaseOptions` it was made with and the :class:`ClassifierMemo` of what the
classifier found once. :mod:`forkpatch.rebase.classifier` makes them; nothing here
reads a tree or writes anything.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import overload

from forkpatch.engine import Item
from forkpatch.git import Git
from forkpatch.kinds import (
    APPLIED_STATUSES,
    OUTCOME_STATUSES,
    OutcomeStatus,
    PatchStatus,
    Relation,
    word_of,
)
from forkpatch.patchfile import PatchFile
from forkpatch.results import FileConflict, PatchResult
from forkpatch.series import BaseRef, PatchEntry

# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class RebaseOptions:
    """What the user asked for; built once by the CLI. A rebase's journal keeps them but
    ``report_dir``, which is the command's own (``--continue`` gives its own)."""

    onto: str
    three_way: bool = True
    fuzz: int = 0
    report_dir: Path | None = None  # also write the report there (this command only)


@dataclass(frozen=True)
class Target:
    """Where the series goes: a name for messages and labels (a tag or a branch) and its commit."""

    name: str
    commit: str
    #: What the name resolved to when it is not a tag ("main (branch refs/heads/main at
    #: ae13773a0dee)"); empty for a tag.
    resolved: str = ""
    #: What series.yaml records once the series is there: the tag that names the
    #: commit (none for a commit no tag names) and the branch it came from.
    record: BaseRef | None = None

    @property
    def base(self) -> BaseRef:
        return self.record or BaseRef(self.name, self.commit)


@dataclass(frozen=True)
class Forecast:
    """How to read the outcome of a patch classified above a conflict.

    ``after``: the first conflicting patch below it. ``depends_on``: the
    conflicting patches below it that it shares files with, directly or through
    patches in between (empty: independent, its outcome is certain).
    ``if_merged``: its status if those conflicts were merged with their markers
    kept (None when independent: the same as its status).
    """

    after: str
    depends_on: tuple[str, ...] = ()
    if_merged: OutcomeStatus | None = None

    @property
    def independent(self) -> bool:
        return not self.depends_on

    def to_json(self) -> dict[str, object]:
        return {
            "after": self.after,
            "independent": self.independent,
            "depends_on": list(self.depends_on),
            "if_merged": self.if_merged,
        }


@dataclass(frozen=True)
class Outcome:
    """One patch's fate on the new base."""

    name: str
    status: OutcomeStatus
    files: tuple[str, ...] = ()
    evidence: str | None = None
    detail: tuple[str, ...] = ()
    conflicts: tuple[FileConflict, ...] = ()
    commit: str | None = None  # its commit on the new base (applied patches, rebase only)
    moved: tuple[tuple[str, str], ...] = ()  # (old path, path upstream moved it to)
    forecast: Forecast | None = None  # set when a patch below it conflicted
    replaced_by: str | None = None  # the upstream commit that probably replaces it

    @classmethod
    def of(cls, result: PatchResult, moved: Mapping[str, str]) -> Outcome:
        return cls(
            name=result.name,
            status=outcome_status(result.status),
            files=result.files,
            evidence=result.evidence,
            detail=result.detail,
            # The engine's, without the merged file (the conflict work tree's, not the plan's).
            conflicts=tuple(replace(c, merged=None) for c in result.conflicts),
            commit=result.commit,
            moved=tuple(moved.items()),
        )

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "name": self.name,
            "status": self.status,
            "files": list(self.files),
        }
        if self.evidence:
            out["evidence"] = self.evidence
        if self.detail:
            out["detail"] = list(self.detail)
        if self.conflicts:
            out["conflicts"] = [c.to_json() for c in self.conflicts]
        if self.replaced_by:
            out["replaced_by"] = self.replaced_by
        if self.moved:
            out["moved"] = dict(self.moved)
        if self.forecast:
            out["forecast"] = self.forecast.to_json()
        if self.commit:
            out["commit"] = self.commit
        return out

    @property
    def refresh(self) -> bool:
        """Whether the patch file must be regenerated from its new commit.

        A ``clean`` patch applies byte for byte as it is, so its file is kept
        (a no-op rebase changes zero bytes); anything that moved, merged or was
        resolved is rewritten so that it applies exactly next time.
        """
        return self.status in APPLIED_STATUSES and (self.status != "clean" or bool(self.moved))

    @property
    def reasons(self) -> str:
        return "; ".join(c.reason for c in self.conflicts) or "conflict"


def outcome_status(status: PatchStatus) -> OutcomeStatus:
    """The outcome of a patch the engine applied with ``status`` (never "blocked": the
    classifier applies one patch at a time)."""
    word = word_of(status, OUTCOME_STATUSES)
    if word is None:
        raise ValueError(f"a patch applied on its own has no status {status!r}")
    return word


@dataclass(frozen=True)
class Setup:
    """A series' base and the target it goes to, both present in the store."""

    base: BaseRef
    target: Target
    relation: Relation


@dataclass(frozen=True)
class Plan:
    """The classification of a whole series on a new base (a rebase's, as far as it went:
    the outcomes past its stop are forecasts)."""

    setup: Setup
    outcomes: tuple[Outcome, ...]
    head: str  # the last commit on the new base below the first conflict (onto when none)

    @property
    def target(self) -> Target:
        return self.setup.target

    @property
    def base(self) -> str:
        """The series' base as it is named: its tag, else its commit id (12 digits)."""
        return self.setup.base.label

    @property
    def base_commit(self) -> str:
        return self.setup.base.commit

    @property
    def onto(self) -> str:
        return self.setup.target.name

    @property
    def onto_commit(self) -> str:
        return self.setup.target.commit

    @property
    def onto_resolved(self) -> str:
        return self.setup.target.resolved

    @property
    def relation(self) -> Relation:
        return self.setup.relation

    @property
    def ok(self) -> bool:
        return all(o.status != "conflict" for o in self.outcomes)

    @property
    def first_conflict(self) -> Outcome | None:
        return next((o for o in self.outcomes if o.status == "conflict"), None)

    @property
    def note(self) -> str | None:
        return relation_note(self.relation, self.base, self.onto)

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "onto": self.onto,
            "onto_commit": self.onto_commit,
            **({"onto_resolved": self.onto_resolved} if self.onto_resolved else {}),
            "base": self.base,
            "base_commit": self.base_commit,
            "relation": self.relation,
        }
        if self.note:
            out["note"] = self.note
        out["ok"] = self.ok
        out["conflicts"] = sum(1 for o in self.outcomes if o.status == "conflict")
        out["patches"] = [o.to_json() for o in self.outcomes]
        return out


@dataclass(frozen=True)
class ClassifierMemo:
    """What a classifier found once, kept in a rebase's journal so that the steps after a
    stop do not look for it again (:meth:`Classifier.resume
    <forkpatch.rebase.classifier.Classifier.resume>`)."""

    date: str  # of the commits made on the target (the target's own: reproducible ids)
    #: patch-id matches: (patch, upstream commit, evidence); None: not computed
    upstream: tuple[tuple[str, str, str], ...] | None = None
    renames: tuple[tuple[str, str], ...] | None = None  # files upstream moved, once computed
    #: 3-way merge bases of the conflicting patches, as blobs in the store:
    #: (patch, path, blob before, blob after); the next stops need not replay them.
    images: tuple[tuple[str, str, str | None, str | None], ...] = ()
    #: The upstream commits the series names, resolved once: (reference, commit, subject),
    #: commit and subject None where the reference is not in the target's history.
    references: tuple[tuple[str, str | None, str | None], ...] | None = None


def relation_note(relation: Relation, base: str, onto: str) -> str | None:
    if relation == "backwards":
        return (
            f"{onto} is older than the series' base {base} (one of its ancestors): "
            "the series would move backwards"
        )
    if relation == "diverged":
        return f"{onto} does not descend from {base}: the series moves to another line of history"
    return None


def relation_of(git: Git, base_commit: str, onto_commit: str) -> Relation:
    if onto_commit == base_commit:
        return "same"
    if git.is_ancestor(base_commit, onto_commit):
        return "forward"
    if git.is_ancestor(onto_commit, base_commit):
        return "backwards"
    return "diverged"


# --------------------------------------------------------------------------- the series


class Items(Sequence[Item]):
    """The patches of a series, each parsed when first used (a resumed rebase only
    needs the few up to its next stop)."""

    def __init__(
        self, entries: Sequence[PatchEntry], load: Callable[[str | None], PatchFile | None]
    ) -> None:
        self._entries = list(entries)
        self._load = load
        self._items: dict[int, Item] = {}

    def __len__(self) -> int:
        return len(self._entries)

    @overload
    def __getitem__(self, index: int) -> Item: ...

    @overload
    def __getitem__(self, index: slice) -> list[Item]: ...

    def __getitem__(self, index: int | slice) -> Item | list[Item]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if index not in self._items:
            entry = self._entries[index]
            self._items[index] = Item(entry, self._load(entry.file))
        return self._items[index]

    def names(self) -> list[str]:
        """The patches' names, without parsing any."""
        return [e.name for e in self._entries]

    def entries(self) -> list[PatchEntry]:
        """The patches' series entries, without parsing any."""
        return list(self._entries)


def names_of(items: Sequence[Item]) -> list[str]:
    return items.names() if isinstance(items, Items) else [i.entry.name for i in items]


def entries_of(items: Sequence[Item]) -> list[PatchEntry]:
    """The items' series entries, without parsing any patch file."""
    return items.entries() if isinstance(items, Items) else [i.entry for i in items]


def paths_of(item: Item) -> set[str]:
    return set(item.patch.paths) if item.patch is not None else set()
