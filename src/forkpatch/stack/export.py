"""export: every applied patch's commit written back to its file, patches/ and
series.yaml as one unit (the work tree does not move)."""

from __future__ import annotations

from dataclasses import replace

from forkpatch import log
from forkpatch.engine import DIFF_CONFLICT_MARKER
from forkpatch.errors import ConflictError
from forkpatch.series import SERIES_FILE, PatchEntry
from forkpatch.stack.model import StackModel
from forkpatch.stack.sync import OutsideCheck, Sync


class Export:
    """export, on the command's model and sync record."""

    def __init__(self, model: StackModel, sync: Sync) -> None:
        self.model = model
        self.sync = sync
        self.project = model.project

    def export(
        self, offsets: bool = False, force: bool = False, skip_changed: bool = False
    ) -> tuple[list[str], list[str]]:
        """Write every applied patch's commit back to its file.

        Returns (the names whose files changed, the names left as they are because
        only their line numbers moved). Those are rewritten only with ``offsets``:
        their files still give the same tree, and rewriting them would turn a
        one-patch edit into a review of every patch above it.

        A commit that adds conflict markers its patch file does not have (a
        ``push --merge`` not yet resolved) is refused, as ``refresh`` refuses it,
        unless ``force``; nothing is written then.

        A patch file (or series.yaml entry) changed outside forkpatch since the work
        tree last matched it is never overwritten: refused
        (:meth:`~forkpatch.stack.sync.Sync.check_outside_changes`) unless ``force``
        (the work tree's version wins); ``skip_changed`` leaves those
        files as they are and writes the others (still refused where both changed).
        """
        wt = self.model.wt()
        applied = self.model.applied(wt)
        outside = self.sync.check_outside_changes(
            wt, OutsideCheck("export", force=force, leave=skip_changed), applied
        )
        skipped = {c.old or c.name for c in outside} if skip_changed else set()
        if skipped:
            log.warn(
                "left as changed outside forkpatch (`forkpatch apply` takes them into the "
                f"work tree): {', '.join(sorted(skipped))}"
            )
        # Entries series.yaml no longer has under the work tree's name: nothing to write
        # them to (their commits stay in the work tree until `forkpatch apply`).
        removed = {c.old or c.name for c in outside if c.kind in ("removed", "renamed")}
        removed = {n for n in removed if n not in {p.name for p in self.project.series.patches}}
        if force and removed:
            log.warn(
                f"not written, {SERIES_FILE} no longer names them: {', '.join(sorted(removed))} "
                "(`forkpatch apply` takes that into the work tree)"
            )
        if self.model.is_dirty(wt):
            log.warn(
                "the work tree has uncommitted changes; they are not exported "
                "(`forkpatch refresh` folds them into the top patch)"
            )
        series = self.project.series
        by_name = {p.name: p for p in series.patches}
        summaries: dict[str, str] = {}
        writes: dict[PatchEntry, bytes] = {}
        mine = []
        moved: list[str] = []
        for a in applied:
            if a.name in skipped or (force and a.name in removed):
                continue  # the file (or entry) changed outside forkpatch: see above
            if a.name not in by_name:
                series.get(a.name)  # a commit for a patch series.yaml does not have: an error
            if by_name[a.name].file is not None:
                mine.append(a)
            else:
                self.model.refuse_commits_on_step(wt, a)
        unresolved: list[str] = []
        for entry, old_bytes, rendered, summary in self.sync.exports.exported(
            wt, mine, offsets=offsets
        ):
            writes[entry] = rendered.data
            if (
                not force
                and DIFF_CONFLICT_MARKER.search(rendered.data)
                and not DIFF_CONFLICT_MARKER.search(old_bytes or b"")
            ):
                unresolved.append(entry.name)
            if rendered.offsets_kept:
                moved.append(entry.name)
            if summary and summary != entry.summary:
                summaries[entry.name] = summary
        if unresolved:
            assert wt.work_tree is not None
            raise ConflictError(
                f"patch{'es' if len(unresolved) > 1 else ''} {', '.join(unresolved)} would be "
                "written with conflict markers its file does not have (a `push --merge` "
                "not resolved yet); nothing was exported",
                tip=f"resolve the markers in {wt.work_tree} and run `forkpatch refresh`, "
                "or pass --force to export them as they are",
            )
        new_series = (
            series.with_patches(
                replace(p, summary=summaries[p.name]) if p.name in summaries else p
                for p in series.patches
            )
            if summaries
            else None
        )
        # Every file and series.yaml as one unit: a kill leaves all old or all new.
        written = set(self.project.commit(writes, new_series))
        self.sync.remember(
            wt, [a.name for a in applied if a.name in by_name and a.name not in skipped]
        )
        changed = [
            e.name for e in writes if self.project.rel(self.project.patch_path(e)) in written
        ]
        return changed, moved
