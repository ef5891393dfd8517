"""The stack's writing side: the git commands that move the work tree, state.json
written whole, a sparse work tree widened, the stack rebuilt from patches/ or put
back, the editing position settled, the merge bases `push --merge` needs.

Everything here changes the work tree or state.json; it holds the command's
:class:`~forkpatch.stack.model.StackModel` and tells it to ask git again after each
write (:meth:`StackModel.forget`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from forkpatch.engine import SeriesApplier, SeriesResult, restack
from forkpatch.errors import PatchApplyError
from forkpatch.git import Begun, Git, commit_date
from forkpatch.series import PatchEntry, Series
from forkpatch.stack import mergebase, worktree
from forkpatch.stack.model import BRANCH, StackModel
from forkpatch.stackstate import Editing, Layout, StackPosition, StackState, dirs_of

Images = dict[str, tuple[bytes | None, bytes | None]]


class StackWriter:
    """What changes the work tree and state.json, for one command (see the module)."""

    def __init__(self, model: StackModel) -> None:
        self.model = model
        self.project = model.project
        self.store = model.store
        # A move begun ahead (:meth:`begin_move`): its target and git's reset, running.
        self._moving: tuple[str, Begun] | None = None

    def save(self, state: StackState) -> None:
        self.project.write_state(state)

    def _save_layout(self, layout: Layout) -> None:
        if layout != self.model.state.layout:
            self.save(self.model.state.with_(layout=layout))

    def write(self, wt: Git, *args: str) -> None:
        """A git command that changes the work tree (its status is asked again after)."""
        self.model.forget()
        with worktree.objects_named():
            wt.run(*args)

    def move(self, wt: Git, target: str) -> None:
        """``git reset --hard target`` of the work tree: in process where this command
        found the tree clean and git is not needed for the paths
        (:func:`forkpatch.stack.worktree.move`), else git's own. A move to ``target``
        begun ahead (:meth:`begin_move`) is waited for instead."""
        if self._moving is not None:
            began = self._moving[0]
            self.end_move()
            if began == target:
                return
        clean = self.model.known_clean(wt)
        layout = self.model.layout()
        self.model.forget()
        with worktree.objects_named():
            if clean and worktree.move(wt, self.store, target, layout):
                return
            wt.run("reset", "-q", "--hard", target)

    def begin_move(self, wt: Git, target: str) -> None:
        """Start :meth:`move` to ``target`` now, to run beside the command's own work (a
        second core writes the files meanwhile), where git's ``reset --hard`` is how it
        would move: a full work tree this command found clean, with more paths to write
        than the in-process move takes. :meth:`move` to the same target waits for it,
        :meth:`end_move` on a way out; elsewhere nothing is begun (it moves as usual)."""
        if self._moving is not None or self.model.layout().sparse:
            return
        if not self.model.known_clean(wt):
            return
        head = self.model.head(wt)
        if len(wt.objects.raw_changes(head, target)) <= worktree.MOVE_IN_PROCESS_PATHS:
            return
        self.model.forget()
        self._moving = (target, wt.begin("reset", "-q", "--hard", target))

    def end_move(self) -> None:
        """Wait for the move begun ahead, if any (never left half done; its failure is
        raised as git's own reset's would be)."""
        moving, self._moving = self._moving, None
        if moving is not None:
            self.model.forget()
            with worktree.objects_named():
                moving[1].result()

    def widen(self, wt: Git, paths: list[str] | None = None) -> None:
        """A sparse work tree grows to every directory the applied patches (and
        ``paths``) touch, so that what is in a patch can always be seen and edited."""
        layout = self.model.layout()
        if not layout.sparse:
            return
        if paths is None:
            raw = wt.run("diff", "--name-only", "-z", self.model.base_commit(), "HEAD").stdout
            paths = [x.decode("utf-8", "surrogateescape") for x in raw.split(b"\0") if x]
        if layout.covers(paths):
            return
        new = layout.with_dirs(dirs_of(paths))
        self.model.forget()
        worktree.apply_layout(wt, new)
        self._save_layout(new)

    def merge_bases(self) -> dict[str, Images]:
        """Each patch's pre/post file images on the series' own base: the 3-way base."""
        base = self.project.series.base.commit
        res = SeriesApplier(self.store, base).run(
            self.project.items(), write=False, stop_at_conflict=False
        )
        bases = {
            r.name: r.images
            for r in res.results
            if r.images and r.status not in ("conflict", "blocked")
        }
        # Patches left unapplied by `refresh --force` keep the images they had
        # on the old version of the patch below them: their true merge base, while
        # their file's diff still applies there (a teammate's version may not).
        saved = self.model.state.merge_bases
        found: dict[str, Images] = {}
        if saved:
            with self.store.reader() as reader:
                for name, files in saved.items():
                    found[name] = {
                        path: tuple(None if oid is None else reader.blob(oid) for oid in pair)  # type: ignore[misc]
                        for path, pair in files.items()
                    }
        # A patch that does not apply on the series' base as it is (a teammate's version,
        # made on other versions of the patches below): the files it was made on.
        for entry in self.project.series.patches:
            if entry.file is None or (entry.name in bases and entry.name not in found):
                continue
            patch = self.project.load_patch(entry)
            assert patch is not None
            images = mergebase.on_saved(patch, found[entry.name]) if entry.name in found else None
            if images is None and entry.name not in bases:
                images = mergebase.from_history(self.project, base, entry, patch)
                images = images or mergebase.alone_on_base(self.project, base, entry, patch)
            if images is not None:
                bases[entry.name] = images
        return bases

    def with_merge_bases(
        self,
        state: StackState,
        names: list[str],
        bases: dict[str, Images] | None = None,
    ) -> StackState:
        """``state`` remembering ``names``' current images (as blobs in the store) for
        `push --merge` (``bases``: :meth:`merge_bases` when the caller has it already)."""
        bases = self.merge_bases() if bases is None else bases
        saved = dict(state.merge_bases)
        for name in names:
            if name in bases:
                saved[name] = {
                    path: (
                        None if pair[0] is None else self.store.hash_blob(pair[0]),
                        None if pair[1] is None else self.store.hash_blob(pair[1]),
                    )
                    for path, pair in bases[name].items()
                }
        return state.with_(merge_bases=saved)

    @staticmethod
    def touched(result: SeriesResult) -> list[str]:
        """Every path the patches of ``result`` touch."""
        return [p for r in result.results for p in r.files]

    def settle_editing(
        self,
        wt: Git,
        renames: dict[str, str] | None = None,
        applied: list[str] | None = None,
    ) -> None:
        """Make the editing position match the stack after any command that changed it.

        ``edit`` pops the patches above the edited one and remembers them so that
        ``refresh`` re-applies them. Whatever happens to the stack since (a ``new``
        patch on top, a ``push``, a rename, a move or an import into the series, a
        deletion), the position is: the top applied patch is the one being edited,
        and the patches to re-apply are every unapplied one after it in series order,
        up to the last one ``edit`` popped; with none left there is no edit pending.
        ``renames``: old name -> new name; ``applied``: the applied patches' names when
        the caller knows them."""
        state = self.model.state
        editing = state.editing
        if editing is None:
            return
        renames = renames or {}
        order = self.project.series.names()
        if applied is None:
            applied = [a.name for a in self.model.applied(wt)]
        pending = {renames.get(n, n) for n in editing.above} & set(order)
        settled = None
        if applied and renames.get(editing.patch, editing.patch) in applied and pending:
            start = order.index(applied[-1]) + 1 if applied[-1] in order else len(order)
            end = max(order.index(n) for n in pending) + 1
            above = [n for n in order[start:end] if n not in applied]
            if above:
                settled = Editing(applied[-1], tuple(above))
        if settled != editing:
            self.save(state.with_(editing=settled))

    def rebuild_applied(
        self,
        names: set[str],
        renames: dict[str, str] | None = None,
        *,
        made: Mapping[str, str] | None = None,
    ) -> list[str]:
        """Re-create the work tree's stack from the files after a change of series.yaml:
        the shortest prefix of the (new) order that holds every name in ``names``, so
        that nothing applied before is left unapplied (and the editing position moved
        with it; ``renames``: old name -> new). ``made``: commits made for these
        patches on the base already (a rebase's, whose commits the files were written
        from): the stack is made of them (:func:`forkpatch.engine.restack`). Returns
        the names applied."""
        if self.model.worktree_path() is None:
            return []
        wt = self.model.wt()
        series = self.project.series
        order = series.names()
        base = self.model.base_commit()
        entries, head = self.restacked(series, base, names, made)
        count = len(entries)
        if head is not None:
            touched = self.store.objects.changed_paths(base, head)
        else:
            result = SeriesApplier(self.store, base, step_commits=True).run(
                self.project.items(entries), write=True
            )
            if not result.ok:
                bad = result.first_conflict()
                assert bad is not None
                raise PatchApplyError(bad.describe_failure("the rebuilt stack"))
            head = result.head or base
            touched = self.touched(result)
        self.widen(wt, touched)
        self.move(wt, head)
        self.settle_editing(wt, renames)
        return order[:count]

    def restacked(
        self, series: Series, base: str, names: set[str], made: Mapping[str, str] | None
    ) -> tuple[list[PatchEntry], str | None]:
        """The entries :meth:`rebuild_applied` applies (the shortest prefix of
        ``series`` holding every one of ``names``) and their stack's head on ``base``
        made of ``made`` (None: the files must be applied)."""
        order = series.names()
        count = max((order.index(n) + 1 for n in names if n in order), default=0)
        entries = list(series.patches[:count])
        return entries, restack(self.store, base, entries, made) if made else None

    def commit_worktree(
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
        written = list(written)
        ignored = self.model.ignored(wt) if changed is not None else None
        tree = None
        if changed is None:
            self.write(wt, "add", "-A")
        else:
            # What status names is tracked, or new and not ignored: staged whatever the
            # ignore rules say (a tracked file in an ignored directory is still the patch's).
            changed = list(changed)
            status = self.model.known_changes(wt)
            layout = self.model.layout()
            self.model.forget()
            if status is not None:
                tree = worktree.stage(wt, self.store, [*changed, *written], status, layout)
            if tree is None:
                wt.stage(changed)
        if tree is None:
            wt.stage(written)
            self.model.forget()
            tree = wt.write_tree()
        commit = wt.commit_tree(
            tree, [parent], message, date=commit_date(self.store, self.model.base_commit())
        )
        wt.update_ref("HEAD", commit, message="forkpatch refresh")
        if ignored is None:
            self.model.forget()  # status is against HEAD, which moved
        else:
            # All that status named is staged, ``written`` too (forkpatch's own files,
            # taken whatever ignores them): the tree is as its new HEAD.
            taken = set(written)
            self.model.committed(wt, [p for p in ignored if p not in taken])
        return commit

    def put_back(self, position: StackPosition) -> None:
        """Move the stack back to ``position`` (an aborted rebase)."""
        path = self.model.worktree_path()
        if path is None or not (path / ".git").exists():
            return
        wt = self.model.wt(check_base=False)  # moving it to that base is the point
        if self.model.head(wt) != position.head:
            self.write(wt, "checkout", "-q", "-f", "-B", BRANCH, position.head)
            self.write(wt, "clean", "-q", "-fd")
        if self.model.state.base != position.base:
            self.save(self.model.state.with_(base=position.base))
