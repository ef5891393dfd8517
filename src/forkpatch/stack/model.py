"""The stack as data and the checks every command runs.

Where the work tree is and on which base, which patches are applied (one ``git log``),
what the work tree holds that is in no object (one ``git status`` per command), what
changed in patches/ and series.yaml outside forkpatch, and the verbs a rebase needs to
move the stack (:meth:`StackModel.position`, :meth:`~StackModel.guard_move`,
:meth:`~StackModel.put_back`). The commands that change the stack build on it
(:mod:`forkpatch.stack.editing`, :mod:`forkpatch.stack.commands`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forkpatch import log
from forkpatch.errors import (
    PatchApplyError,
    StateError,
)
from forkpatch.git import Git
from forkpatch.project import Project
from forkpatch.series import SERIES_FILE, PatchEntry
from forkpatch.stack import worktree
from forkpatch.stackstate import (
    Editing,
    FileRecord,
    Layout,
    StackPosition,
    StackState,
    SyncRecord,
    dirs_of,
)
from forkpatch.trailer import parse_commit_message

if TYPE_CHECKING:
    from forkpatch.engine import SeriesResult
    from forkpatch.patchtext import Rendered

# The engine and the patch texts load with the first command that applies or writes a
# patch: reading the stack (top, status) needs neither.

BRANCH = "forkpatch/stack"
DEFAULT_WORKTREE = "worktree"


@dataclass(frozen=True)
class AppliedPatch:
    name: str
    commits: tuple[str, ...]  # the trailer commit first, then hand-made commits on top
    parent: str = ""  # the first commit's parent ("" when not known: ask git)
    message: str = ""  # the first (trailer) commit's message

    @property
    def commit(self) -> str:
        return self.commits[-1]

    @property
    def first(self) -> str:
        return self.commits[0]


# Changes to series.yaml's list of entries (the others are a patch file's).
SERIES_KINDS = frozenset({"added", "removed", "moved"})


@dataclass(frozen=True)
class OutsideChange:
    """A patch file or series.yaml entry that differs from what forkpatch last wrote or
    read for the work tree (:class:`forkpatch.stackstate.SyncRecord`), and which side
    changed: ``"file"`` (patches/ or series.yaml only), ``"worktree"`` (only the work
    tree: edits not written to patches/ yet) or ``"both"``."""

    name: str  # the patch as series.yaml names it now (as the work tree names it: removed)
    kind: str  # modified | deleted | misnamed | added | renamed | removed | moved | edited
    file: str | None  # its file in patches/ now (None: none)
    side: str
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


class StackModel:
    """The stack as data and the checks every command runs: where the work tree is,
    what is applied, what changed in it or outside forkpatch; the rebase's face
    (:meth:`position`, :meth:`guard_move`, :meth:`put_back`)."""

    def __init__(self, project: Project) -> None:
        self.project = project
        self.fork = project.fork()
        self.store = self.fork.store
        self._status: dict[Path, list[worktree.Change]] = {}

    @property
    def state(self) -> StackState:
        """state.json, read and checked once per command (empty when there is none)."""
        return self.project.read_state() or StackState()

    def _save(self, state: StackState) -> None:
        self.project.write_state(state)

    def worktree_path(self) -> Path | None:
        return self.state.worktree

    def wt(self, *, check_base: bool = True) -> Git:
        """The work tree's git. ``check_base``: refuse a work tree built on another
        base than series.yaml's (see :meth:`base_mismatch`)."""
        state = self.state
        path = state.worktree
        if path is None or not (path / ".git").exists():
            raise StateError(
                "no work tree: the series is not applied", tip="run `forkpatch apply` to create one"
            )
        if check_base:
            problem = self.base_mismatch(state)
            if problem is not None:
                raise StateError(
                    problem,
                    tip="to rebuild the work tree from series.yaml and patches/, run "
                    "`forkpatch apply --force` (commits not yet exported are discarded); to keep "
                    "them, first put back the series.yaml that names the work tree's base, "
                    "then `forkpatch export`",
                )
        return self.project.linked_worktree(path)

    def base_mismatch(self, state: StackState | None = None) -> str | None:
        """Why the work tree and series.yaml disagree on the base, or None.

        The work tree records the base it was built on. When series.yaml names
        another (it was changed outside forkpatch: a `git checkout` of series.yaml
        after a rebase, a merge), the work tree's commits are diffs against the
        wrong tree: exporting them would write patches that no longer apply to the
        series' own base. ``state``: state.json as already read (None: read it)."""
        state = self.state if state is None else state
        built_on = state.base
        series = self.project.series
        if not built_on or built_on == series.base.commit:
            return None
        return (
            f"the work tree {state.worktree} is built on {built_on[:12]}, but "
            f"{SERIES_FILE} names base {series.base.label} ({series.base.commit[:12]}): "
            f"{SERIES_FILE} was changed outside forkpatch (a rebase undone with git?)"
        )

    def layout(self) -> Layout:
        return self.state.layout

    def _save_layout(self, layout: Layout) -> None:
        if layout != self.state.layout:
            self._save(self.state.with_(layout=layout))

    def _widen(self, wt: Git, paths: list[str] | None = None) -> None:
        """A sparse work tree grows to every directory the applied patches (and
        ``paths``) touch, so that what is in a patch can always be seen and edited."""
        layout = self.layout()
        if not layout.sparse:
            return
        if paths is None:
            raw = wt.run("diff", "--name-only", "-z", self.base_commit(), "HEAD").stdout
            paths = [x.decode("utf-8", "surrogateescape") for x in raw.split(b"\0") if x]
        if layout.covers(paths):
            return
        new = layout.with_dirs(dirs_of(paths))
        self._forget_status()
        worktree.apply_layout(wt, new)
        self._save_layout(new)

    def changes(self, wt: Git) -> list[worktree.Change]:
        """The work tree's changes (``git status``), phantom files left out first.

        Asked once per command while nothing writes the work tree (:meth:`_write`,
        :meth:`_forget_status`): the guard, the outside-changes check and the command
        itself share one ``git status``."""
        key = wt.work_tree
        if key is not None and key in self._status:
            return self._status[key]
        layout = self.layout()
        new, changes = worktree.settle(wt, layout, self.fork.describe())
        if new != layout:
            self._save_layout(new)
        if key is not None:
            self._status[key] = changes
        return changes

    def _write(self, wt: Git, *args: str) -> None:
        """A git command that changes the work tree (its status is asked again after)."""
        self._forget_status()
        with worktree.objects_named():
            wt.run(*args)

    def _forget_status(self) -> None:
        self._status.clear()

    def base_commit(self) -> str:
        return self.state.base or self.project.series.base.commit

    def head(self, wt: Git) -> str:
        head = wt.rev_parse("HEAD")
        assert head is not None
        return head

    def applied(self, wt: Git | None = None, *, one_query: bool = False) -> list[AppliedPatch]:
        """The applied patches, bottom first. ``one_query``: the command reads nothing
        else of git (see :meth:`forkpatch.git.Git.first_parents`)."""
        wt = wt or self.wt()
        base = self.base_commit()
        # The whole stack in one walk: ids, first parents and messages.
        patches: list[AppliedPatch] = []
        for commit, first_parent, message in wt.first_parents(base, "HEAD", one_query=one_query):
            name, _summary, _header = parse_commit_message(message)
            if name:
                patches.append(AppliedPatch(name, (commit,), first_parent, message))
            elif patches:
                last = patches[-1]
                patches[-1] = replace(last, commits=(*last.commits, commit))
            else:
                raise StateError(
                    f"commit {commit[:12]} in the work tree sits on the base without a patch",
                    tip="run `forkpatch new NAME` to start a patch, then move the change into it",
                )
        return patches

    def is_dirty(self, wt: Git) -> bool:
        return bool(self.changes(wt))

    def guard_worktree(
        self,
        wt: Git,
        doing: str,
        *,
        force: bool = False,
        can_force: bool = False,
        rebase: Path | None = None,
    ) -> None:
        """The check every command runs before it rewrites the editing work tree.

        What it protects is what is in no object: ``git status`` of the work tree
        against its HEAD (files modified, staged, deleted, or new and not ignored).
        Commits made by hand are objects (:meth:`require_refreshed` checks those), and
        files the fork's .gitignore ignores (caches, build output) are not edits.
        ``force``: discard them, naming each (``can_force``: the command has --force,
        the way out the message names for that). ``rebase``: the conflict work tree of a
        rebase in progress (the ways out differ: patches cannot be refreshed then)."""
        changes = self.changes(wt)
        if not changes:
            return
        where = wt.work_tree
        listing = worktree.describe_changes(changes)
        if force:
            log.warn(f"discarding uncommitted changes in {where}: {listing}")
            return
        aside = (
            f"keep them aside with `git -C {where} stash push -u` (and `git -C {where} "
            "stash pop` afterwards)"
        )
        discard = (
            "pass --force to discard them"
            if can_force
            else f"discard them with `git -C {where} reset -q --hard && git -C {where} clean -fd`"
        )
        if rebase is not None:
            raise StateError(
                f"the editing work tree {where} has uncommitted changes that are in no "
                f"patch: {listing}; {doing} would rebuild it on the new base and lose them "
                f"(a conflict is resolved in {rebase}, not there); nothing was changed",
                tip="`forkpatch rebase --abort` keeps them and undoes the rebase (then "
                f"`forkpatch refresh` and rebase again); or {aside}, once the rebase is done "
                f"(they were made on the old base); or {discard}",
            )
        top = self.top_of(wt)
        keep = (
            f"`forkpatch refresh` writes them into the top patch '{top}'"
            if top is not None
            else "`forkpatch new NAME` and `forkpatch refresh` make them a patch"
        )
        raise StateError(
            f"the work tree {where} has uncommitted changes that are in no patch: "
            f"{listing}; {doing} would lose them, so nothing was changed",
            tip=f"{keep}; or {aside}; or {discard}",
        )

    def top_of(self, wt: Git) -> str | None:
        applied = self.applied(wt)
        return applied[-1].name if applied else None

    def top(self) -> str | None:
        applied = self.applied(one_query=True)
        return applied[-1].name if applied else None

    def unapplied(self, applied: list[AppliedPatch]) -> list[PatchEntry]:
        names = {a.name for a in applied}
        return [p for p in self.project.series.patches if p.name not in names]

    def require_refreshed(self, wt: Git, patches: list[AppliedPatch] | None = None) -> None:
        """Refuse when an applied patch's commit differs from its file (unsaved work)."""
        applied = patches if patches is not None else self.applied(wt)
        pending = self._unsaved(wt, applied)
        if pending:
            raise StateError(
                f"patch(es) {', '.join(pending)} have changes in the work tree that are not "
                "written to patches/",
                tip="run `forkpatch export` (or `forkpatch refresh` on the top patch) first, or "
                "pass --force to discard them",
            )

    def _unsaved(self, wt: Git, applied: list[AppliedPatch]) -> list[str]:
        """Applied patches whose file would get another diff on export (the file's own
        form counts as saved when it still describes the commit: see patchtext).

        A patch whose commit is the one forkpatch recorded with its file (``synced``)
        has no edits of its own: if its file differs, it changed outside forkpatch
        (:meth:`check_outside_changes` tells), and re-applying takes it."""
        record = self.state.synced
        if record is not None:
            synced = record.patches
            applied = [
                a for a in applied if a.name not in synced or synced[a.name].commit != a.commit
            ]
        if not applied:
            return []
        by_name = {p.name: p for p in self.project.series.patches}
        mine = [a for a in applied if by_name.get(a.name) and by_name[a.name].file is not None]
        diffs = self._diffs(wt, mine)
        # Hand-made commits on a build step belong to no patch file: unsaved work.
        out = [
            a.name
            for a in applied
            if by_name.get(a.name) and by_name[a.name].file is None and len(a.commits) > 1
        ]
        from forkpatch.patchtext import PatchTexts

        with PatchTexts(self.store) as texts:
            texts.prefetch((self._parent(wt, a), a.commit) for a in mine)
            for a in mine:
                path = self.project.patch_path(by_name[a.name])
                current = self.project.patch_bytes(by_name[a.name]) or b""
                rendered = texts.render(
                    current,
                    commit=a.commit,
                    parent=self._parent(wt, a),
                    raw_diff=diffs[a.commit],
                    source=self.project.rel(path),
                    keep_offsets=True,
                )
                if rendered.diff_changed:
                    out.append(a.name)
        return out

    def _diffs(self, wt: Git, applied: list[AppliedPatch]) -> dict[str, bytes]:
        """Each applied patch's diff (its parent to its last commit), keyed by that last
        commit: one git process for the whole stack, not three per patch."""
        from forkpatch.engine import diffs_between

        return diffs_between(wt, [(self._parent(wt, a), a.commit) for a in applied])

    @staticmethod
    def _message(wt: Git, a: AppliedPatch) -> str:
        return a.message or wt.out("show", "-s", "--format=%B", a.first)

    def _parent(self, wt: Git, a: AppliedPatch) -> str:
        if a.parent:
            return a.parent
        parent = wt.rev_parse(f"{a.first}^")
        assert parent is not None
        return parent

    def record(self, wt: Git, applied: list[AppliedPatch]) -> SyncRecord:
        """What forkpatch last wrote or read for the work tree (state.json's ``synced``).

        A state written before the record existed gets one made from what agrees now:
        every patch whose file gives its commit (or that is not applied) as it is; an
        applied patch whose commit and file differ is left out, for which side changed
        is not known."""
        if self.state.synced is not None:
            return self.state.synced
        files = {p.name for p in self.project.series.patches if p.file is not None}
        pending = {
            entry.name
            for entry, old, rendered, _summary in self._exported(
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
        path = self.state.worktree
        if path is None or not (path / ".git").exists():
            if state is not None:
                self._save(state)
            return
        wt = wt or self.project.linked_worktree(path)
        applied = None
        if commits is None:
            applied = self.applied(wt)
            commits = {a.name: a.commit for a in applied}
        base = None
        if names is not None:
            base = self.state.synced or self.record(wt, applied or self.applied(wt))
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
        applied = self.applied(wt) if applied is None else applied
        record = self.record(wt, applied)
        series = self.project.series
        commits = {a.name: a.commit for a in applied}
        top = applied[-1].name if applied else None
        dirty = bool(applied) and self.is_dirty(wt)

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

        def add(kind: str, entry: PatchEntry, *, who: str | None = None, **kw: Any) -> None:
            name = who or entry.name
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
                for entry, old, rendered, _summary in self._exported(
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
            side = "both" if held and edited(name) else "file"
            out.append(OutsideChange(name, "removed", rec.file, side, held))
        recorded = [n for n in record.order if n in by_name and n in record.patches]
        now = [n for n in order if n in set(recorded)]
        for was, is_ in zip(recorded, now, strict=True):
            if was != is_:
                add("moved", series.get(is_))
                break
        return out

    def check_outside_changes(
        self,
        wt: Git,
        command: str,
        *,
        writes: Iterable[str] | None = None,
        take: bool = False,
        force: bool = False,
        leave: bool = False,
        applied: list[AppliedPatch] | None = None,
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
        the work tree."""
        found = [c for c in self.outside_changes(wt, applied) if c.applied and c.side != "worktree"]
        if not take and writes is not None:
            mine = set(writes)
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
        if leave and not both:
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
                f"{wt.work_tree} diff {self.base_commit()[:12]}` shows them all)",
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

    def take_outside_changes(self, wt: Git, command: str) -> list[OutsideChange]:
        """Before ``command`` works on the stack: rebuild it from patches/ and
        series.yaml when they changed outside forkpatch and the work tree has no edits
        of its own to lose (refused otherwise: :meth:`check_outside_changes`)."""
        applied = self.applied(wt)
        taken = self.check_outside_changes(wt, command, take=True, applied=applied)
        if taken:
            self.guard_worktree(wt, f"taking the files changed outside forkpatch for `{command}`")
            self.require_refreshed(wt, applied)
            self.say_taken(command, taken)
            renamed = {c.old: c.name for c in taken if c.old}
            self._rebuild_applied({renamed.get(a.name, a.name) for a in applied})
            self.remember(wt)
        return taken

    def _merge_bases(self) -> dict[str, dict[str, tuple[bytes | None, bytes | None]]]:
        """Each patch's pre/post file images on the series' own base: the 3-way base."""
        base = self.project.series.base.commit
        from forkpatch.engine import SeriesApplier

        res = SeriesApplier(self.store, base).run(
            self.project.items(), write=False, stop_at_conflict=False
        )
        bases = {
            r.name: r.images
            for r in res.results
            if r.images and r.status not in ("conflict", "blocked")
        }
        from forkpatch.stack import mergebase

        # Patches left unapplied by `refresh --force` keep the images they had
        # on the old version of the patch below them: their true merge base, while
        # their file's diff still applies there (a teammate's version may not).
        saved = self.state.merge_bases
        found: dict[str, dict[str, tuple[bytes | None, bytes | None]]] = {}
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

    def _with_merge_bases(
        self,
        state: StackState,
        names: list[str],
        bases: dict[str, dict[str, tuple[bytes | None, bytes | None]]] | None = None,
    ) -> StackState:
        """``state`` remembering ``names``' current images (as blobs in the store) for
        `push --merge` (``bases``: :meth:`_merge_bases` when the caller has it already)."""
        bases = self._merge_bases() if bases is None else bases
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
    def _touched(result: SeriesResult) -> list[str]:
        """Every path the patches of ``result`` touch."""
        return [p for r in result.results for p in r.files]

    def _file_bytes(self, entry: PatchEntry) -> bytes | None:
        return self.project.patch_bytes(entry)

    def _settle_editing(
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
        state = self.state
        editing = state.editing
        if editing is None:
            return
        renames = renames or {}
        order = self.project.series.names()
        if applied is None:
            applied = [a.name for a in self.applied(wt)]
        pending = {renames.get(n, n) for n in editing.above} & set(order)
        settled = None
        if applied and renames.get(editing.patch, editing.patch) in applied and pending:
            start = order.index(applied[-1]) + 1 if applied[-1] in order else len(order)
            end = max(order.index(n) for n in pending) + 1
            above = [n for n in order[start:end] if n not in applied]
            if above:
                settled = Editing(applied[-1], tuple(above))
        if settled != editing:
            self._save(state.with_(editing=settled))

    def _rebuild_applied(
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
        if self.worktree_path() is None:
            return []
        wt = self.wt()
        series = self.project.series
        order = series.names()
        count = max((order.index(n) + 1 for n in names if n in order), default=0)
        entries = list(series.patches[:count])
        from forkpatch.engine import SeriesApplier, restack

        head = restack(self.store, self.base_commit(), entries, made) if made else None
        if head is not None:
            touched = self.store.objects.changed_paths(self.base_commit(), head)
        else:
            result = SeriesApplier(self.store, self.base_commit(), step_commits=True).run(
                self.project.items(entries), write=True
            )
            if not result.ok:
                bad = result.first_conflict()
                assert bad is not None
                raise PatchApplyError(bad.describe_failure("the rebuilt stack"))
            head = result.head or self.base_commit()
            touched = self._touched(result)
        self._widen(wt, touched)
        self._write(wt, "reset", "-q", "--hard", head)
        self._settle_editing(wt, renames)
        return order[:count]

    def pending_edits(self) -> list[worktree.Change]:
        """The editing work tree's uncommitted changes (none when there is no work tree,
        or one built on another base)."""
        if not self._has_worktree() or self.base_mismatch() is not None:
            return []
        return self.changes(self.wt())

    def _has_worktree(self) -> bool:
        path = self.worktree_path()
        return path is not None and (path / ".git").exists()

    def position(self, command: str, doing: str) -> StackPosition | None:
        """Where the stack stands (None: no work tree), checked to hold no unsaved work
        before ``command`` (``doing``, for messages) moves it: no edit pending, no edits in no object, every patch
        refreshed; what changed outside forkpatch in patches/ is taken first."""
        path = self.worktree_path()
        if path is None or not (path / ".git").exists():
            return None
        editing = self.state.editing
        if editing is not None:
            raise StateError(
                f"patch '{editing.patch}' is being edited in {path}",
                tip="run `forkpatch refresh` first",
            )
        wt = self.wt()
        self.guard_worktree(wt, doing)
        applied = self.applied(wt)
        # patches/ is read as it is: what changed outside forkpatch is taken, unless the
        # work tree has edits of its own there too.
        taken = self.check_outside_changes(wt, command, take=True, applied=applied)
        self.require_refreshed(wt, applied)
        self.say_taken(command, taken)
        return StackPosition(
            head=self.head(wt), base=self.base_commit(), applied=tuple(a.name for a in applied)
        )

    def guard_move(self, doing: str, *, conflict_tree: Path, unless_at: str | None) -> None:
        """Before ``doing`` moves the stack: refuse edits in no object (see
        :meth:`guard_worktree`). ``unless_at``: nothing moves when the stack's head is
        still this commit, and the edits are kept (said so)."""
        path = self.worktree_path()
        if path is None or not (path / ".git").exists():
            return
        wt = self.wt(check_base=False)
        if unless_at is not None and self.head(wt) == unless_at:
            kept = self.changes(wt)
            if kept:
                log.info(
                    f"the uncommitted changes in {wt.work_tree} are kept (the stack does not "
                    f"move): {worktree.describe_changes(kept)}"
                )
            return
        self.guard_worktree(wt, doing, rebase=conflict_tree)

    def put_back(self, position: StackPosition) -> None:
        """Move the stack back to ``position`` (an aborted rebase)."""
        path = self.worktree_path()
        if path is None or not (path / ".git").exists():
            return
        wt = self.wt(check_base=False)  # moving it to that base is the point
        if self.head(wt) != position.head:
            self._write(wt, "checkout", "-q", "-f", "-B", BRANCH, position.head)
            self._write(wt, "clean", "-q", "-fd")
        if self.state.base != position.base:
            self._save(self.state.with_(base=position.base))

    def _exported(
        self, wt: Git, mine: list[AppliedPatch], *, offsets: bool
    ) -> Iterator[tuple[PatchEntry, bytes | None, Rendered, str]]:
        """What export writes for each of ``mine`` (applied patches with a file): the
        entry, its file's bytes now, the rendered file and the commit's summary."""
        by_name = {p.name: p for p in self.project.series.patches}
        diffs = self._diffs(wt, mine)  # one git process, whatever the number of patches
        from forkpatch.patchtext import PatchTexts

        with PatchTexts(self.store) as texts:
            texts.prefetch((self._parent(wt, a), a.commit) for a in mine)
            for a in mine:
                entry = by_name[a.name]
                _name, summary, header = parse_commit_message(self._message(wt, a))
                # The file's own form (mail headers, quilt lines, notes) is kept where the
                # commit did not change it; see forkpatch.patchtext.
                old_bytes = self._file_bytes(entry)
                rendered = texts.render(
                    old_bytes,
                    commit=a.commit,
                    parent=self._parent(wt, a),
                    raw_diff=diffs[a.commit],
                    description=header,
                    summary=summary or None,
                    source=self.project.rel(self.project.patch_path(entry)),
                    keep_offsets=not offsets,
                )
                yield entry, old_bytes, rendered, summary

    @staticmethod
    def _refuse_commits_on_step(wt: Git, a: AppliedPatch) -> None:
        if len(a.commits) > 1:
            raise StateError(
                f"commit(s) {', '.join(c[:12] for c in a.commits[1:])} sit on the build step "
                f"'{a.name}', which has no diff to hold them",
                tip=f"undo them with `git -C {wt.work_tree} reset --soft {a.first[:12]}`, then "
                "`forkpatch new NAME` and `forkpatch refresh` to make them a patch",
            )
