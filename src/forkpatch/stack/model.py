"""The stack as data, read: where the work tree is and on which base, which patches
are applied (one ``git log`` per command, kept until something writes the stack), what
the work tree holds that is in no object (one ``git status`` per command), and the one
check before any command rewrites the work tree (:meth:`StackModel.guard_worktree`).

It writes nothing but what reading the work tree settles (the layout ``git status``
left, phantom files out of a sparse work tree) and imports neither the engine nor the
patch texts: ``top`` and ``status`` read the stack through it alone. The parts that
change the stack hold one (:mod:`forkpatch.stack.writer`, :mod:`forkpatch.stack.sync`,
:mod:`forkpatch.stack.editing` and the others :class:`forkpatch.stack.commands.Stack`
composes).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from forkpatch import log
from forkpatch.errors import StateError
from forkpatch.git import Begun, Git
from forkpatch.project import Project
from forkpatch.series import SERIES_FILE, PatchEntry
from forkpatch.stack import worktree
from forkpatch.stackstate import Layout, StackState
from forkpatch.trailer import parse_commit_message

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


class StackModel:
    """The stack as one command reads it: state.json, the work tree, the applied
    patches and the work tree's changes, each asked of git once until :meth:`forget`
    (called by everything that writes the work tree or moves its HEAD)."""

    def __init__(self, project: Project) -> None:
        self.project = project
        self.fork = project.fork()
        self.store = self.fork.store
        self._status: dict[Path, tuple[list[worktree.Change], list[str]]] = {}
        self._begun: dict[Path, Begun] = {}  # statuses started ahead (begin_status)
        self._applied: dict[tuple[Path | None, str], list[AppliedPatch]] = {}

    @property
    def state(self) -> StackState:
        """state.json, read and checked once per command (empty when there is none)."""
        return self.project.read_state() or StackState()

    def worktree_path(self) -> Path | None:
        return self.state.worktree

    def has_worktree(self) -> bool:
        path = self.worktree_path()
        return path is not None and (path / ".git").exists()

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

    def changes(self, wt: Git) -> list[worktree.Change]:
        """The work tree's changes (``git status``), phantom files left out first.

        Asked once per command while nothing writes the work tree (:meth:`forget`):
        the guard, the outside-changes check and the command
        itself share one ``git status``."""
        return self._asked(wt)[0]

    def ignored(self, wt: Git) -> list[str]:
        """The new paths of the work tree its ignore rules leave out (from the same
        ``git status`` as :meth:`changes`; an ignored directory as one ``dir/``)."""
        return self._asked(wt)[1]

    def begin_status(self, wt: Git) -> None:
        """Start the work tree's ``git status`` now, to run beside what the command does
        before it asks (:meth:`changes`): a second core reads the tree meanwhile. What
        the status finds is the tree as it was when it started; anything this command
        writes there before asking drops it (:meth:`forget`)."""
        key = wt.work_tree
        if key is not None and key not in self._status and key not in self._begun:
            self._begun[key] = worktree.begin_status(wt)

    def _asked(self, wt: Git) -> tuple[list[worktree.Change], list[str]]:
        key = wt.work_tree
        if key is not None and key in self._status:
            return self._status[key]
        begun = self._begun.pop(key, None) if key is not None else None
        layout = self.layout()
        new, changes, ignored = worktree.settle(wt, layout, self.fork.describe(), begun)
        if new != layout:
            self._save_layout(new)
        if key is not None:
            self._status[key] = (changes, ignored)
        return changes, ignored

    def known_changes(self, wt: Git) -> list[worktree.Change] | None:
        """This command's ``git status`` of the work tree, when it was asked since the
        last write (None: it was not; nothing is asked here)."""
        got = self._status.get(wt.work_tree) if wt.work_tree is not None else None
        return None if got is None else list(got[0])

    def known_clean(self, wt: Git) -> bool:
        """Whether this command has found the work tree as its HEAD (a ``git status``
        asked since the last write found no change, or :meth:`committed` said so)."""
        return self.known_changes(wt) == []

    def committed(self, wt: Git, ignored: list[str]) -> None:
        """The work tree was just committed whole (every change its status named): it
        is as its new HEAD, with these ignored paths."""
        self.forget()
        if wt.work_tree is not None:
            self._status[wt.work_tree] = ([], list(ignored))

    def _save_layout(self, layout: Layout) -> None:
        if layout != self.state.layout:
            self.project.write_state(self.state.with_(layout=layout))

    def forget(self) -> None:
        """Ask git again: the work tree or its HEAD moved (``git status`` and the
        applied patches are asked afresh)."""
        self._status.clear()
        self.drop_begun()
        self._applied.clear()

    def drop_begun(self) -> None:
        """End the statuses started ahead and not asked for (the command writes the tree,
        or ends without needing them)."""
        while self._begun:
            self._begun.popitem()[1].drop()

    def base_commit(self) -> str:
        return self.state.base or self.project.series.base.commit

    def head(self, wt: Git) -> str:
        head = wt.rev_parse("HEAD")
        assert head is not None
        return head

    def applied(self, wt: Git | None = None, *, one_query: bool = False) -> list[AppliedPatch]:
        """The applied patches, bottom first, read once per command until :meth:`forget`.
        ``one_query``: the command reads nothing else of git (see
        :meth:`forkpatch.git.Git.first_parents`)."""
        wt = wt or self.wt()
        base = self.base_commit()
        key = (wt.work_tree, base)
        if key not in self._applied:
            self._applied[key] = self._read_applied(wt, base, one_query=one_query)
        return list(self._applied[key])

    @staticmethod
    def _read_applied(wt: Git, base: str, *, one_query: bool) -> list[AppliedPatch]:
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
        Commits made by hand are objects (``Sync.require_refreshed`` checks those),
        and files the fork's .gitignore ignores (caches, build output) are not edits.
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

    def pending_edits(self) -> list[worktree.Change]:
        """The editing work tree's uncommitted changes (none when there is no work tree,
        or one built on another base)."""
        if not self.has_worktree() or self.base_mismatch() is not None:
            return []
        return self.changes(self.wt())

    def parent(self, wt: Git, a: AppliedPatch) -> str:
        if a.parent:
            return a.parent
        parent = wt.rev_parse(f"{a.first}^")
        assert parent is not None
        return parent

    @staticmethod
    def message(wt: Git, a: AppliedPatch) -> str:
        return a.message or wt.out("show", "-s", "--format=%B", a.first)

    @staticmethod
    def refuse_commits_on_step(wt: Git, a: AppliedPatch) -> None:
        if len(a.commits) > 1:
            raise StateError(
                f"commit(s) {', '.join(c[:12] for c in a.commits[1:])} sit on the build step "
                f"'{a.name}', which has no diff to hold them",
                tip=f"undo them with `git -C {wt.work_tree} reset --soft {a.first[:12]}`, then "
                "`forkpatch new NAME` and `forkpatch refresh` to make them a patch",
            )
