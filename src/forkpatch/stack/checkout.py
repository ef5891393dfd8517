"""apply: the series applied into the stack's work tree, made (a ``git worktree`` of
the project's store, full or sparse) or checked out again; a work tree an interrupted
`apply` left half made is told from one that holds someone's work.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from forkpatch import log
from forkpatch.engine import SeriesApplier, SeriesResult
from forkpatch.errors import PatchApplyError, StateError, UsageError
from forkpatch.stack import worktree
from forkpatch.stack.model import BRANCH, DEFAULT_WORKTREE, StackModel
from forkpatch.stack.sync import OutsideCheck, Sync
from forkpatch.stack.writer import StackWriter
from forkpatch.stackstate import Layout, dirs_of


class Checkout:
    """apply, on the command's model, writer and sync record."""

    def __init__(self, model: StackModel, writer: StackWriter, sync: Sync) -> None:
        self.model = model
        self.writer = writer
        self.sync = sync
        self.project = model.project
        self.store = model.store
        self.fork = model.fork

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
        existing = self.model.worktree_path()
        if (
            existing is not None
            and (existing / ".git").exists()
            and (where is None or where.resolve() == existing)
        ):
            wt = self.model.wt(check_base=not force)
            # Both checks only read: a file changed on both sides is named as such first.
            taken = (
                []
                if force
                else self.sync.check_outside_changes(wt, OutsideCheck("apply", take=True))
            )
            self.model.guard_worktree(wt, "re-applying the series", force=force, can_force=True)
            if not force:
                self.sync.require_refreshed(wt)
                self.sync.say_taken("apply", taken)
        entries = list(series.patches)
        if upto is not None:
            entries = entries[: series.index(upto) + 1]
        result = SeriesApplier(self.store, base, step_commits=True).run(
            self.project.items(entries), write=True
        )
        saved_bases = self.model.state.merge_bases
        path = self._checkout(result.head or base, where, sparse, self.writer.touched(result))
        self.sync.remember(self.project.linked_worktree(path))  # every file was read just now
        # A patch this did not apply keeps the merge base `push --merge` needs for it
        # (saved by `refresh --force` or `import --merge`).
        applied = {r.name for r in result.results if r.status not in ("conflict", "blocked")}
        kept = {n: v for n, v in saved_bases.items() if n not in applied}
        if kept:
            self.writer.save(self.model.state.with_(merge_bases=kept))
        bad = result.first_conflict()
        if bad is not None:
            raise PatchApplyError(
                bad.describe_failure(f"{series.base.label} with the patches below it")
                + f"\nthe work tree {path} holds the patches below it",
                tip=f"fix patches/{series.get(bad.name).file}, or run `forkpatch push --merge` "
                "to bring it in with conflict markers and resolve them",
            )
        return path, result

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
        path = where or self.model.worktree_path() or self.project.state_dir / DEFAULT_WORKTREE
        path = path.resolve()
        old = self.model.layout() if (path / ".git").exists() else Layout()
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
            if self.model.state.worktree != path:
                # Not recorded (an interrupted apply, a state.json removed): checked to
                # hold nothing of anyone's before it is checked out again.
                self.interrupted_worktree(path)
            self.model.forget()
            if layout != old:
                worktree.apply_layout(wt, layout)
            self.writer.write(wt, "checkout", "-q", "-f", "-B", BRANCH, head)
            self.writer.write(wt, "clean", "-q", "-fdx")
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
            self.model.forget()  # a new work tree: nothing read of one before holds
        layout, _changes, _ignored = worktree.settle(wt, layout, self.fork.describe())
        self.writer.save(
            self.model.state.with_(
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
        if self.model.state.worktree == path:
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
        changes = (
            [c for c in worktree.status(wt) if "D" not in c.xy and c.xy != worktree.IGNORED]
            if probe.stdout
            else []
        )
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
