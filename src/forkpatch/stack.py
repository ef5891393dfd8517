"""The editable stack: a work tree with one commit per applied patch.

The work tree is a ``git worktree`` of forkpatch's private store (never of the
user's clone of the fork), on the branch ``forkpatch/stack``. The commits from
the base to HEAD are the applied patches, each carrying its name in a
``Forkpatch-Patch:`` trailer; commits a developer makes by hand on top belong
to the patch below them until the next ``refresh`` folds them in.

``patches/`` stays the source of truth: commands that change it (refresh,
export, new, delete, rename, move, import) first compute everything in memory
and write patch files and series.yaml last, each atomically.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from forkpatch import log, worktree
from forkpatch.engine import (
    CONFLICT_MARKER,
    DIFF_CONFLICT_MARKER,
    Item,
    PatchResult,
    SeriesApplier,
    SeriesResult,
    TreeState,
    canonical_diff,
    commit_message,
    diffs_between,
    diffs_of_commits,
    parse_commit_message,
)
from forkpatch.errors import (
    ConflictError,
    PatchApplyError,
    StateError,
    UsageError,
)
from forkpatch.fsutil import remove_in_tree, write_in_tree
from forkpatch.git import Git, commit_date
from forkpatch.patchtext import PatchTexts, Rendered
from forkpatch.project import Project
from forkpatch.series import NAME_RE, SERIES_FILE, PatchEntry
from forkpatch.stackstate import (
    Editing,
    FileRecord,
    Layout,
    StackPosition,
    StackState,
    SyncRecord,
    dirs_of,
)

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
    read for the work tree (:class:`forkpatch.project.SyncRecord`), and which side
    changed: ``"file"`` (patches/ or series.yaml only), ``"worktree"`` (only the work
    tree: edits not written to patches/ yet) or ``"both"``."""

    name: str  # the patch as series.yaml names it now (as the work tree names it: removed)
    kind: str  # modified | deleted | added | renamed | removed | moved | edited
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
            "removed": f"patch '{self.name}' was removed from {SERIES_FILE} outside forkpatch",
            "moved": f"{SERIES_FILE} entry '{self.name}' was moved outside forkpatch",
            "edited": f"patch '{self.name}' has edits in the work tree not written to patches/",
        }[self.kind]
        if self.kind == "edited":
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


class Stack:
    def __init__(self, project: Project) -> None:
        self.project = project
        self.fork = project.fork()
        self.store = self.fork.store
        self._status: dict[Path, list[worktree.Change]] = {}

    # ----------------------------------------------------------------- locating

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
            f"{SERIES_FILE} names base {series.base.tag} ({series.base.commit[:12]}): "
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
        wt.run(*args)

    def _forget_status(self) -> None:
        self._status.clear()

    def base_commit(self) -> str:
        return self.state.base or self.project.series.base.commit

    def head(self, wt: Git) -> str:
        head = wt.rev_parse("HEAD")
        assert head is not None
        return head

    def applied(self, wt: Git | None = None) -> list[AppliedPatch]:
        wt = wt or self.wt()
        base = self.base_commit()
        # One git process for the whole stack: ids, first parents and messages.
        raw = wt.run(
            "log", "--first-parent", "--reverse", "--format=%H%x00%P%x00%B%x1e", f"{base}..HEAD"
        ).stdout.decode("utf-8", "surrogateescape")
        patches: list[AppliedPatch] = []
        for record in raw.split("\x1e"):
            record = record.strip("\n")
            if not record:
                continue
            commit, _, rest = record.partition("\x00")
            parents, _, message = rest.partition("\x00")
            name, _summary, _header = parse_commit_message(message)
            if name:
                first_parent = parents.split(" ", 1)[0]
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

    # ----------------------------------------------------------------- apply

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
            self._forget_status()
            if layout != old:
                worktree.apply_layout(wt, layout)
            self._write(wt, "checkout", "-q", "-f", "-B", BRANCH, head)
            self._write(wt, "clean", "-q", "-fdx")
        else:
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

    @staticmethod
    def _admin_of(path: Path) -> Path:
        text = (path / ".git").read_text(encoding="utf-8", errors="surrogateescape").strip()
        admin = Path(text.split(":", 1)[1].strip())
        return admin if admin.is_absolute() else (path / admin).resolve()

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
                bad.describe_failure(f"{series.base.tag} with the patches below it")
                + f"\nthe work tree {path} holds the patches below it",
                tip=f"fix patches/{series.get(bad.name).file}, or run `forkpatch push --merge` "
                "to bring it in with conflict markers and resolve them",
            )
        return path, result

    # ----------------------------------------------------------------- queries

    def top(self) -> str | None:
        applied = self.applied()
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

    # ----------------------------------------------------------------- changed outside

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
    ) -> None:
        """Record that the work tree and the files of ``names`` (None: every entry, and
        series.yaml's order) agree now: forkpatch just wrote them from the work tree or
        read them into it. ``unsynced``: of those, patches applied in a form their file
        does not hold (conflict markers); ``forget``: entries forkpatch removed."""
        path = self.state.worktree
        if path is None or not (path / ".git").exists():
            return
        wt = wt or self.project.linked_worktree(path)
        applied = self.applied(wt)
        series = self.project.series
        commits = {a.name: a.commit for a in applied}
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
            base=None if names is None else self.record(wt, applied),
            forget=forget,
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

    # ----------------------------------------------------------------- push / pop

    def _merge_bases(self) -> dict[str, dict[str, tuple[bytes | None, bytes | None]]]:
        """Each patch's pre/post file images on the series' own base: the 3-way base."""
        base = self.project.series.base.commit
        res = SeriesApplier(self.store, base).run(
            self.project.items(), write=False, stop_at_conflict=False
        )
        bases = {r.name: r.images for r in res.results if r.images}
        # Patches left unapplied by `refresh --force` keep the images they had
        # on the old version of the patch below them: their true merge base.
        saved = self.state.merge_bases
        if saved:
            with self.store.reader() as reader:
                for name, files in saved.items():
                    bases[name] = {
                        path: tuple(None if oid is None else reader.blob(oid) for oid in pair)  # type: ignore[misc]
                        for path, pair in files.items()
                    }
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
                tip="run `forkpatch push --merge` to bring it in with conflict markers, or fix "
                "the patch file",
            )
        self.remember(wt, pushed)
        self._settle_editing(wt)
        return result.results

    @staticmethod
    def _touched(result: SeriesResult) -> list[str]:
        """Every path the patches of ``result`` touch."""
        return [p for r in result.results for p in r.files]

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

    # ----------------------------------------------------------------- refresh

    def _commit_worktree(
        self, wt: Git, *, parent: str, message: str, written: Iterable[str] = ()
    ) -> str:
        """Commit the work tree; ``written``: the files forkpatch wrote there itself,
        staged whatever the ignore rules say."""
        self._write(wt, "add", "-A")
        wt.stage(written)
        self._forget_status()
        tree = wt.out("write-tree")
        commit = wt.commit_tree(
            tree, [parent], message, date=commit_date(self.store, self.base_commit())
        )
        self._write(wt, "update-ref", "-m", "forkpatch refresh", "HEAD", commit)
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
        new = self._commit_worktree(wt, parent=parent, message=message)
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
        if above_names:
            if new_head is not None:
                self._widen(wt, self._touched(result))
                self._write(wt, "reset", "-q", "--hard", new_head)
            # _widen may have grown the layout
            self._save(state.with_(layout=self.state.layout, editing=None))
        elif keep_later:
            self._save(state)
        self.remember(wt, [e.name for e, _d in writes])
        return [
            e.name for e, _d in writes if self.project.rel(self.project.patch_path(e)) in written
        ]

    def _file_bytes(self, entry: PatchEntry) -> bytes | None:
        return self.project.patch_bytes(entry)

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

    # ----------------------------------------------------------------- edit

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

    # ----------------------------------------------------------------- series edits

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
        self._write(wt, "update-ref", "HEAD", commit)
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
        series = self.project.series
        entry = series.get(name)
        applied: list[AppliedPatch] = []
        wt: Git | None = None
        if self.worktree_path() is not None:
            wt = self.wt()
            applied = self.applied(wt)
            names = [a.name for a in applied]
            if entry.name in names:
                if names[-1] != entry.name:
                    raise StateError(
                        f"patch '{name}' is applied below other patches",
                        tip=f"make it the top first: `forkpatch pop {name}`",
                    )
                self.pop(force=False)
        self.project.commit(
            {entry: None} if entry.file and not keep_file else None,
            series.with_patches(p for p in series.patches if p.name != entry.name),
        )
        self.remember(wt, [], forget=[entry.name])
        if wt is not None:
            self._settle_editing(wt)

    def _rebuild_applied(self, names: set[str], renames: dict[str, str] | None = None) -> list[str]:
        """Re-create the work tree's stack from the files after a change of series.yaml:
        the shortest prefix of the (new) order that holds every name in ``names``, so
        that nothing applied before is left unapplied (and the editing position moved
        with it; ``renames``: old name -> new). Returns the names applied."""
        if self.worktree_path() is None:
            return []
        wt = self.wt()
        series = self.project.series
        order = series.names()
        count = max((order.index(n) + 1 for n in names if n in order), default=0)
        entries = list(series.patches[:count])
        result = SeriesApplier(self.store, self.base_commit(), step_commits=True).run(
            self.project.items(entries), write=True
        )
        if not result.ok:
            bad = result.first_conflict()
            assert bad is not None
            raise PatchApplyError(bad.describe_failure("the rebuilt stack"))
        self._widen(wt, self._touched(result))
        self._write(wt, "reset", "-q", "--hard", result.head or self.base_commit())
        self._settle_editing(wt, renames)
        return order[:count]

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

    def pending_edits(self) -> list[worktree.Change]:
        """The editing work tree's uncommitted changes (none when there is no work tree,
        or one built on another base)."""
        if not self._has_worktree() or self.base_mismatch() is not None:
            return []
        return self.changes(self.wt())

    def _has_worktree(self) -> bool:
        path = self.worktree_path()
        return path is not None and (path / ".git").exists()

    # ----------------------------------------------------------------- for a rebase

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

    def rebuild_on(self, base: str, names: Iterable[str]) -> None:
        """After series.yaml moved to ``base`` (a rebase): the stack on ``base``, up to
        the prefix of the series that holds every one of ``names`` still in it."""
        path = self.worktree_path()
        if path is None or not (path / ".git").exists():
            return
        self._save(self.state.with_(base=base, editing=None))
        self._rebuild_applied(set(names))
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

    # ----------------------------------------------------------------- export

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

    def _exported(
        self, wt: Git, mine: list[AppliedPatch], *, offsets: bool
    ) -> Iterator[tuple[PatchEntry, bytes | None, Rendered, str]]:
        """What export writes for each of ``mine`` (applied patches with a file): the
        entry, its file's bytes now, the rendered file and the commit's summary."""
        by_name = {p.name: p for p in self.project.series.patches}
        diffs = self._diffs(wt, mine)  # one git process, whatever the number of patches
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

    def remove_worktree(self) -> None:
        path = self.worktree_path()
        if path is not None and path.exists():
            self.store.run("worktree", "remove", "--force", str(path), check=False)
            shutil.rmtree(path, ignore_errors=True)
        state = self.project.read_state()
        if state is not None:
            self._save(state.with_(worktree=None, editing=None, synced=None))


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


def _split(data: bytes) -> tuple[str, bytes]:
    idx = data.find(b"diff --git ")
    if idx < 0:
        idx = len(data)
    return data[:idx].decode("utf-8").strip(), data[idx:]
