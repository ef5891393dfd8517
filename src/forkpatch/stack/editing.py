"""The edit loop: push and pop patches, and edit one in the middle (the patches
above it are popped and re-applied by the refresh: :mod:`forkpatch.stack.refresh`).

Every write of patches/ is computed in memory first and written as one unit; the
work tree moves last, so that a command killed half-way is finished by running it
again.
"""

from __future__ import annotations

import os
import stat
from dataclasses import replace
from pathlib import Path

from forkpatch import log
from forkpatch.engine import Item, SeriesApplier, TreeState
from forkpatch.errors import ConflictError, PatchApplyError, StateError, UsageError
from forkpatch.git import Git
from forkpatch.intree import remove_in_tree, write_in_tree
from forkpatch.results import PatchResult
from forkpatch.stack.model import StackModel
from forkpatch.stack.sync import Sync
from forkpatch.stack.writer import StackWriter
from forkpatch.stackstate import Editing
from forkpatch.trailer import commit_message


class EditLoop:
    """push, pop and edit, on the command's model, writer and sync record."""

    def __init__(self, model: StackModel, writer: StackWriter, sync: Sync) -> None:
        self.model = model
        self.writer = writer
        self.sync = sync
        self.project = model.project
        self.store = model.store

    def push(
        self, name: str | None = None, all_: bool = False, merge: bool = False
    ) -> list[PatchResult]:
        wt = self.model.wt()
        self.model.guard_worktree(wt, "pushing")
        self.sync.take_outside_changes(wt, "push", self.writer)
        applied = self.model.applied(wt)
        todo = self.model.unapplied(applied)
        series = self.project.series
        applied_names = [a.name for a in applied]
        # Only patches that come after the applied prefix in series order can be pushed.
        order = series.names()
        if applied_names and applied_names != order[: len(applied_names)]:
            raise StateError(
                "the applied patches are not a prefix of series.yaml's order",
                tip="run `forkpatch apply --force` to rebuild the stack",
            )
        if name is not None:
            series.get(name)  # an unknown name is an error of its own, applied or not
        if not todo:
            if all_ and name is None:  # --all asks for a state that already holds
                log.info("all patches are already applied")
                return []
            raise UsageError("all patches are applied", tip="`forkpatch top` shows the top")
        if name is not None:
            idx = [p.name for p in todo].index(name) if name in [p.name for p in todo] else None
            if idx is None:
                raise UsageError(f"patch '{name}' is already applied")
            todo = todo[: idx + 1]
        elif not all_:
            todo = todo[:1]
        head = self.model.head(wt)
        applier = SeriesApplier(
            self.store,
            self.model.base_commit(),
            three_way=merge,
            merge_bases=self.writer.merge_bases() if merge else None,
            labels=("stack", "patch"),
            step_commits=True,
        )
        result = applier.run(self.project.items(todo), write=True, parent=head)
        new_head = result.head or head
        if new_head != head:
            self.writer.widen(wt, self.writer.touched(result))
            self.writer.move(wt, new_head)
        saved = self.model.state
        if saved.merge_bases:
            done = {r.name for r in result.results if r.status not in ("conflict", "blocked")}
            self.writer.save(
                saved.with_(
                    merge_bases={n: v for n, v in saved.merge_bases.items() if n not in done}
                )
            )
        bad = result.first_conflict()
        pushed = [r.name for r in result.results if r.status not in ("conflict", "blocked")]
        if bad is not None:
            if merge and any(c.merged is not None for c in bad.conflicts):
                self._materialise_conflict(wt, bad)
                # Its commit holds markers its file does not: not in sync with it.
                self.sync.remember(wt, [*pushed, bad.name], unsynced=[bad.name])
                raise ConflictError(
                    f"patch '{bad.name}' is in the work tree with conflict markers in: "
                    + ", ".join(c.path for c in bad.conflicts),
                    tip=f"resolve them in {wt.work_tree}, then run `forkpatch refresh`",
                )
            self.sync.remember(wt, pushed)
            raise PatchApplyError(
                bad.describe_failure(
                    f"the top of the stack ({applied_names[-1] if applied_names else 'base'})"
                ),
                tip=(
                    "no version of the files it was made on was found (not in this "
                    "project's git history, nor on the series' base): fix the patch file, "
                    f"or re-make it on this stack (`forkpatch new {bad.name}-2`, edit, "
                    "`forkpatch refresh`)"
                    if merge
                    else "run `forkpatch push --merge` to bring it in with conflict markers, "
                    "or fix the patch file"
                ),
            )
        self.sync.remember(wt, pushed)
        self.writer.settle_editing(wt)
        return list(result.results)

    def _materialise_conflict(self, wt: Git, bad: PatchResult) -> None:
        """Commit the conflicting patch with its markers so refresh can amend it."""
        entry = self.project.series.get(bad.name)
        patch = self.project.load_patch(entry)
        assert patch is not None and wt.work_tree is not None
        self.writer.widen(wt, [p for fp in patch.files for p in (fp.old_path, fp.new_path) if p])
        # Apply what applies, then write the merged files with their markers. Every write
        # refuses a symbolic link at any component (a tag or an earlier patch may have
        # turned a patched directory into a link that points outside the tree).
        root = wt.work_tree
        self.model.forget()
        written = [c.path for c in bad.conflicts if c.merged is not None]
        for c in bad.conflicts:
            if c.merged is not None:
                write_in_tree(root, c.path, c.merged, mode=_file_mode(root, c.path))
        clean_files = {fp.path for fp in patch.files} - {c.path for c in bad.conflicts}
        if clean_files:
            partial = replace(
                patch, files=tuple(fp for fp in patch.files if fp.path in clean_files)
            )
            with self.store.reader() as reader:
                res = SeriesApplier(self.store, self.model.base_commit()).apply_patch(
                    TreeState(self.store, reader, self.model.head(wt)),
                    Item(entry=entry, patch=partial),
                )[1]
            for ch in res:
                written.append(ch.path)
                if ch.is_delete:
                    remove_in_tree(root, ch.path)
                else:
                    write_in_tree(
                        root,
                        ch.path,
                        ch.data or b"",
                        mode=0o755 if ch.mode == "100755" else 0o644,
                        symlink=ch.mode == "120000",
                    )
        self.writer.commit_worktree(
            wt,
            parent=self.model.head(wt),
            message=commit_message(entry, patch.header),
            written=written,
        )

    def pop(self, name: str | None = None, all_: bool = False, force: bool = False) -> list[str]:
        wt = self.model.wt()
        applied = self.model.applied(wt)
        if name is not None:
            self.project.series.get(name)  # an unknown name is an error of its own
        if not applied:
            raise UsageError("no patch is applied", tip="`forkpatch push` applies the next one")
        if all_:
            keep = 0
        elif name is not None:
            names = [a.name for a in applied]
            if name not in names:
                raise UsageError(f"patch '{name}' is not applied")
            keep = names.index(name) + 1
            if keep == len(applied):
                return []
        else:
            keep = len(applied) - 1
        popped = applied[keep:]
        self.model.guard_worktree(wt, "popping", force=force, can_force=True)
        if not force:
            self.sync.require_refreshed(wt, popped)
        target = applied[keep - 1].commit if keep else self.model.base_commit()
        # A tree this command found clean holds no untracked file for `git clean` to
        # take (the move itself removes what it empties); one popped with --force may.
        clean = self.model.known_clean(wt)
        self.writer.move(wt, target)
        if not clean:
            self.writer.write(wt, "clean", "-q", "-fd")
        self.writer.save(self.model.state.with_(editing=None))
        return [p.name for p in reversed(popped)]  # in the order they came off, top first

    def edit(self, name: str) -> Path:
        wt = self.model.wt()
        entry = self.project.series.get(name)
        if entry.file is None:
            raise UsageError(
                f"'{name}' is a build step: it has no diff to edit (its work happens when "
                "a wheel is built)",
                tip=f"`forkpatch push {name}` or `forkpatch pop {name}` moves the stack to it",
            )
        self.sync.take_outside_changes(wt, "edit", self.writer)
        applied = self.model.applied(wt)
        names = [a.name for a in applied]
        if entry.name not in names:
            self.push(entry.name)
            return wt.work_tree  # type: ignore[return-value]
        idx = names.index(entry.name)
        above = applied[idx + 1 :]
        if above:  # the top is edited where it is: nothing in the work tree moves
            self.model.guard_worktree(wt, f"going to '{name}'")
            self.sync.require_refreshed(wt, above)
            self.writer.move(wt, applied[idx].commit)
            state = self.model.state
            before = state.editing.above if state.editing is not None else ()
            editing = Editing(entry.name, tuple(a.name for a in above) + before)
            self.writer.save(state.with_(editing=editing))
            self.writer.settle_editing(wt, applied=names[: idx + 1])
        return wt.work_tree  # type: ignore[return-value]


def _file_mode(root: Path, rel: str) -> int:
    """The permission bits for rewriting ``root/rel``: its own when it is a regular file."""
    try:
        st = os.lstat(root / rel)
    except OSError:
        return 0o644
    return 0o755 if stat.S_ISREG(st.st_mode) and st.st_mode & 0o100 else 0o644
