"""The series edits: new, delete, rename and move change series.yaml (and patches/)
as one unit, and the stack is rebuilt to match; an import inserting patches among the
applied ones is checked first and rebuilt after (:meth:`SeriesEdits.stack_for_insert`,
:meth:`SeriesEdits.after_series_change`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from forkpatch import log
from forkpatch.engine import Item, SeriesApplier
from forkpatch.errors import PatchApplyError, StateError, UsageError
from forkpatch.git import Git, commit_date
from forkpatch.series import NAME_RE, PatchEntry
from forkpatch.stack import worktree
from forkpatch.stack.editing import EditLoop
from forkpatch.stack.model import AppliedPatch, StackModel
from forkpatch.stack.sync import OutsideCheck, Sync
from forkpatch.stack.writer import StackWriter
from forkpatch.trailer import commit_message


class SeriesEdits:
    """new, delete, rename, move, on the command's model, writer, sync record and edit
    loop (a delete of the top patch pops it)."""

    def __init__(self, model: StackModel, writer: StackWriter, sync: Sync, loop: EditLoop) -> None:
        self.model = model
        self.writer = writer
        self.sync = sync
        self.loop = loop
        self.project = model.project
        self.store = model.store

    def new(self, name: str, summary: str | None = None) -> PatchEntry:
        if not NAME_RE.match(name):
            raise UsageError(
                f"'{name}' is not a valid patch name: use lower-case letters, "
                "digits, '.', '_' and '-'"
            )
        series = self.project.series
        if name in series.names():
            raise UsageError(f"a patch named '{name}' already exists")
        file = f"{name}.patch"
        if (self.project.patches_dir / file).exists():
            raise UsageError(
                f"patches/{file} already exists (an orphan?)",
                tip="import it with `forkpatch import` or remove it",
            )
        wt = self.model.wt()
        applied = self.model.applied(wt)
        position = series.index(applied[-1].name) + 1 if applied else 0
        entry = PatchEntry(name=name, file=file, summary=summary or f"{name}")
        head = self.model.head(wt)
        commit = wt.commit_tree(
            wt.tree_of(head),
            [head],
            commit_message(entry, ""),
            date=commit_date(self.store, self.model.base_commit()),
        )
        patches = list(series.patches)
        patches.insert(position, entry)
        changes = self.model.changes(wt)
        self.project.commit({entry: ("", b"")}, series.with_patches(patches))
        wt.update_ref("HEAD", commit)
        self.model.forget()  # status is against HEAD, which moved
        self.sync.remember(wt, [entry.name])
        self.writer.settle_editing(wt)
        if changes:
            # Nothing in the work tree moves: what was not refreshed stays, and belongs
            # to the new top patch from now on.
            log.warn(
                f"the work tree's uncommitted changes stay in {wt.work_tree}: "
                f"{worktree.describe_changes(changes)}; `forkpatch refresh` now writes them "
                f"into '{name}', the new top"
            )
        return entry

    def delete(self, name: str, keep_file: bool = False) -> None:
        """Remove a patch: its entry and its file as one unit. Applied below others, it
        comes out of the stack and the patches above are re-applied without it (checked
        in memory first: one that needs it is named and nothing changes); unsaved
        work in the work tree refuses, as for every command that rewrites it."""
        series = self.project.series
        entry = series.get(name)
        applied: list[AppliedPatch] = []
        wt: Git | None = None
        new_head: str | None = None
        if self.model.worktree_path() is not None:
            wt = self.model.wt()
            applied = self.model.applied(wt)
            names = [a.name for a in applied]
            if entry.name in names and names[-1] == entry.name:
                self.loop.pop(force=False)
            elif entry.name in names:
                new_head = self._without(wt, applied, entry.name)
        new_series = series.with_patches(p for p in series.patches if p.name != entry.name)
        self.project.commit({entry: None} if entry.file and not keep_file else None, new_series)
        if new_head is not None and wt is not None:
            # The files are written: the work tree follows (a kill before this point
            # leaves the stack as it was, and `forkpatch apply` rebuilds it from them).
            self.writer.move(wt, new_head)
            self.sync.remember(wt, None, forget=[entry.name])
        else:
            self.sync.remember(wt, [], forget=[entry.name])
        if wt is not None:
            self.writer.settle_editing(wt)

    def _without(self, wt: Git, applied: list[AppliedPatch], name: str) -> str:
        """The stack's new head with ``name`` taken out from under the patches above it,
        made in memory; refused, changing nothing, when the work tree holds unsaved
        work or a patch above no longer applies without it."""
        names = [a.name for a in applied]
        idx = names.index(name)
        self.model.guard_worktree(wt, f"deleting '{name}' from under the patches above it")
        taken = self.sync.check_outside_changes(wt, OutsideCheck("delete", take=True), applied)
        if taken:
            raise StateError(
                "patches/ or series.yaml changed outside forkpatch since the work tree last "
                "matched them:\n" + "\n".join(f"  - {c.describe()}" for c in taken),
                tip="take them first with `forkpatch apply`, then delete again",
            )
        self.sync.require_refreshed(wt, applied)
        above = [self.project.series.get(a.name) for a in applied[idx + 1 :]]
        parent = self.model.parent(wt, applied[idx])
        result = SeriesApplier(self.store, self.model.base_commit(), step_commits=True).run(
            self.project.items(above), write=True, parent=parent
        )
        bad = result.first_conflict()
        if bad is not None:
            raise PatchApplyError(
                f"patch '{bad.name}' above '{name}' does not apply without it:\n"
                + bad.describe_failure(f"the stack without '{name}'")
                + "\nnothing was changed",
                tip=f"delete '{bad.name}' first (or together: `forkpatch delete {bad.name}` "
                f"then `forkpatch delete {name}`), or keep '{name}'",
            )
        self.writer.widen(wt, self.writer.touched(result))
        return result.head or parent

    def stack_for_insert(self, position: int) -> set[str] | None:
        """Before patches are inserted into series.yaml at index ``position``: when that
        falls among the applied patches, the names to rebuild the stack with afterwards
        (:meth:`after_series_change`), checked first to lose nothing; else None."""
        if not self.model.has_worktree() or self.model.base_mismatch() is not None:
            return None
        wt = self.model.wt()
        applied = self.model.applied(wt)
        if position >= len(applied):
            return None
        self.model.guard_worktree(wt, "inserting patches among the applied ones")
        self.sync.require_refreshed(wt, applied)
        return {a.name for a in applied}

    def after_series_change(self, rebuild: set[str] | None) -> None:
        """After series.yaml changed: the stack rebuilt with ``rebuild`` (from
        :meth:`stack_for_insert`), or only the editing position settled."""
        if not self.model.has_worktree() or self.model.base_mismatch() is not None:
            return
        if rebuild is not None:
            self.writer.rebuild_applied(rebuild)
            self.sync.remember(None)  # the stack was rebuilt from every file
        else:
            self.writer.settle_editing(self.model.wt())

    def rename(self, old: str, new: str) -> PatchEntry:
        if not NAME_RE.match(new):
            raise UsageError(f"'{new}' is not a valid patch name")
        series = self.project.series
        entry = series.get(old)
        if new in series.names():
            raise UsageError(f"a patch named '{new}' already exists")
        names: set[str] = set()
        if self.model.worktree_path() is not None:
            wt = self.model.wt()
            applied = self.model.applied(wt)
            self.model.guard_worktree(wt, "renaming")
            taken = self.sync.check_outside_changes(wt, OutsideCheck("rename", take=True), applied)
            self.sync.require_refreshed(wt, applied)
            self.sync.say_taken("rename", taken)
            names = {new if a.name == entry.name else a.name for a in applied}
        new_file = entry.file
        if entry.file is not None and entry.file == f"{entry.name}.patch":
            new_file = f"{new}.patch"
            if (self.project.patches_dir / new_file).exists():
                raise UsageError(f"patches/{new_file} already exists")
        # A summary that was only the name (what `new` writes without -m) follows it.
        summary = new if entry.summary == entry.name else entry.summary
        renamed = replace(entry, name=new, file=new_file, summary=summary)
        files: dict[Path, bytes | Path | None] = {}
        if entry.file and new_file != entry.file:
            # The bytes move as they are: the file is renamed, not re-rendered.
            src = self.project.patch_path(entry)
            files = {
                self.project.patch_path(renamed): self.project.raw_patch_bytes(entry) or b"",
                src: None,
            }
        self.project.commit(
            series=series.with_patches(
                renamed if p.name == entry.name else p for p in series.patches
            ),
            extra=files,
        )
        self.writer.rebuild_applied(names, {entry.name: new})
        self.sync.remember(None)  # the stack was rebuilt from every file
        return renamed

    def move(
        self,
        name: str,
        *,
        before: str | None = None,
        after: str | None = None,
        position: int | None = None,
    ) -> list[str]:
        series = self.project.series
        entry = series.get(name)
        others = [p for p in series.patches if p.name != entry.name]
        for option, other in (("--before", before), ("--after", after)):
            if other is not None and series.get(other).name == entry.name:
                raise UsageError(
                    f"cannot move '{name}' {option} itself; nothing was changed",
                    tip=f"name another patch: `forkpatch move {name} {option} OTHER` "
                    f"(`forkpatch status` lists the order), or `--to N`",
                )
        if before is not None:
            idx = [p.name for p in others].index(series.get(before).name)
        elif after is not None:
            idx = [p.name for p in others].index(series.get(after).name) + 1
        elif position is not None:
            if not 1 <= position <= len(series.patches):
                raise UsageError(f"position must be between 1 and {len(series.patches)}")
            idx = position - 1
        else:
            raise UsageError("say where: --before NAME, --after NAME or --to N")
        others.insert(idx, entry)
        new_series = series.with_patches(others)
        names: set[str] = set()
        if self.model.worktree_path() is not None:
            wt = self.model.wt()
            applied = self.model.applied(wt)
            self.model.guard_worktree(wt, "reordering")
            taken = self.sync.check_outside_changes(wt, OutsideCheck("move", take=True), applied)
            self.sync.require_refreshed(wt, applied)
            self.sync.say_taken("move", taken)
            names = {a.name for a in applied}
        # The new order must apply before anything is written.
        items = [Item(e, self.project.load_patch(e)) for e in new_series.patches]
        result = SeriesApplier(self.store, self.project.series.base.commit).run(items)
        bad = result.first_conflict()
        if bad is not None:
            raise PatchApplyError(
                bad.describe_failure("the reordered series") + "\nnothing was changed",
                tip="patches that depend on each other must keep their order",
            )
        self.project.save_series(new_series)
        now = self.writer.rebuild_applied(names)
        self.sync.remember(None)
        extra = [n for n in now if n not in names]
        if extra:
            log.info(
                f"also applied, to keep the stack a prefix of the new order: {', '.join(extra)}"
            )
        return new_series.names()
