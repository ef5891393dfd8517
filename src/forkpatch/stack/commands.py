"""The stack's commands: apply the series into a work tree, and the series edits
(new, delete, rename, move, export) that change series.yaml or patches/ and rebuild
the stack to match.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path

from forkpatch import log
from forkpatch.engine import (
    DIFF_CONFLICT_MARKER,
    Item,
    SeriesApplier,
    SeriesResult,
    commit_message,
)
from forkpatch.errors import (
    ConflictError,
    PatchApplyError,
    StateError,
    UsageError,
)
from forkpatch.git import Git, commit_date
from forkpatch.series import NAME_RE, SERIES_FILE, PatchEntry
from forkpatch.stack import worktree
from forkpatch.stack.editing import EditLoop
from forkpatch.stack.model import BRANCH, DEFAULT_WORKTREE, AppliedPatch
from forkpatch.stackstate import (
    Layout,
    dirs_of,
)


class Stack(EditLoop):
    """The editable stack of a project (see the package's docstring)."""

    def _checkout(
        self,
        head: str,
        where: Path | None,
        sparse: bool | None = None,
        touched: list[str] | None = None,
    ) -> Path:
        """Put the work tree at ``head`` (creating it): full, or sparse with ``sparse``
        (None: as it was), holding the directories of ``touched`` (default: the
        files that differ between the base and ``head``)."""
        path = where or self.worktree_path() or self.project.state_dir / DEFAULT_WORKTREE
        path = path.resolve()
        old = self.layout() if (path / ".git").exists() else Layout()
        if sparse is None:
            sparse = old.sparse
        dirs = None
        if sparse:
            if touched is None:
                raw = self.store.run(
                    "diff", "--name-only", "-z", self.project.series.base.commit, head
                ).stdout
                touched = [x.decode("utf-8", "surrogateescape") for x in raw.split(b"\0") if x]
            dirs = tuple(dirs_of(touched))
        layout = Layout(dirs=dirs, excluded=old.excluded)
        if (path / ".git").exists():
            wt = self.project.linked_worktree(path)  # never another project's work tree
            if self.state.worktree != path:
                # Not recorded (an interrupted apply, a state.json removed): checked to
                # hold nothing of anyone's before it is checked out again.
                self.interrupted_worktree(path)
            self._forget_status()
            if layout != old:
                worktree.apply_layout(wt, layout)
            self._write(wt, "checkout", "-q", "-f", "-B", BRANCH, head)
            self._write(wt, "clean", "-q", "-fdx")
        else:
            if path.exists() and any(path.iterdir()) and self.interrupted_worktree(path):
                log.warn(
                    f"{path} was left half made by an interrupted `forkpatch apply`: "
                    "removed and made again"
                )
                self.store.run("worktree", "remove", "--force", str(path), check=False)
                shutil.rmtree(path, ignore_errors=True)
                self.store.run("worktree", "prune")
            if path.exists() and any(path.iterdir()):
                raise UsageError(
                    f"{path} exists and is not empty",
                    tip="choose another --worktree DIR or remove it",
                )
            if (self.store.git_dir / "worktrees").is_dir():  # none yet: nothing to check
                self.store.run("worktree", "prune")
                other = self._stack_worktree()
                if other is not None and other != path:
                    # git would refuse with "cannot force update the branch ... checked out".
                    raise UsageError(
                        f"this project already has a work tree at {other}; forkpatch keeps "
                        f"one work tree per project, so {path} was not created",
                        tip=f"work in {other} (`forkpatch apply` re-applies the series there); "
                        f"to move it, save your work (`forkpatch export`), delete {other}, then "
                        f"run `forkpatch apply --worktree {path}` again",
                    )
            wt = worktree.add_worktree(self.store, path, BRANCH, head, layout)
        layout, _changes = worktree.settle(wt, layout, self.fork.describe())
        self._save(
            self.state.with_(
                worktree=path,
                base=self.project.series.base.commit,
                layout=layout,
                editing=None,
                merge_bases={},
            )
        )
        return path

    def interrupted_worktree(self, path: Path) -> bool:
        """Whether ``path`` is a work tree of this project that an interrupted `apply`
        left before it was recorded: forkpatch's own directory with no work tree in it
        yet, or one linked to this store that was still being made (git's
        ``initializing`` mark, an index git cannot read) or holds nothing of anyone's.
        A linked work tree with uncommitted changes is refused, naming them."""
        if self.state.worktree == path:
            return False
        dotgit = path / ".git"
        if not dotgit.exists() and not dotgit.is_symlink():
            # Killed before git wrote .git: only forkpatch's own directory is taken.
            return path == (self.project.state_dir / DEFAULT_WORKTREE).resolve()
        try:
            wt = self.project.linked_worktree(path)
        except StateError:
            return False  # another project's: never touched
        locked = wt.git_dir / "locked"
        if locked.is_file() and "initializing" in locked.read_text(
            encoding="utf-8", errors="replace"
        ):
            return True
        probe = wt.run("status", "--porcelain", "-z", check=False)
        if probe.returncode != 0:
            return True  # the checkout never finished
        # Only files missing (a checkout cut short): nothing of anyone's to lose.
        changes = [c for c in worktree.status(wt) if "D" not in c.xy] if probe.stdout else []
        if changes:
            raise StateError(
                f"{path} is a work tree of this project that state.json does not record, "
                f"and it has uncommitted changes: {worktree.describe_changes(changes)}; "
                "nothing was changed",
                tip=f"save them (`git -C {path} stash push -u`, or copy the files), then "
                f"remove {path} and run `forkpatch apply` again",
            )
        return True

    def _stack_worktree(self) -> Path | None:
        """The work tree that has the stack branch checked out, if one exists."""
        listing = self.store.run("worktree", "list", "--porcelain", "-z").stdout
        path: Path | None = None
        for field in listing.split(b"\0"):
            if field.startswith(b"worktree "):
                path = Path(field[len(b"worktree ") :].decode("utf-8", "surrogateescape"))
            elif field == f"branch refs/heads/{BRANCH}".encode() and path is not None:
                return path.resolve() if path.exists() else None
        return None

    def apply(
        self,
        where: Path | None = None,
        force: bool = False,
        upto: str | None = None,
        sparse: bool | None = None,
    ) -> tuple[Path, SeriesResult]:
        """Create (or re-create) the work tree with every patch applied.

        ``sparse`` True checks out only the directories the series touches, False
        every file, None keeps what an existing work tree has (a new one is full).
        """
        series = self.project.series
        base = self.fork.verify_base(series.base.tag, series.base.commit)
        existing = self.worktree_path()
        if (
            existing is not None
            and (existing / ".git").exists()
            and (where is None or where.resolve() == existing)
        ):
            wt = self.wt(check_base=not force)
            # Both checks only read: a file changed on both sides is named as such first.
            taken = [] if force else self.check_outside_changes(wt, "apply", take=True)
            self.guard_worktree(wt, "re-applying the series", force=force, can_force=True)
            if not force:
                self.require_refreshed(wt)
                self.say_taken("apply", taken)
        entries = list(series.patches)
        if upto is not None:
            entries = entries[: series.index(upto) + 1]
        result = SeriesApplier(self.store, base, step_commits=True).run(
            self.project.items(entries), write=True
        )
        saved_bases = self.state.merge_bases
        path = self._checkout(result.head or base, where, sparse, self._touched(result))
        self.remember(self.project.linked_worktree(path))  # every file was read just now
        # A patch this did not apply keeps the merge base `push --merge` needs for it
        # (saved by `refresh --force` or `import --merge`).
        applied = {r.name for r in result.results if r.status not in ("conflict", "blocked")}
        kept = {n: v for n, v in saved_bases.items() if n not in applied}
        if kept:
            self._save(self.state.with_(merge_bases=kept))
        bad = result.first_conflict()
        if bad is not None:
            raise PatchApplyError(
                bad.describe_failure(f"{series.base.label} with the patches below it")
                + f"\nthe work tree {path} holds the patches below it",
                tip=f"fix patches/{series.get(bad.name).file}, or run `forkpatch push --merge` "
                "to bring it in with conflict markers and resolve them",
            )
        return path, result

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
        wt = self.wt()
        applied = self.applied(wt)
        position = series.index(applied[-1].name) + 1 if applied else 0
        entry = PatchEntry(name=name, file=file, summary=summary or f"{name}")
        head = self.head(wt)
        commit = wt.commit_tree(
            wt.tree_of(head),
            [head],
            commit_message(entry, ""),
            date=commit_date(self.store, self.base_commit()),
        )
        patches = list(series.patches)
        patches.insert(position, entry)
        changes = self.changes(wt)
        self.project.commit({entry: ("", b"")}, series.with_patches(patches))
        wt.update_ref("HEAD", commit)
        self._forget_status()  # status is against HEAD, which moved
        self.remember(wt, [entry.name])
        self._settle_editing(wt)
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
        if self.worktree_path() is not None:
            wt = self.wt()
            applied = self.applied(wt)
            names = [a.name for a in applied]
            if entry.name in names and names[-1] == entry.name:
                self.pop(force=False)
            elif entry.name in names:
                new_head = self._without(wt, applied, entry.name)
        new_series = series.with_patches(p for p in series.patches if p.name != entry.name)
        self.project.commit({entry: None} if entry.file and not keep_file else None, new_series)
        if new_head is not None and wt is not None:
            # The files are written: the work tree follows (a kill before this point
            # leaves the stack as it was, and `forkpatch apply` rebuilds it from them).
            self._write(wt, "reset", "-q", "--hard", new_head)
            self.remember(wt, None, forget=[entry.name])
        else:
            self.remember(wt, [], forget=[entry.name])
        if wt is not None:
            self._settle_editing(wt)

    def _without(self, wt: Git, applied: list[AppliedPatch], name: str) -> str:
        """The stack's new head with ``name`` taken out from under the patches above it,
        made in memory; refused, changing nothing, when the work tree holds unsaved
        work or a patch above no longer applies without it."""
        names = [a.name for a in applied]
        idx = names.index(name)
        self.guard_worktree(wt, f"deleting '{name}' from under the patches above it")
        taken = self.check_outside_changes(wt, "delete", take=True, applied=applied)
        if taken:
            raise StateError(
                "patches/ or series.yaml changed outside forkpatch since the work tree last "
                "matched them:\n" + "\n".join(f"  - {c.describe()}" for c in taken),
                tip="take them first with `forkpatch apply`, then delete again",
            )
        self.require_refreshed(wt, applied)
        above = [self.project.series.get(a.name) for a in applied[idx + 1 :]]
        parent = self._parent(wt, applied[idx])
        result = SeriesApplier(self.store, self.base_commit(), step_commits=True).run(
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
        self._widen(wt, self._touched(result))
        return result.head or parent

    def stack_for_insert(self, position: int) -> set[str] | None:
        """Before patches are inserted into series.yaml at index ``position``: when that
        falls among the applied patches, the names to rebuild the stack with afterwards
        (:meth:`after_series_change`), checked first to lose nothing; else None."""
        if not self._has_worktree() or self.base_mismatch() is not None:
            return None
        wt = self.wt()
        applied = self.applied(wt)
        if position >= len(applied):
            return None
        self.guard_worktree(wt, "inserting patches among the applied ones")
        self.require_refreshed(wt, applied)
        return {a.name for a in applied}

    def after_series_change(self, rebuild: set[str] | None) -> None:
        """After series.yaml changed: the stack rebuilt with ``rebuild`` (from
        :meth:`stack_for_insert`), or only the editing position settled."""
        if not self._has_worktree() or self.base_mismatch() is not None:
            return
        if rebuild is not None:
            self._rebuild_applied(rebuild)
            self.remember(None)  # the stack was rebuilt from every file
        else:
            self._settle_editing(self.wt())

    def rebuild_on(
        self, base: str, names: Iterable[str], made: Mapping[str, str] | None = None
    ) -> None:
        """After series.yaml moved to ``base`` (a rebase): the stack on ``base``, up to
        the prefix of the series that holds every one of ``names`` still in it.
        ``made``: the commits the rebase made on ``base`` for the patches (name ->
        commit), taken as the stack's instead of applying the files again."""
        path = self.worktree_path()
        if path is None or not (path / ".git").exists():
            return
        self._save(self.state.with_(base=base, editing=None))
        self._rebuild_applied(set(names), made=made)
        self.remember(None)

    def rename(self, old: str, new: str) -> PatchEntry:
        if not NAME_RE.match(new):
            raise UsageError(f"'{new}' is not a valid patch name")
        series = self.project.series
        entry = series.get(old)
        if new in series.names():
            raise UsageError(f"a patch named '{new}' already exists")
        names: set[str] = set()
        if self.worktree_path() is not None:
            wt = self.wt()
            applied = self.applied(wt)
            self.guard_worktree(wt, "renaming")
            taken = self.check_outside_changes(wt, "rename", take=True, applied=applied)
            self.require_refreshed(wt, applied)
            self.say_taken("rename", taken)
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
        self._rebuild_applied(names, {entry.name: new})
        self.remember(None)  # the stack was rebuilt from every file
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
        if self.worktree_path() is not None:
            wt = self.wt()
            applied = self.applied(wt)
            self.guard_worktree(wt, "reordering")
            taken = self.check_outside_changes(wt, "move", take=True, applied=applied)
            self.require_refreshed(wt, applied)
            self.say_taken("move", taken)
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
        now = self._rebuild_applied(names)
        self.remember(None)
        extra = [n for n in now if n not in names]
        if extra:
            log.info(
                f"also applied, to keep the stack a prefix of the new order: {', '.join(extra)}"
            )
        return new_series.names()

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
        tree last matched it is never overwritten: refused (:meth:`check_outside_changes`)
        unless ``force`` (the work tree's version wins); ``skip_changed`` leaves those
        files as they are and writes the others (still refused where both changed).
        """
        wt = self.wt()
        applied = self.applied(wt)
        outside = self.check_outside_changes(
            wt, "export", force=force, leave=skip_changed, applied=applied
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
        if self.is_dirty(wt):
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
                self._refuse_commits_on_step(wt, a)
        unresolved: list[str] = []
        for entry, old_bytes, rendered, summary in self._exported(wt, mine, offsets=offsets):
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
        self.remember(wt, [a.name for a in applied if a.name in by_name and a.name not in skipped])
        changed = [
            e.name for e in writes if self.project.rel(self.project.patch_path(e)) in written
        ]
        return changed, moved
