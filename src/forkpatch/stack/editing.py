"""The edit loop: push and pop patches, refresh the top one from the work tree, and
edit one in the middle (the patches above it are re-applied by the refresh).

Every write of patches/ is computed in memory first and written as one unit; the
work tree moves last, so that a command killed half-way is finished by running it
again.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path

from forkpatch import log
from forkpatch.engine import (
    CONFLICT_MARKER,
    DIFF_CONFLICT_MARKER,
    Item,
    SeriesApplier,
    TreeState,
    canonical_diff,
    commit_message,
    diffs_of_commits,
)
from forkpatch.errors import (
    ConflictError,
    PatchApplyError,
    StateError,
    UsageError,
)
from forkpatch.fsutil import remove_in_tree, write_in_tree
from forkpatch.git import Git, commit_date
from forkpatch.patchtext import PatchTexts
from forkpatch.results import PatchResult
from forkpatch.series import PatchEntry
from forkpatch.stack import worktree
from forkpatch.stack.model import StackModel
from forkpatch.stackstate import (
    Editing,
    StackState,
)
from forkpatch.trailer import parse_commit_message


class EditLoop(StackModel):
    def push(
        self, name: str | None = None, all_: bool = False, merge: bool = False
    ) -> list[PatchResult]:
        wt = self.wt()
        self.guard_worktree(wt, "pushing")
        self.take_outside_changes(wt, "push")
        applied = self.applied(wt)
        todo = self.unapplied(applied)
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
        head = self.head(wt)
        applier = SeriesApplier(
            self.store,
            self.base_commit(),
            three_way=merge,
            merge_bases=self._merge_bases() if merge else None,
            labels=("stack", "patch"),
            step_commits=True,
        )
        result = applier.run(self.project.items(todo), write=True, parent=head)
        new_head = result.head or head
        if new_head != head:
            self._widen(wt, self._touched(result))
            self._write(wt, "reset", "-q", "--hard", new_head)
        saved = self.state
        if saved.merge_bases:
            done = {r.name for r in result.results if r.status not in ("conflict", "blocked")}
            self._save(
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
                self.remember(wt, [*pushed, bad.name], unsynced=[bad.name])
                raise ConflictError(
                    f"patch '{bad.name}' is in the work tree with conflict markers in: "
                    + ", ".join(c.path for c in bad.conflicts),
                    tip=f"resolve them in {wt.work_tree}, then run `forkpatch refresh`",
                )
            self.remember(wt, pushed)
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
        self.remember(wt, pushed)
        self._settle_editing(wt)
        return list(result.results)

    def _materialise_conflict(self, wt: Git, bad: PatchResult) -> None:
        """Commit the conflicting patch with its markers so refresh can amend it."""
        entry = self.project.series.get(bad.name)
        patch = self.project.load_patch(entry)
        assert patch is not None and wt.work_tree is not None
        self._widen(wt, [p for fp in patch.files for p in (fp.old_path, fp.new_path) if p])
        # Apply what applies, then write the merged files with their markers. Every write
        # refuses a symbolic link at any component (a tag or an earlier patch may have
        # turned a patched directory into a link that points outside the tree).
        root = wt.work_tree
        self._forget_status()
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
                res = SeriesApplier(self.store, self.base_commit()).apply_patch(
                    TreeState(self.store, reader, self.head(wt)), Item(entry=entry, patch=partial)
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
        self._commit_worktree(
            wt,
            parent=self.head(wt),
            message=commit_message(entry, patch.header),
            written=written,
        )

    def pop(self, name: str | None = None, all_: bool = False, force: bool = False) -> list[str]:
        wt = self.wt()
        applied = self.applied(wt)
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
        self.guard_worktree(wt, "popping", force=force, can_force=True)
        if not force:
            self.require_refreshed(wt, popped)
        target = applied[keep - 1].commit if keep else self.base_commit()
        self._write(wt, "reset", "-q", "--hard", target)
        self._write(wt, "clean", "-q", "-fd")
        self._save(self.state.with_(editing=None))
        return [p.name for p in reversed(popped)]  # in the order they came off, top first

    def _commit_worktree(
        self,
        wt: Git,
        *,
        parent: str,
        message: str,
        written: Iterable[str] = (),
        changed: Iterable[str] | None = None,
    ) -> str:
        """Commit the work tree; ``written``: the files forkpatch wrote there itself,
        staged whatever the ignore rules say; ``changed``: the work tree's changes as
        `git status` named them, staged alone (no second walk of the whole tree)."""
        if changed is None:
            self._write(wt, "add", "-A")
        else:
            # What status names is tracked, or new and not ignored: staged whatever the
            # ignore rules say (a tracked file in an ignored directory is still the patch's).
            self._forget_status()
            wt.stage(changed)
        wt.stage(written)
        self._forget_status()
        tree = wt.write_tree()
        commit = wt.commit_tree(
            tree, [parent], message, date=commit_date(self.store, self.base_commit())
        )
        wt.update_ref("HEAD", commit, message="forkpatch refresh")
        self._forget_status()  # status is against HEAD, which moved
        return commit

    @staticmethod
    def _say_ignored(wt: Git, name: str) -> None:
        """New files the fork's ignore rules keep out of the patch are named, never
        dropped in silence: the user may have meant one for the patch."""
        left_out = wt.ignored_new_files()
        if not left_out:
            return
        shown = ", ".join(left_out[:5]) + (
            f" and {len(left_out) - 5} more" if len(left_out) > 5 else ""
        )
        log.warn(
            f"{len(left_out)} new path(s) in {wt.work_tree} are ignored (by the fork's "
            f".gitignore, or as editor files) and not in patch '{name}': {shown}; "
            "to put one in the patch: "
            f"`git -C {wt.work_tree} add -f PATH`, then `forkpatch refresh`"
        )

    def refresh(self, force: bool = False, offsets: bool = False) -> list[str]:
        """Write the top patch (with work-tree changes folded in) back to its file.

        When the patch was opened with ``edit`` and patches above it were popped,
        they are re-applied on top of the new version first; if one no longer
        applies nothing in patches/ changes and the user is told where. A patch
        above whose file still gives its commit, its hunks only at other lines,
        is not rewritten unless ``offsets``: a one-patch edit is a one-file review.
        """
        wt = self.wt()
        applied = self.applied(wt)
        if not applied:
            raise UsageError("no patch is applied", tip="`forkpatch push` or `forkpatch new NAME`")
        top = applied[-1]
        self.check_outside_changes(wt, "refresh", writes=[top.name], force=force, applied=applied)
        entry = self.project.series.get(top.name)
        if entry.file is None:
            raise UsageError(
                f"the top of the stack, '{top.name}', is a build step: it has no diff to refresh",
                tip="start a patch for work-tree changes with `forkpatch new NAME`, then "
                "`forkpatch refresh`",
            )
        # Phantom files out first; new files in directories a sparse work tree does
        # not hold yet must be seen by `git add`.
        changes = self.changes(wt)
        self._widen(wt, [c.path for c in changes if c.xy == "??"])
        parent = self._parent(wt, top)
        message = self._message(wt, top).strip() + "\n"
        if not force:
            self._refuse_markers(wt, changes)
        # A deletion already staged has nothing left to add (and no path to name).
        changed = [c.path for c in changes if c.xy != "D "]
        new = self._commit_worktree(wt, parent=parent, message=message, changed=changed)
        self._say_ignored(wt, top.name)
        _name, summary, header = parse_commit_message(message)
        raw = wt.diff_trees(parent, new)
        diff = canonical_diff(raw)
        if not force and DIFF_CONFLICT_MARKER.search(diff):
            raise ConflictError(
                f"patch '{top.name}' still contains conflict markers",
                tip="resolve them, or pass --force to keep them",
            )
        state = self.state
        above_names = list(state.above(top.name))
        texts = PatchTexts(self.store)
        old_bytes = self._file_bytes(entry)
        writes: list[tuple[PatchEntry, bytes]] = [
            (
                entry,
                texts.render(
                    old_bytes,
                    commit=new,
                    parent=parent,
                    raw_diff=raw,
                    description=header,
                    summary=summary or None,
                ).data,
            )
        ]
        new_head: str | None = None  # where the work tree goes once the files are written
        # Patches further up that are not applied at all were made on the old version
        # of this one: keep their images on it, the merge base `push --merge` needs.
        applied_names = {a.name for a in applied}
        order = self.project.series.names()
        later = [
            n
            for n in order[order.index(top.name) + 1 :]
            if n not in applied_names and n not in above_names
        ]
        keep_later = bool(later) and writes[0][1] != old_bytes
        # --force saves this patch alone; the patches above stay unapplied (their
        # files untouched) until `push --merge` brings them back: they need theirs too.
        keep = (later if keep_later else []) + (above_names if force else [])
        # The merge bases (an in-memory apply of the whole series on its base) serve
        # both the saved bases and a 3-way merge of a patch above; made only if asked.
        bases = _Lazy(self._merge_bases)
        if keep:
            state = self._with_merge_bases(state, keep, dict(bases))
        if above_names and force:
            log.warn(
                f"saved '{top.name}' alone; not re-applied: {', '.join(above_names)} "
                "(`forkpatch push --merge --all` brings them back to resolve)"
            )
        elif above_names:
            above_entries = [self.project.series.get(n) for n in above_names]
            applier = SeriesApplier(
                self.store,
                self.base_commit(),
                three_way=True,
                merge_bases=bases,
                labels=("your edit", "patch"),
                step_commits=True,
            )
            result = applier.run(self.project.items(above_entries), write=True, parent=new)
            bad = result.first_conflict()
            if bad is not None:
                raise PatchApplyError(
                    f"your change to '{top.name}' breaks the patch above it:\n"
                    + bad.describe_failure(f"the new '{top.name}'")
                    + "\nnothing in patches/ was changed; your edit is kept in the work tree",
                    tip=f"adjust the edit and run `forkpatch refresh` again, or run `forkpatch "
                    f"refresh --force` to save '{top.name}' alone and then `forkpatch push "
                    "--merge` to resolve the patches above",
                )
            # A patch that applied as it is (at its lines, or only at others and not
            # asked to move) keeps its file's bytes: it still gives its new commit.
            kept_as_is = {"clean"} if offsets else {"clean", "offset"}
            redo = [
                r.commit
                for r, e in zip(result.results, above_entries, strict=True)
                if r.commit is not None and e.file is not None and r.status not in kept_as_is
            ]
            diffs = diffs_of_commits(self.store, redo)
            moved: list[str] = []
            for r, e in zip(result.results, above_entries, strict=True):
                if r.commit is None or e.file is None:
                    continue  # upstreamed, or a build step: no file
                current = self._file_bytes(e)
                if r.status in kept_as_is and current is not None:
                    if r.status == "offset":
                        moved.append(e.name)
                    writes.append((e, current))
                    continue
                rendered = texts.render(
                    current,
                    commit=r.commit,
                    raw_diff=diffs[r.commit],
                    keep_offsets=not offsets,
                )
                if rendered.offsets_kept:
                    moved.append(e.name)
                writes.append((e, rendered.data))
            if moved:
                log.info(
                    f"not rewritten, only their line numbers moved: {', '.join(moved)} "
                    "(status shows them as offset; `forkpatch export --offsets` rewrites them)"
                )
            new_head = result.head or new
        new_series = None
        if summary and summary != entry.summary:
            series = self.project.series
            new_series = series.with_patches(
                replace(p, summary=summary) if p.name == entry.name else p for p in series.patches
            )
        # All patch files and series.yaml as one unit: a kill leaves all old or all new.
        # The work tree and state.json move only afterwards, so that a refresh killed
        # before the files were written is finished by running `forkpatch refresh` again.
        written = set(self.project.commit(dict(writes), new_series))
        final: StackState | None = None
        # The stack as it stands now, known without asking git again.
        commits = {a.name: a.commit for a in applied[:-1]} | {top.name: new}
        if above_names:
            if new_head is not None:
                self._widen(wt, self._touched(result))
                self._write(wt, "reset", "-q", "--hard", new_head)
                commits |= {r.name: r.commit for r in result.results if r.commit is not None}
            # _widen may have grown the layout
            final = state.with_(layout=self.state.layout, editing=None)
        elif keep_later:
            final = state
        # Every patch this refresh put into the work tree agrees with its file now, a
        # build step above (no file: its commit is all there is) included.
        rewritten = [e.name for e, _d in writes]
        if new_head is not None:
            rewritten += [
                r.name for r in result.results if r.commit is not None and r.name not in rewritten
            ]
        self.remember(wt, rewritten, commits=commits, state=final)
        return [
            e.name for e, _d in writes if self.project.rel(self.project.patch_path(e)) in written
        ]

    @staticmethod
    def _refuse_markers(wt: Git, changes: list[worktree.Change]) -> None:
        """Refuse a file the refresh would save with conflict markers in it (``changes``:
        the work tree's, against HEAD)."""
        assert wt.work_tree is not None
        for change in changes:
            path = worktree.fs_path(wt.work_tree, change.path)
            # lstat: a symbolic link is a link in the patch, never a file to read through.
            if _regular(path) and CONFLICT_MARKER.search(path.read_bytes()):
                raise ConflictError(
                    f"{path} still contains conflict markers",
                    tip="resolve them, or pass --force to keep them",
                )

    def edit(self, name: str) -> Path:
        wt = self.wt()
        entry = self.project.series.get(name)
        if entry.file is None:
            raise UsageError(
                f"'{name}' is a build step: it has no diff to edit (its work happens when "
                "a wheel is built)",
                tip=f"`forkpatch push {name}` or `forkpatch pop {name}` moves the stack to it",
            )
        self.take_outside_changes(wt, "edit")
        applied = self.applied(wt)
        names = [a.name for a in applied]
        if entry.name not in names:
            self.push(entry.name)
            return wt.work_tree  # type: ignore[return-value]
        idx = names.index(entry.name)
        above = applied[idx + 1 :]
        if above:  # the top is edited where it is: nothing in the work tree moves
            self.guard_worktree(wt, f"going to '{name}'")
            self.require_refreshed(wt, above)
            self._write(wt, "reset", "-q", "--hard", applied[idx].commit)
            state = self.state
            before = state.editing.above if state.editing is not None else ()
            editing = Editing(entry.name, tuple(a.name for a in above) + before)
            self._save(state.with_(editing=editing))
            self._settle_editing(wt, applied=names[: idx + 1])
        return wt.work_tree  # type: ignore[return-value]


Images = dict[str, tuple[bytes | None, bytes | None]]


class _Lazy(Mapping[str, Images]):
    """A mapping made by ``make`` on first use (the merge bases: costly, rarely read)."""

    def __init__(self, make: Callable[[], dict[str, Images]]) -> None:
        self._make = make
        self._data: dict[str, Images] | None = None

    def _got(self) -> dict[str, Images]:
        if self._data is None:
            self._data = self._make()
        return self._data

    def __getitem__(self, name: str) -> Images:
        return self._got()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._got())

    def __len__(self) -> int:
        return len(self._got())


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _file_mode(root: Path, rel: str) -> int:
    """The permission bits for rewriting ``root/rel``: its own when it is a regular file."""
    try:
        st = os.lstat(root / rel)
    except OSError:
        return 0o644
    return 0o755 if stat.S_ISREG(st.st_mode) and st.st_mode & 0o100 else 0o644
