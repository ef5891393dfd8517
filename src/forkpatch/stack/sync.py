"""What changed in patches/ and series.yaml outside forkpatch, against the record of
what forkpatch last wrote or read for the work tree (state.json's ``synced``).

:class:`Sync` holds the command's :class:`~forkpatch.stack.model.StackModel`: it reads
the record (made from what agrees now for a state older than the record), writes it
after a command (:meth:`Sync.remember`), lists the outside changes with the side that
changed (:meth:`Sync.outside_changes`, which ``status`` shows) and is the one check
before a command overwrites either side (:meth:`Sync.check_outside_changes`).
:class:`Exports` renders what export would write for each applied patch (the patch
texts load with the first render: ``status`` with nothing changed needs none).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from forkpatch import log
from forkpatch.errors import StateError
from forkpatch.git import Git
from forkpatch.kinds import ChangeKind, ChangeSide
from forkpatch.series import SERIES_FILE, PatchEntry
from forkpatch.stack.model import AppliedPatch, StackModel
from forkpatch.stackstate import FileRecord, StackState, SyncRecord
from forkpatch.trailer import parse_commit_message

if TYPE_CHECKING:
    from forkpatch.patchtext import Rendered
    from forkpatch.stack.writer import StackWriter

# Changes to series.yaml's list of entries (the others are a patch file's).
SERIES_KINDS: frozenset[ChangeKind] = frozenset({"added", "removed", "moved"})


@dataclass(frozen=True)
class OutsideChange:
    """A patch file or series.yaml entry that differs from what forkpatch last wrote or
    read for the work tree (:class:`forkpatch.stackstate.SyncRecord`), and which side
    changed: ``"file"`` (patches/ or series.yaml only), ``"worktree"`` (only the work
    tree: edits not written to patches/ yet) or ``"both"``."""

    name: str  # the patch as series.yaml names it now (as the work tree names it: removed)
    kind: ChangeKind
    file: str | None  # its file in patches/ now (None: none)
    side: ChangeSide
    # The work tree holds the patch (added or moved entries: patches above them), so
    # the work tree and patches/ disagree about it; otherwise `push` simply reads it.
    applied: bool
    old: str | None = None  # renamed: the name it had (None: only its file was renamed)
    old_file: str | None = None  # renamed: the file it had
    unrecorded: bool = False  # the record predates this forkpatch: the side is not known

    def describe(self) -> str:
        where = f"patches/{self.file}" if self.file else f"build step '{self.name}'"
        what = {
            "modified": f"{where} was modified outside forkpatch",
            "deleted": f"patches/{self.file} (patch '{self.name}') was deleted outside forkpatch",
            "added": f"{SERIES_FILE} entry '{self.name}' ({where}) was added outside forkpatch",
            "renamed": (
                f"patch '{self.old}' (patches/{self.old_file}) was renamed outside forkpatch "
                f"to '{self.name}' ({where})"
                if self.old
                else f"patches/{self.old_file} (patch '{self.name}') was renamed outside "
                f"forkpatch to {where}"
            ),
            "misnamed": (
                f"{SERIES_FILE} entry '{self.name}' names {where}, which does not exist (it "
                f"named patches/{self.old_file} before: a typo in `file:`?)"
            ),
            "removed": f"patch '{self.name}' was removed from {SERIES_FILE} outside forkpatch",
            "moved": f"{SERIES_FILE} entry '{self.name}' was moved outside forkpatch",
            "edited": f"patch '{self.name}' has edits in the work tree not written to patches/",
        }[self.kind]
        if self.kind in ("edited", "misnamed"):
            return what
        if self.unrecorded:
            return (
                f"{what}? the work tree's '{self.name}' differs from it, and forkpatch's record "
                "predates this version: which side changed is not known (both, to be safe)"
            )
        if not self.applied:
            return f"{what} (not applied: `forkpatch push` reads it as it is)"
        if self.side == "both":
            return f"{what}, and the work tree has edits of its own to it: both sides changed"
        return f"{what}; the work tree has no edits of its own to it"

    def way_out(self) -> str | None:
        """What to do about a change that no command can take into the work tree as it
        is (a deleted patch file, a ``file:`` that names nothing); None for the others."""
        if self.kind == "deleted":
            return (
                f"`forkpatch export --force` writes patches/{self.file} again from the work "
                f"tree; `git checkout -- patches/{self.file}` restores the committed file; "
                f"`forkpatch delete {self.name}` removes the patch"
            )
        if self.kind == "misnamed":
            return (
                f"correct `file: {self.file}` in {SERIES_FILE} (patches/{self.old_file} is the "
                "file it named)"
            )
        return None

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "kind": self.kind,
            "file": self.file,
            "old": self.old,
            "old_file": self.old_file,
            "side": "unknown" if self.unrecorded else self.side,
            "applied": self.applied,
        }


@dataclass(frozen=True)
class OutsideCheck:
    """What a command asks of :meth:`Sync.check_outside_changes`."""

    command: str  # for messages: `forkpatch {command}` refused
    writes: frozenset[str] | None = None  # a writer's patches (None: every applied one)
    take: bool = False  # a taker: the command rebuilds the work tree from patches/
    force: bool = False  # a writer keeps the work tree's version (a warning)
    leave: bool = False  # a writer leaves the changed files as they are


class Exports:
    """What export would write for the applied patches, rendered from their commits
    (the patch texts and the engine's diffs load with the first render)."""

    def __init__(self, model: StackModel) -> None:
        self.model = model
        self.project = model.project
        self.store = model.store

    def require_refreshed(self, wt: Git, patches: list[AppliedPatch] | None = None) -> None:
        """Refuse when an applied patch's commit differs from its file (unsaved work)."""
        applied = patches if patches is not None else self.model.applied(wt)
        pending = self.unsaved(wt, applied)
        if pending:
            raise StateError(
                f"patch(es) {', '.join(pending)} have changes in the work tree that are not "
                "written to patches/",
                tip="run `forkpatch export` (or `forkpatch refresh` on the top patch) first, or "
                "pass --force to discard them",
            )

    def unsaved(self, wt: Git, applied: list[AppliedPatch]) -> list[str]:
        """Applied patches whose file would get another diff on export (the file's own
        form counts as saved when it still describes the commit: see patchtext).

        A patch whose commit is the one forkpatch recorded with its file (``synced``)
        has no edits of its own: if its file differs, it changed outside forkpatch
        (:meth:`Sync.check_outside_changes` tells), and re-applying takes it."""
        record = self.model.state.synced
        if record is not None:
            synced = record.patches
            applied = [
                a for a in applied if a.name not in synced or synced[a.name].commit != a.commit
            ]
        if not applied:
            return []
        by_name = {p.name: p for p in self.project.series.patches}
        mine = [a for a in applied if by_name.get(a.name) and by_name[a.name].file is not None]
        diffs = self.diffs(wt, mine)
        # Hand-made commits on a build step belong to no patch file: unsaved work.
        out = [
            a.name
            for a in applied
            if by_name.get(a.name) and by_name[a.name].file is None and len(a.commits) > 1
        ]
        from forkpatch.patchtext import PatchTexts

        with PatchTexts(self.store) as texts:
            texts.prefetch((self.model.parent(wt, a), a.commit) for a in mine)
            for a in mine:
                path = self.project.patch_path(by_name[a.name])
                current = self.project.patch_bytes(by_name[a.name]) or b""
                rendered = texts.render(
                    current,
                    commit=a.commit,
                    parent=self.model.parent(wt, a),
                    raw_diff=diffs[a.commit],
                    source=self.project.rel(path),
                    keep_offsets=True,
                )
                if rendered.diff_changed:
                    out.append(a.name)
        return out

    def diffs(self, wt: Git, applied: list[AppliedPatch]) -> dict[str, bytes]:
        """Each applied patch's diff (its parent to its last commit), keyed by that last
        commit: one git process for the whole stack, not three per patch."""
        from forkpatch.engine import diffs_between

        return diffs_between(wt, [(self.model.parent(wt, a), a.commit) for a in applied])

    def exported(
        self, wt: Git, mine: list[AppliedPatch], *, offsets: bool
    ) -> Iterator[tuple[PatchEntry, bytes | None, Rendered, str]]:
        """What export writes for each of ``mine`` (applied patches with a file): the
        entry, its file's bytes now, the rendered file and the commit's summary."""
        by_name = {p.name: p for p in self.project.series.patches}
        diffs = self.diffs(wt, mine)  # one git process, whatever the number of patches
        from forkpatch.patchtext import PatchTexts

        with PatchTexts(self.store) as texts:
            texts.prefetch((self.model.parent(wt, a), a.commit) for a in mine)
            for a in mine:
                entry = by_name[a.name]
                _name, summary, header = parse_commit_message(self.model.message(wt, a))
                # The file's own form (mail headers, quilt lines, notes) is kept where the
                # commit did not change it; see forkpatch.patchtext.
                old_bytes = self.project.patch_bytes(entry)
                rendered = texts.render(
                    old_bytes,
                    commit=a.commit,
                    parent=self.model.parent(wt, a),
                    raw_diff=diffs[a.commit],
                    description=header,
                    summary=summary or None,
                    source=self.project.rel(self.project.patch_path(entry)),
                    keep_offsets=not offsets,
                )
                yield entry, old_bytes, rendered, summary


class Sync:
    """The outside-changes check and the sync record, for one command (see the module)."""

    def __init__(self, model: StackModel) -> None:
        self.model = model
        self.project = model.project
        self.exports = Exports(model)

    def require_refreshed(self, wt: Git, patches: list[AppliedPatch] | None = None) -> None:
        """Refuse when an applied patch's commit differs from its file (unsaved work)."""
        self.exports.require_refreshed(wt, patches)

    def record(self, wt: Git, applied: list[AppliedPatch]) -> SyncRecord:
        """What forkpatch last wrote or read for the work tree (state.json's ``synced``).

        A state written before the record existed gets one made from what agrees now:
        every patch whose file gives its commit (or that is not applied) as it is; an
        applied patch whose commit and file differ is left out, for which side changed
        is not known."""
        if self.model.state.synced is not None:
            return self.model.state.synced
        files = {p.name for p in self.project.series.patches if p.file is not None}
        pending = {
            entry.name
            for entry, old, rendered, _summary in self.exports.exported(
                wt, [a for a in applied if a.name in files], offsets=False
            )
            if rendered.data != old
        }
        commits = {a.name: a.commit for a in applied}
        return SyncRecord(
            patches={
                e.name: FileRecord(e.file, self.project.file_blob(e), commits.get(e.name))
                for e in self.project.series.patches
                if e.file is None or e.name not in pending
            },
            order=tuple(self.project.series.names()),
        )

    def remember(
        self,
        wt: Git | None,
        names: Iterable[str] | None = None,
        *,
        unsynced: Iterable[str] = (),
        forget: Iterable[str] = (),
        commits: Mapping[str, str] | None = None,
        state: StackState | None = None,
    ) -> None:
        """Record that the work tree and the files of ``names`` (None: every entry, and
        series.yaml's order) agree now: forkpatch just wrote them from the work tree or
        read them into it. ``unsynced``: of those, patches applied in a form their file
        does not hold (conflict markers); ``forget``: entries forkpatch removed;
        ``commits``: each applied patch's commit, when the caller knows them (else the
        stack is read); ``state``: the caller's next state, written with the record in
        one write."""
        path = self.model.state.worktree
        if path is None or not (path / ".git").exists():
            if state is not None:
                self.project.write_state(state)
            return
        wt = wt or self.project.linked_worktree(path)
        applied = None
        if commits is None:
            applied = self.model.applied(wt)
            commits = {a.name: a.commit for a in applied}
        base = None
        if names is not None:
            base = self.model.state.synced or self.record(wt, applied or self.model.applied(wt))
        series = self.project.series
        skip = set(unsynced)
        chosen = series.names() if names is None else set(names)
        self.project.remember_files(
            {
                e.name: FileRecord(
                    e.file,
                    self.project.file_blob(e),
                    None if e.name in skip else commits.get(e.name),
                )
                for e in series.patches
                if e.name in chosen
            },
            full=names is None,
            base=base,
            forget=forget,
            state=state,
        )

    def outside_changes(
        self, wt: Git, applied: list[AppliedPatch] | None = None, *, edits: bool = False
    ) -> list[OutsideChange]:
        """Patch files and series.yaml entries that changed since the work tree last
        agreed with them (a `git pull`, an edit by hand), each with the side that
        changed; ``edits``: also the patches only the work tree changed."""
        applied = self.model.applied(wt) if applied is None else applied
        record = self.record(wt, applied)
        series = self.project.series
        commits = {a.name: a.commit for a in applied}
        top = applied[-1].name if applied else None
        dirty = bool(applied) and self.model.is_dirty(wt)

        def edited(name: str) -> bool:
            if name not in commits:
                return False
            rec = record.patches.get(name)
            return (dirty and name == top) or rec is None or rec.commit != commits[name]

        any_edit = any(edited(n) for n in commits)
        order = series.names()
        by_name = {p.name: p for p in series.patches}
        last = max((order.index(n) for n in commits if n in by_name), default=-1)
        gone = [n for n in record.patches if n not in by_name]
        out: list[OutsideChange] = []

        def add(kind: ChangeKind, entry: PatchEntry, *, who: str | None = None, **kw: Any) -> None:
            name = who or entry.name
            side: ChangeSide
            if kind in SERIES_KINDS:
                held = name in commits or order.index(entry.name) < last
                side = "both" if held and any_edit else "file"
            else:
                held = name in commits
                side = "both" if edited(name) else "file"
            out.append(OutsideChange(entry.name, kind, entry.file, side, held, **kw))

        for entry in series.patches:
            rec = record.patches.get(entry.name)
            blob = self.project.file_blob(entry)
            if rec is None and entry.name in record.order:
                if entry.name in commits:
                    add("modified", entry, unrecorded=True)
            elif rec is None:
                src = next((g for g in gone if blob and record.patches[g].blob == blob), None)
                if src is None:
                    add("added", entry)
                else:
                    gone.remove(src)
                    add("renamed", entry, who=src, old=src, old_file=record.patches[src].file)
            elif rec.file != entry.file and blob is None:
                # The entry names a file that is not there: a typo, not a rename.
                add("misnamed", entry, old_file=rec.file)
            elif rec.file != entry.file:
                add("renamed", entry, old_file=rec.file)
            elif blob != rec.blob:
                add("deleted" if blob is None and entry.file else "modified", entry)
            elif edits and edited(entry.name):
                out.append(OutsideChange(entry.name, "edited", entry.file, "worktree", True))
        # A file that is what export would write from the work tree agrees with it, however
        # it got so (a teammate made the same change; forkpatch was killed between writing
        # the files and its record): nothing of either side to lose.
        modified = {c.name for c in out if c.kind == "modified" and not c.unrecorded}
        if modified:
            agree = {
                entry.name
                for entry, old, rendered, _summary in self.exports.exported(
                    wt, [a for a in applied if a.name in modified], offsets=False
                )
                if rendered.data == old
            }
            out = [
                OutsideChange(c.name, "edited", c.file, "worktree", True)
                if c.name in agree and c.kind == "modified"
                else c
                for c in out
                if c.name not in agree or c.kind != "modified" or (edits and edited(c.name))
            ]
        for name in gone:
            rec = record.patches[name]
            held = name in commits
            side: ChangeSide = "both" if held and edited(name) else "file"
            out.append(OutsideChange(name, "removed", rec.file, side, held))
        recorded = [n for n in record.order if n in by_name and n in record.patches]
        now = [n for n in order if n in set(recorded)]
        for was, is_ in zip(recorded, now, strict=True):
            if was != is_:
                add("moved", series.get(is_))
                break
        return out

    def check_outside_changes(
        self, wt: Git, check: OutsideCheck, applied: list[AppliedPatch] | None = None
    ) -> list[OutsideChange]:
        """The one check, for every command that writes patches/ or series.yaml from
        the work tree or rebuilds the work tree from them, that nothing it would
        overwrite changed outside forkpatch since the work tree last agreed with it.

        A writer (``writes``: the patches whose files it writes; None: every applied
        one) refuses such a change, naming the file and the side that changed; with
        ``force`` it keeps the work tree's version, with a warning. A taker (``take``:
        apply, edit, push, rename, move rebuild the work tree from patches/) returns
        the changes it takes, and refuses when the work tree has edits of its own that
        the rebuild would lose. ``leave``: the writer leaves the changed files as they
        are (refused only where both sides changed). Returns the changes that concern
        the work tree (``check``: the command and what it asks, see :class:`OutsideCheck`)."""
        command, take, force = check.command, check.take, check.force
        found = [c for c in self.outside_changes(wt, applied) if c.applied and c.side != "worktree"]
        if not take and check.writes is not None:
            mine = set(check.writes)
            found = [c for c in found if c.kind in SERIES_KINDS or {c.name, c.old} & mine]
        if not found:
            return []
        lines = "\n".join(f"  - {c.describe()}" for c in found)
        both = [c for c in found if c.side == "both" or c.unrecorded]
        names = ", ".join(sorted({c.old or c.name for c in found}))
        # A deleted file cannot be read into the work tree, nor a file: that names
        # nothing; and a writer must not write a patch under a mistyped name.
        stuck = [c for c in found if c.kind == "misnamed" or (c.kind == "deleted" and not force)]
        if stuck:
            raise StateError(
                f"`forkpatch {command}` refused: a patch file the work tree holds is gone "
                f"(deleted outside forkpatch, or {SERIES_FILE} names a file that does not "
                f"exist); nothing was changed:\n{lines}",
                tip="; ".join(w for c in stuck if (w := c.way_out()) is not None),
            )
        if take and not both:
            return found
        if check.leave and not both:
            return found
        if not take and force:
            log.warn(
                f"--force: keeping the work tree's version of {names}, though changed outside "
                f"forkpatch:\n{lines}"
            )
            return found
        keep = (
            "keep the work tree: `forkpatch export --force` writes its version over them"
            if take
            else f"keep the work tree: `forkpatch {command} --force` writes its version over them"
        )
        if both:
            raise StateError(
                f"`forkpatch {command}` refused: patches/ or {SERIES_FILE} changed outside "
                "forkpatch (a `git pull`, an edit by hand) where the work tree has edits of "
                f"its own; nothing was changed:\n{lines}",
                tip=f"{keep}; or take the files: `forkpatch apply --force` rebuilds the work "
                f"tree from patches/ and discards its edits (save them first: `git -C "
                f"{wt.work_tree} diff {self.model.base_commit()[:12]}` shows them all)",
            )
        raise StateError(
            f"`forkpatch {command}` would overwrite what changed outside forkpatch since the "
            f"work tree last matched patches/ (a `git pull`, an edit by hand); nothing was "
            f"written:\n{lines}",
            tip="take the files: `forkpatch apply` re-applies patches/ and "
            f"{SERIES_FILE} into the work tree (it has no edits of its own to {names}, "
            f"so nothing is lost; with edits to other patches, `forkpatch export "
            f"--skip-changed` saves those first); or {keep}",
        )

    @staticmethod
    def say_taken(command: str, taken: list[OutsideChange]) -> None:
        """Tell what a command takes into the work tree (its other checks passed)."""
        if taken:
            log.info(
                f"`forkpatch {command}` takes into the work tree what changed outside "
                "forkpatch:\n" + "\n".join(f"  - {c.describe()}" for c in taken)
            )

    def take_outside_changes(
        self, wt: Git, command: str, writer: StackWriter
    ) -> list[OutsideChange]:
        """Before ``command`` works on the stack: rebuild it from patches/ and
        series.yaml (with ``writer``) when they changed outside forkpatch and the work
        tree has no edits of its own to lose (refused otherwise:
        :meth:`check_outside_changes`)."""
        applied = self.model.applied(wt)
        taken = self.check_outside_changes(wt, OutsideCheck(command, take=True), applied)
        if taken:
            self.model.guard_worktree(
                wt, f"taking the files changed outside forkpatch for `{command}`"
            )
            self.require_refreshed(wt, applied)
            self.say_taken(command, taken)
            renamed = {c.old: c.name for c in taken if c.old}
            writer.rebuild_applied({renamed.get(a.name, a.name) for a in applied})
            self.remember(wt)
        return taken
