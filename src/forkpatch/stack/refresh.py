"""refresh: the top patch written back to its file from the work tree, and the
patches an ``edit`` popped re-applied on top of its new version.

It is two steps. :meth:`Refresh.plan` computes everything in memory (the work tree
committed as the top patch's new commit, its file rendered, the patches above
re-applied and rendered, the merge bases to keep) into a frozen :class:`RefreshPlan`,
and writes nothing of patches/; :meth:`Refresh.write` writes it in order: every patch
file and series.yaml as one unit, then the work tree, then the record. A refresh killed
before the files were written is finished by running `forkpatch refresh` again.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType

from forkpatch import log
from forkpatch.engine import (
    CONFLICT_MARKER,
    DIFF_CONFLICT_MARKER,
    SeriesApplier,
    SeriesResult,
    canonical_diff,
    diffs_of_commits,
)
from forkpatch.errors import ConflictError, PatchApplyError, UsageError
from forkpatch.git import Git
from forkpatch.patchtext import PatchTexts
from forkpatch.series import PatchEntry, Series
from forkpatch.stack import worktree
from forkpatch.stack.model import AppliedPatch, StackModel
from forkpatch.stack.sync import OutsideCheck, Sync
from forkpatch.stack.writer import StackWriter
from forkpatch.stackstate import StackState
from forkpatch.trailer import parse_commit_message


@dataclass(frozen=True)
class RefreshPlan:
    """What a refresh writes, computed before anything is written but the top patch's
    new commit (HEAD moves to it: the work tree's files stay as they are)."""

    writes: tuple[tuple[PatchEntry, bytes], ...]  # the patch files, top first
    series: Series | None  # series.yaml with the top's new summary (None: unchanged)
    head: str | None  # where the work tree goes: the patches above re-applied (None: stays)
    touched: tuple[str, ...]  # the paths they touch (a sparse work tree grows to them)
    commits: Mapping[str, str]  # each applied patch's commit afterwards
    remembered: tuple[str, ...]  # the patches that agree with their files afterwards
    state: StackState | None  # state.json to write with the record (None: as it is)
    edit_done: bool  # the edit is over: no editing position, the layout as widened


@dataclass(frozen=True)
class _Top:
    """The top patch committed from the work tree."""

    patch: AppliedPatch
    entry: PatchEntry
    commit: str  # its new commit
    parent: str
    raw_diff: bytes
    diffstat: str  # git's, of the same diff
    summary: str
    header: str


class Refresh:
    """refresh, on the command's model, writer and sync record (see the module)."""

    def __init__(self, model: StackModel, writer: StackWriter, sync: Sync) -> None:
        self.model = model
        self.writer = writer
        self.sync = sync
        self.project = model.project
        self.store = model.store

    def refresh(self, force: bool = False, offsets: bool = False) -> list[str]:
        """Write the top patch (with work-tree changes folded in) back to its file;
        returns the names whose files changed.

        When the patch was opened with ``edit`` and patches above it were popped,
        they are re-applied on top of the new version first; if one no longer
        applies nothing in patches/ changes and the user is told where. A patch
        above whose file still gives its commit, its hunks only at other lines,
        is not rewritten unless ``offsets``: a one-patch edit is a one-file review.
        ``force``: save the top patch alone (the patches above stay unapplied), and
        with conflict markers or over a file changed outside forkpatch.
        """
        wt = self.model.wt()
        applied = self.model.applied(wt)
        if not applied:
            raise UsageError("no patch is applied", tip="`forkpatch push` or `forkpatch new NAME`")
        plan = self.plan(wt, applied, force=force, offsets=offsets)
        return self.write(wt, plan)

    def plan(
        self, wt: Git, applied: list[AppliedPatch], *, force: bool, offsets: bool
    ) -> RefreshPlan:
        """Everything the refresh writes, computed in memory (see :class:`RefreshPlan`)."""
        top = self._commit_top(wt, applied, force=force)
        state = self.model.state
        above = list(state.above(top.entry.name))
        texts = PatchTexts(self.store)
        texts.know_stat(top.parent, top.commit, top.diffstat)
        old_bytes = self.project.patch_bytes(top.entry)
        data = texts.render(
            old_bytes,
            commit=top.commit,
            parent=top.parent,
            raw_diff=top.raw_diff,
            description=top.header,
            summary=top.summary or None,
        ).data
        writes: list[tuple[PatchEntry, bytes]] = [(top.entry, data)]
        # Patches further up that are not applied at all were made on the old version
        # of this one: keep their images on it, the merge base `push --merge` needs.
        applied_names = {a.name for a in applied}
        order = self.project.series.names()
        later = [
            n
            for n in order[order.index(top.entry.name) + 1 :]
            if n not in applied_names and n not in above
        ]
        keep_later = bool(later) and data != old_bytes
        # --force saves this patch alone; the patches above stay unapplied (their
        # files untouched) until `push --merge` brings them back: they need theirs too.
        keep = (later if keep_later else []) + (above if force else [])
        # The merge bases (an in-memory apply of the whole series on its base) serve
        # both the saved bases and a 3-way merge of a patch above; made only if asked.
        bases = _Lazy(self.writer.merge_bases)
        if keep:
            state = self.writer.with_merge_bases(state, keep, dict(bases))
        result: SeriesResult | None = None
        if above and force:
            log.warn(
                f"saved '{top.entry.name}' alone; not re-applied: {', '.join(above)} "
                "(`forkpatch push --merge --all` brings them back to resolve)"
            )
        elif above:
            result = self._reapply(top, above, bases)
            writes += self._rendered_above(result, above, texts, offsets=offsets)
        # The stack as it stands afterwards, known without asking git again.
        commits = {a.name: a.commit for a in applied[:-1]} | {top.entry.name: top.commit}
        # Every patch this refresh puts into the work tree agrees with its file then, a
        # build step above (no file: its commit is all there is) included.
        remembered = [e.name for e, _d in writes]
        if result is not None:
            commits |= {r.name: r.commit for r in result.results if r.commit is not None}
            remembered += [
                r.name for r in result.results if r.commit is not None and r.name not in remembered
            ]
        return RefreshPlan(
            writes=tuple(writes),
            series=self._with_summary(top),
            head=None if result is None else result.head or top.commit,
            touched=() if result is None else tuple(self.writer.touched(result)),
            commits=MappingProxyType(commits),
            remembered=tuple(remembered),
            state=state if above or keep_later else None,
            edit_done=bool(above),
        )

    def write(self, wt: Git, plan: RefreshPlan) -> list[str]:
        """Write ``plan``: the files, the work tree, the record, in that order; returns
        the names whose files changed."""
        # All patch files and series.yaml as one unit: a kill leaves all old or all new.
        # The work tree and state.json move only afterwards, so that a refresh killed
        # before the files were written is finished by running `forkpatch refresh` again.
        written = set(self.project.commit(dict(plan.writes), plan.series))
        if plan.head is not None:
            self.writer.widen(wt, list(plan.touched))
            self.writer.move(wt, plan.head)
        final = plan.state
        if final is not None and plan.edit_done:
            final = final.with_(layout=self.model.state.layout, editing=None)  # as widened
        self.sync.remember(wt, list(plan.remembered), commits=plan.commits, state=final)
        return [
            e.name
            for e, _d in plan.writes
            if self.project.rel(self.project.patch_path(e)) in written
        ]

    def _commit_top(self, wt: Git, applied: list[AppliedPatch], *, force: bool) -> _Top:
        """The work tree committed as the top patch's new version (HEAD moves to it),
        refused first where that would overwrite what changed outside forkpatch, where
        the top is a build step, or (unless ``force``) where it holds conflict markers."""
        top = applied[-1]
        self.sync.check_outside_changes(
            wt, OutsideCheck("refresh", writes=frozenset({top.name}), force=force), applied
        )
        entry = self.project.series.get(top.name)
        if entry.file is None:
            raise UsageError(
                f"the top of the stack, '{top.name}', is a build step: it has no diff to refresh",
                tip="start a patch for work-tree changes with `forkpatch new NAME`, then "
                "`forkpatch refresh`",
            )
        # Phantom files out first; new files in directories a sparse work tree does
        # not hold yet must be seen by `git add`.
        changes = self.model.changes(wt)
        ignored = self.model.ignored(wt)
        self.writer.widen(wt, [c.path for c in changes if c.xy == "??"])
        parent = self.model.parent(wt, top)
        message = self.model.message(wt, top).strip() + "\n"
        if not force:
            self._refuse_markers(wt, changes)
        # A deletion already staged has nothing left to add (and no path to name).
        changed = [c.path for c in changes if c.xy != "D "]
        new = self.writer.commit_worktree(wt, parent=parent, message=message, changed=changed)
        self._say_ignored(wt, top.name, ignored)
        _name, summary, header = parse_commit_message(message)
        raw, stat = wt.diff_and_stat(parent, new)
        if not force and DIFF_CONFLICT_MARKER.search(canonical_diff(raw)):
            raise ConflictError(
                f"patch '{top.name}' still contains conflict markers",
                tip="resolve them, or pass --force to keep them",
            )
        return _Top(top, entry, new, parent, raw, stat, summary, header)

    def _reapply(self, top: _Top, above: list[str], bases: Mapping[str, Images]) -> SeriesResult:
        """The patches ``edit`` popped, applied in memory on the top's new commit
        (3-way where they need it); refused, nothing written, where one no longer applies."""
        name = top.entry.name
        applier = SeriesApplier(
            self.store,
            self.model.base_commit(),
            three_way=True,
            merge_bases=bases,
            labels=("your edit", "patch"),
            step_commits=True,
        )
        entries = [self.project.series.get(n) for n in above]
        result = applier.run(self.project.items(entries), write=True, parent=top.commit)
        bad = result.first_conflict()
        if bad is not None:
            raise PatchApplyError(
                f"your change to '{name}' breaks the patch above it:\n"
                + bad.describe_failure(f"the new '{name}'")
                + "\nnothing in patches/ was changed; your edit is kept in the work tree",
                tip=f"adjust the edit and run `forkpatch refresh` again, or run `forkpatch "
                f"refresh --force` to save '{name}' alone and then `forkpatch push "
                "--merge` to resolve the patches above",
            )
        return result

    def _rendered_above(
        self, result: SeriesResult, above: list[str], texts: PatchTexts, *, offsets: bool
    ) -> list[tuple[PatchEntry, bytes]]:
        """The files of the re-applied patches. One that applied as it is (at its lines,
        or only at others and not asked to move: ``offsets``) keeps its file's bytes: it
        still gives its new commit."""
        entries = [self.project.series.get(n) for n in above]
        kept_as_is = {"clean"} if offsets else {"clean", "offset"}
        redo = [
            r.commit
            for r, e in zip(result.results, entries, strict=True)
            if r.commit is not None and e.file is not None and r.status not in kept_as_is
        ]
        diffs = diffs_of_commits(self.store, redo)
        writes: list[tuple[PatchEntry, bytes]] = []
        moved: list[str] = []
        for r, e in zip(result.results, entries, strict=True):
            if r.commit is None or e.file is None:
                continue  # upstreamed, or a build step: no file
            current = self.project.patch_bytes(e)
            if r.status in kept_as_is and current is not None:
                if r.status == "offset":
                    moved.append(e.name)
                writes.append((e, current))
                continue
            rendered = texts.render(
                current, commit=r.commit, raw_diff=diffs[r.commit], keep_offsets=not offsets
            )
            if rendered.offsets_kept:
                moved.append(e.name)
            writes.append((e, rendered.data))
        if moved:
            log.info(
                f"not rewritten, only their line numbers moved: {', '.join(moved)} "
                "(status shows them as offset; `forkpatch export --offsets` rewrites them)"
            )
        return writes

    def _with_summary(self, top: _Top) -> Series | None:
        """series.yaml with the top's summary as its commit now says (None: the same)."""
        if not top.summary or top.summary == top.entry.summary:
            return None
        series = self.project.series
        return series.with_patches(
            replace(p, summary=top.summary) if p.name == top.entry.name else p
            for p in series.patches
        )

    @staticmethod
    def _say_ignored(wt: Git, name: str, left_out: list[str]) -> None:
        """New files the fork's ignore rules keep out of the patch are named, never
        dropped in silence: the user may have meant one for the patch."""
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
