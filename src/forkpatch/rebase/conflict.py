"""The conflict work tree: where a human resolves the patch a rebase stopped at.

One work tree, ``.forkpatch/rebase-worktree`` (a ``git worktree`` of the private
store, detached), serves every stop of a rebase and is kept afterwards for the
next one: creating it checks out every file of the fork (thousands), and
deleting it costs nearly as much. Between stops it is moved incrementally
(``git reset --hard``: only the paths that differ are rewritten) and then the
conflicting patch is brought in: the files that apply or merge, and the files
whose 3-way merge conflicts, with their markers.

Every write goes through :func:`forkpatch.intree.write_in_tree` /
:func:`~forkpatch.intree.remove_in_tree`: no symbolic link is ever followed at
any component, so a fork tag or an earlier patch that turns a patched path (or
a directory above it) into a link pointing outside cannot make forkpatch write
there. The work tree itself is used only when it is a real directory whose
``.git`` file points into this project's store; anything else there is removed
and the work tree made again.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from forkpatch.engine import CONFLICT_MARKER
from forkpatch.errors import GitError, PathSafetyError, StateError
from forkpatch.git import Begun, FileChange, Git
from forkpatch.intree import remove_in_tree, write_in_tree
from forkpatch.project import Project

WORKTREE_DIR = "rebase-worktree"
REJECTS_DIR = "rejects"

_MODES = {"100755": 0o755, "100644": 0o644}


class ConflictTree:
    """``.forkpatch/rebase-worktree`` of one project (see the module docstring)."""

    def __init__(self, project: Project) -> None:
        self.project = project
        # Not resolved: a symlink here must be seen, not followed.
        self.path = Path(os.path.abspath(project.state_dir / WORKTREE_DIR))

    @property
    def store(self) -> Git:
        return self.project.fork().store

    def _admin(self) -> Path | None:
        """The work tree's admin directory in the store, when it is this project's own
        (a real directory, linked both ways to the store: Project.linked_worktree)."""
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return None
        if not stat.S_ISDIR(st.st_mode):
            return None
        try:
            return self.project.linked_worktree(self.path).git_dir
        except StateError:
            return None

    def git(self) -> Git:
        """The work tree, checked to be this project's own."""
        admin = self._admin()
        if admin is None:
            raise StateError(
                f"the conflict work tree {self.path} is missing or is not this project's",
                tip="run `forkpatch rebase --continue` to write it again, or "
                "`forkpatch rebase --abort`",
            )
        return Git(admin, work_tree=self.path)

    def exists(self) -> bool:
        return self._admin() is not None

    def checkout(self, head: str, *, recorded: bool = False) -> Git:
        """The work tree at ``head``, exactly (untracked files removed; ignored ones kept).

        An existing work tree is moved in place: git rewrites only the paths that
        differ between what it holds and ``head``. Its untracked files are staged first
        and so removed with the rest, unless ``recorded`` says :meth:`record` just
        staged everything (one scan of the tree instead of two).
        """
        if self._admin() is not None:
            wt = self.git()
            if not recorded:
                wt.run("add", "-A")
            wt.run("reset", "-q", "--hard", head)
            return wt
        self._remove_foreign()
        self.store.run("worktree", "prune")
        self.store.run("worktree", "add", "-q", "-f", "--detach", str(self.path), head)
        return self.git()

    def write_stop(self, head: str, changes: list[FileChange], *, recorded: bool = False) -> Git:
        """The work tree at ``head`` with the conflicting patch brought in (``changes``:
        clean, merged or with markers), staged: :meth:`checkout` then :meth:`bring_in`,
        in one git process where it can. The stop's tree (``head``'s with ``changes``)
        is written in process, then ``git read-tree -u --reset`` moves the index and the
        work tree to it (git rewrites only the paths that differ, as ``reset --hard``
        does, and never follows a symbolic link on the way), and HEAD is set to ``head``.
        A change git's tree cannot take as it is (a path through a file or a symbolic
        link of ``head``, an unusual mode) goes the long way, whose writes refuse a
        symbolic link with the way out."""
        stop_tree = self._stop_tree(head, changes)
        if stop_tree is None:
            wt = self.checkout(head, recorded=recorded)
            self.bring_in(changes)
            return wt
        if self._admin() is not None:
            wt = self.git()
            if not recorded:
                wt.run("add", "-A")  # untracked files go with the rest
        else:
            self._remove_foreign()
            if (self.store.git_dir / "worktrees" / WORKTREE_DIR).exists():
                self.store.run("worktree", "prune")  # its work tree went: its record goes
            self.store.run(
                "worktree", "add", "-q", "-f", "--detach", "--no-checkout", str(self.path), head
            )
            wt = self.git()
        wt.run("read-tree", "-u", "--reset", stop_tree)
        wt.update_ref("HEAD", head)
        return wt

    def _stop_tree(self, head: str, changes: list[FileChange]) -> str | None:
        """``head``'s tree with ``changes`` (objects only), or None when a change cannot
        be made in a tree as it is (see :meth:`write_stop`)."""
        store = self.store
        edits: dict[str, tuple[str, str] | None] = {}
        for ch in changes:
            if ch.is_delete:
                edits[ch.path] = None
            elif ch.mode in _MODES or ch.mode == "120000":
                edits[ch.path] = (ch.mode or "100644", store.objects.write_blob(ch.data or b""))
            else:
                return None
        try:
            return store.objects.write_tree(store.tree_of(head), edits, strict=True)
        except GitError:
            return None

    def _remove_foreign(self) -> None:
        """Whatever is at the work tree's place and is not a valid work tree goes."""
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(self.path)  # never follows a symlink inside it
        else:
            self.path.unlink()  # a file or a symlink: the link itself, not its target

    def bring_in(self, changes: list[FileChange]) -> None:
        """Write the conflicting patch's files (clean, merged or with markers) into the tree,
        staged (an ignored path included: they are the patch's files)."""
        for ch in changes:
            where = f"{self.path}/{ch.path}"
            try:
                if ch.is_delete:
                    remove_in_tree(self.path, ch.path)
                else:
                    write_in_tree(
                        self.path,
                        ch.path,
                        ch.data or b"",
                        mode=_MODES.get(ch.mode or "", 0o644),
                        symlink=ch.mode == "120000",
                    )
            except PathSafetyError as exc:
                raise PathSafetyError(
                    f"cannot write the conflict into {where}: {exc.message}",
                    tip="the new base makes a directory on that path a symbolic link; run "
                    "`forkpatch rebase --skip` to drop this patch (then re-create it by hand), "
                    "or `forkpatch rebase --abort`",
                ) from None
        self.git().stage(ch.path for ch in changes)

    def save_rejects(self, journal_dir: Path, rejects: list[tuple[str, bytes]]) -> list[str]:
        """Hunks with no 3-way result, saved for the human to apply by hand."""
        out = []
        for path, raw in rejects:
            rel = f"{REJECTS_DIR}/{path}.rej"
            write_in_tree(journal_dir, rel, raw)
            out.append(str(journal_dir / rel))
        return out

    def begin_record(self) -> Begun:
        """Begin staging everything the human did (``git add -A``, beside this process's
        own work); :meth:`record` waits for it."""
        return self.git().begin("add", "-A")

    def record(self, begun: Begun) -> tuple[Git, str, list[str]]:
        """Stage everything the human did, waiting for the ``git add -A`` that
        :meth:`begin_record` began: (work tree, its tree id, changed paths vs HEAD)."""
        wt = self.git()
        begun.result()
        tree = wt.write_tree()  # the index, in process; then what it changed against HEAD
        return wt, tree, wt.objects.changed_paths("HEAD^{tree}", tree)

    def markers(self, paths: list[str]) -> list[str]:
        """The paths among ``paths`` that still hold conflict markers (regular files only)."""
        out = []
        for rel in paths:
            try:
                fd = os.open(self.path / rel, os.O_RDONLY | os.O_NOFOLLOW)
            except OSError:
                continue  # gone, or a symbolic link: no markers to see
            with os.fdopen(fd, "rb") as fh:
                if stat.S_ISREG(os.fstat(fh.fileno()).st_mode) and CONFLICT_MARKER.search(
                    fh.read()
                ):
                    out.append(rel)
        return sorted(out)
