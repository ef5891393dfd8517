"""Apply a series in memory: no work tree, no index, one object reader.

The base tree is listed once; the files a patch touches are read in process
(libgit2, :mod:`forkpatch.gitobj`); hunks are applied in Python
(:mod:`forkpatch.applier`); the results are written, if wanted, as one commit per
patch (in process for a few, one ``git fast-import`` stream for many). A 3-way merge
(git's ``merge-file``, in process) is tried only for a file whose hunks do not apply, with
the merge base taken from the series' own previous base, which forkpatch can
always rebuild: this is why patch files need no ``index`` lines.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from forkpatch import applier, binarypatch
from forkpatch.errors import PathSafetyError
from forkpatch.git import FastImport, FileChange, Git, ObjectReader, commit_date
from forkpatch.kinds import PatchStatus
from forkpatch.patchfile import FilePatch, PatchFile, check_paths
from forkpatch.results import FileConflict, PatchResult, worst
from forkpatch.series import PatchEntry

# Written beside its reader in trailer.py; named here too for the callers that import it
# with the engine (the rebase and the stack).
from forkpatch.trailer import commit_message

# Worst wins when a patch's files end differently.
#: A conflict marker line as ``git merge-file`` writes it (``<<<<<<< ``, ``||||||| ``, ``>>>>>>> ``).
CONFLICT_MARKER = re.compile(rb"^(<{7} |>{7} |\|{7} )", re.M)
#: The same markers on an added line of a diff.
DIFF_CONFLICT_MARKER = re.compile(rb"^\+(<{7} |>{7} |\|{7} )", re.M)


@dataclass(frozen=True)
class SeriesResult:
    base_commit: str
    results: tuple[PatchResult, ...]
    commits: tuple[str, ...] = ()  # applied patch commits, in order
    head: str | None = None  # last commit written (base when nothing applied)

    @property
    def ok(self) -> bool:
        return all(r.status not in ("conflict", "blocked") for r in self.results)

    def first_conflict(self) -> PatchResult | None:
        for r in self.results:
            if r.status == "conflict":
                return r
        return None


@dataclass(frozen=True)
class Item:
    """A patch to apply: its series entry and its parsed file (None: a build step)."""

    entry: PatchEntry
    patch: PatchFile | None


class TreeFiles:
    """The files of one tree, read a directory at a time as paths are asked for.

    An apply touches a few files of a tree of thousands: listing all of it first (700
    tree objects on the fork) would cost more than the patches. Each directory read is
    kept, so one :class:`TreeFiles` shared by several states reads it once."""

    def __init__(self, git: Git, rev: str) -> None:
        self._objects = git.objects
        self._root = self._objects.tree_id(rev)
        self._dirs: dict[str, dict[str, tuple[str, str]] | None] = {}  # "" is the root
        self._folded: dict[str, dict[str, list[tuple[str, str]]]] = {}

    def listing(self, directory: str) -> dict[str, tuple[str, str]] | None:
        """``directory``'s entries (name -> (mode, oid)), or None when it is no
        directory of the tree; ``""`` is the root."""
        if directory in self._dirs:
            return self._dirs[directory]
        if not directory:
            got: dict[str, tuple[str, str]] | None = self._objects.tree_entries(self._root)
        else:
            parent, _, name = directory.rpartition("/")
            above = self.listing(parent)
            entry = above.get(name) if above is not None else None
            got = (
                self._objects.tree_entries(entry[1])
                if entry is not None and entry[0] == "040000"
                else None
            )
        self._dirs[directory] = got
        return got

    def get(self, path: str) -> tuple[str, str] | None:
        """``path``'s (mode, oid) when it is a file (or a link, or a submodule) here."""
        directory, _, name = path.rpartition("/")
        listing = self.listing(directory)
        entry = listing.get(name) if listing is not None else None
        return None if entry is None or entry[0] == "040000" else entry

    def named(self, directory: str, name: str) -> list[tuple[str, str]]:
        """The entries of ``directory`` named ``name`` whatever their case: (name, mode)."""
        folded = self._folded.get(directory)
        if folded is None:
            folded = {}
            for n, (mode, _oid) in (self.listing(directory) or {}).items():
                folded.setdefault(n.casefold(), []).append((n, mode))
            self._folded[directory] = folded
        return folded.get(name.casefold(), [])


class TreeState:
    """The files of a tree, with in-memory changes on top."""

    def __init__(
        self, git: Git, reader: ObjectReader, commit: str, files: TreeFiles | None = None
    ) -> None:
        """``files``: the tree of ``commit`` when the caller holds it already (shared)."""
        self.reader = reader
        self.files = TreeFiles(git, commit) if files is None else files
        # What the changes made of a path: (mode, None) written, None deleted.
        self.edits: dict[str, tuple[str, None] | None] = {}
        self.content: dict[str, bytes] = {}

    def entry(self, path: str) -> tuple[str, str | None] | None:
        """``path``'s (mode, blob id; None for content changed here), or None: no file."""
        if path in self.edits:
            return self.edits[path]
        return self.files.get(path)

    def has(self, path: str) -> bool:
        return self.entry(path) is not None

    def get(self, path: str) -> tuple[str, bytes] | None:
        entry = self.entry(path)
        if entry is None:
            return None
        mode, oid = entry
        if path in self.content:
            return mode, self.content[path]
        assert oid is not None
        data = self.reader.blob(oid)
        if data is None:
            raise PathSafetyError(f"object {oid} for {path} is missing from the repository")
        return mode, data

    def prefetch(self, items: Iterable[Item]) -> None:
        """Read, in one batch, the blobs of every file of this tree that ``items`` touch."""
        oids = []
        for item in items:
            if item.patch is None:
                continue
            for fp in item.patch.files:
                for path in (fp.old_path, fp.new_path):
                    entry = self.entry(path) if path else None
                    if entry is not None and entry[1] is not None and entry[0] != "160000":
                        oids.append(entry[1])
        self.reader.prefetch(oids)

    def symlink_prefix(self, path: str) -> str | None:
        """The first leading directory of ``path`` that is a symlink in this tree.

        Compared case-insensitively: on a case-folding file system (macOS,
        Windows) ``Link/x`` goes through a symlink named ``link``.
        """
        parts = path.split("/")
        if len(parts) < 2:
            return None
        edited = {
            p.casefold(): p for p, e in self.edits.items() if e is not None and e[0] == "120000"
        }
        here = [""]  # the tree's directories that ``parts[:i - 1]`` names, in any case
        for i in range(1, len(parts)):
            found = edited.get("/".join(parts[:i]).casefold())
            if found is not None:
                return found
            below: list[str] = []
            for directory in here:
                for name, mode in self.files.named(directory, parts[i - 1]):
                    full = f"{directory}/{name}" if directory else name
                    if mode == "040000":
                        below.append(full)
                    elif mode == "120000" and full not in self.edits:
                        return full  # (a link changed here is one of ``edited``)
            here = below
        return None

    def copy(self) -> TreeState:
        """An independent copy: changes to either do not show in the other."""
        return _Overlay(self)

    def set(self, path: str, mode: str, data: bytes) -> None:
        self.edits[path] = (mode, None)
        self.content[path] = data

    def delete(self, path: str) -> None:
        self.edits[path] = None
        self.content.pop(path, None)


@dataclass(frozen=True)
class _FileOutcome:
    status: PatchStatus
    changes: list[tuple[str, str | None, bytes | None]]  # (path, mode or None=delete, data)
    detail: list[str]
    conflict: FileConflict | None = None
    images: dict[str, tuple[bytes | None, bytes | None]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


@functools.lru_cache(maxsize=64)
def _merge_file(
    ours: bytes, base: bytes, theirs: bytes, labels: tuple[str, str, str]
) -> tuple[bytes | None, int]:
    """3-way merge of three contents as ``git merge-file --diff3`` makes it (git's xdiff,
    in process: :func:`forkpatch.gitobj.merge_file`); returns (result, conflicts), the
    result None for a binary file (no merge: a conflict without markers).

    A pure function of its inputs, so its results are kept: a rebase that stops at
    a conflict merges the same file again to write it with its markers.
    """
    from forkpatch.gitobj import merge_file

    return merge_file(ours, base, theirs, labels)


class SeriesApplier:
    """Applies patches one after another onto an in-memory tree."""

    def __init__(
        self,
        git: Git,
        base_commit: str,
        *,
        max_fuzz: int = 0,
        three_way: bool = False,
        detect_upstream: bool = False,
        merge_bases: Mapping[str, dict[str, tuple[bytes | None, bytes | None]]] | None = None,
        labels: tuple[str, str] = ("base", "patch"),
        step_commits: bool = False,
    ) -> None:
        """``step_commits``: a build step gets an empty commit carrying its name (the
        editable stack marks its position with it; wheels and rebases need none)."""
        self.git = git
        self.base_commit = base_commit
        self.max_fuzz = max_fuzz
        self.three_way = three_way
        self.detect_upstream = detect_upstream
        # Read only when a hunk fails: a lazy mapping is not made for nothing.
        self.merge_bases = merge_bases if merge_bases is not None else {}
        self.labels = labels
        self.step_commits = step_commits

    # ----------------------------------------------------------------- one file

    def _apply_file(self, state: TreeState, fp: FilePatch, name: str, index: int) -> _FileOutcome:
        path = fp.new_path or fp.old_path or "?"
        where = f"{fp.path}"
        old = None
        if fp.old_path is not None:
            got = state.get(fp.old_path)
            if got is None:
                if fp.new_path is None and self.three_way:
                    # Deleted upstream too: git's 3-way merge (rebase, am -3) takes it.
                    gone = f"{fp.old_path}: merged with a 3-way merge (deleted in the tree too)"
                    return _FileOutcome("merged", [], [gone])
                return _FileOutcome(
                    "conflict",
                    [],
                    [],
                    FileConflict(fp.old_path, f"{fp.old_path} does not exist in the tree"),
                )
            old = got
        elif fp.new_path is not None and (there := state.get(fp.new_path)) is not None:
            same = self._created_as_is(fp, there)
            if same is not None:
                return same
            return _FileOutcome(
                "conflict",
                [],
                [],
                FileConflict(fp.new_path, f"{fp.new_path} already exists, the patch creates it"),
            )
        old_mode, old_data = old if old is not None else (None, None)

        if fp.is_binary:
            try:
                new_data = binarypatch.apply_binary(old_data, fp, self.git)
            except binarypatch.BinaryPatchError as exc:
                return _FileOutcome("conflict", [], [], FileConflict(path, str(exc)))
            result_status: PatchStatus = "clean"
            detail: list[str] = []
        else:
            try:
                res = applier.apply_file_patch(old_data, fp, max_fuzz=self.max_fuzz)
            except applier.HunkFailed as exc:
                return self._three_way(state, fp, name, old_mode, old_data, exc)
            new_data = res.content
            result_status = res.status
            detail = [
                f"{where}: hunk {h.index} applied at line {h.line}"
                + (f" (offset {h.offset:+d} lines)" if h.offset else "")
                + (f" with fuzz {h.fuzz}" if h.fuzz else "")
                for h in res.hunks
                if h.status != "clean"
            ]
        warnings = []
        if fp.index_mode_differs(old_mode):
            warnings.append(
                f"{where}: the patch's index line says mode {fp.new_mode}, the tree has "
                f"{old_mode}; the tree's mode is kept (as git apply does). To change the "
                "mode, the patch needs 'old mode'/'new mode' lines"
            )
        return _FileOutcome(
            result_status,
            self._changes(fp, old_mode, new_data),
            detail,
            images=self._images(fp, old_data, new_data),
            warnings=warnings,
        )

    def _created_as_is(self, fp: FilePatch, there: tuple[str, bytes]) -> _FileOutcome | None:
        """A file the patch creates that the tree already has, with the same bytes and
        mode: nothing to do (git's 3-way merge, in ``rebase`` and ``am -3``, takes two
        identical additions as one; a different mode or content is its add/add
        conflict). None when it differs, or outside a 3-way apply (``git apply`` refuses
        it as existing)."""
        if not self.three_way or fp.new_path is None:
            return None
        mode, data = there
        if mode != fp.mode_after(None):
            return None
        try:
            if fp.is_binary:
                made = binarypatch.apply_binary(None, fp, self.git)
            else:
                made = applier.apply_file_patch(None, fp).content
        except (binarypatch.BinaryPatchError, applier.HunkFailed):
            return None
        if made != data:
            return None
        # "merged": what git's merge makes of it, and the patch file is rewritten
        # without this file (it would not apply as it is next time).
        why = (
            f"{fp.new_path}: merged with a 3-way merge (the tree has it already, with the "
            "content and mode the patch creates)"
        )
        return _FileOutcome("merged", [], [why], images={fp.new_path: (None, data)})

    @staticmethod
    def _images(
        fp: FilePatch, old: bytes | None, new: bytes | None
    ) -> dict[str, tuple[bytes | None, bytes | None]]:
        images: dict[str, tuple[bytes | None, bytes | None]] = {}
        if fp.old_path and fp.new_path and fp.old_path != fp.new_path:
            images[fp.old_path] = (old, None)
            images[fp.new_path] = (None, new)
        else:
            images[fp.path] = (old, new)
        return images

    @staticmethod
    def _changes(
        fp: FilePatch, old_mode: str | None, new_data: bytes | None
    ) -> list[tuple[str, str | None, bytes | None]]:
        changes: list[tuple[str, str | None, bytes | None]] = []
        if fp.new_path is None:  # deletion
            changes.append((fp.old_path or "", None, None))
            return changes
        if fp.old_path and fp.old_path != fp.new_path and not fp.is_copy:
            changes.append((fp.old_path, None, None))
        mode = fp.mode_after(old_mode)
        changes.append((fp.new_path, mode, new_data if new_data is not None else b""))
        return changes

    def _three_way(
        self,
        state: TreeState,
        fp: FilePatch,
        name: str,
        old_mode: str | None,
        ours: bytes | None,
        failure: applier.HunkFailed,
    ) -> _FileOutcome:
        # HunkFailed.index is 1-based; 0 means the file as a whole.
        conflict = FileConflict(
            fp.path,
            f"hunk {failure.index} of {fp.path} does not apply at "
            f"line {failure.line}: {failure.reason}"
            if failure.index
            else f"{fp.path}: {failure.reason}",
            hunks=(failure.index,) if failure.index else (),
            line=failure.line,
        )
        if not self.three_way or ours is None:
            return _FileOutcome("conflict", [], [], conflict)
        images = self.merge_bases.get(name, {})
        src = fp.old_path or fp.path
        if src not in images or images[src][0] is None:
            conflict = replace(
                conflict, reason=conflict.reason + " (no merge base for a 3-way merge)"
            )
            return _FileOutcome("conflict", [], [], conflict)
        base = images[src][0] or b""
        theirs = images.get(fp.new_path or src, (None, None))[1]
        if theirs is None:
            return _FileOutcome("conflict", [], [], conflict)
        merged, n_conflicts = _merge_file(
            ours, base, theirs, (f"{self.labels[0]}", "old base", f"{self.labels[1]} {name}")
        )
        if merged is None:
            conflict = replace(
                conflict, reason=conflict.reason + " (a binary file: no 3-way merge)"
            )
            return _FileOutcome("conflict", [], [], conflict)
        if n_conflicts:
            conflict = replace(
                conflict,
                merged=merged,
                reason=(
                    f"{fp.path}: {n_conflicts} conflicting region(s) after a 3-way "
                    f"merge (hunk {failure.index} first failed at line "
                    f"{failure.line})"
                ),
            )
            return _FileOutcome("conflict", [], [], conflict)
        return _FileOutcome(
            "merged",
            self._changes(fp, old_mode, merged),
            [f"{fp.path}: merged with a 3-way merge (hunk {failure.index} did not apply as is)"],
            images=self._images(fp, ours, merged),
        )

    # ----------------------------------------------------------------- one patch

    def _reverse_applies(self, state: TreeState, patch: PatchFile) -> bool:
        """True when every text file of the patch reverse-applies exactly to ``state``."""
        if not patch.files:
            return False
        for fp in patch.files:
            if fp.is_binary:
                return False
            target = fp.new_path
            if target is None:  # patch deletes: upstreamed if the file is gone
                if fp.old_path and state.get(fp.old_path) is not None:
                    return False
                continue
            got = state.get(target)
            if got is None or (fp.new_mode and not fp.mode_from_index and got[0] != fp.new_mode):
                return False  # absent, or without the mode the patch gives it
            try:
                applier.apply_file_patch(got[1], applier.reverse(fp), max_fuzz=0)
            except applier.HunkFailed:
                return False
        return True

    def apply_patch(self, state: TreeState, item: Item) -> tuple[PatchResult, list[FileChange]]:
        entry, patch = item.entry, item.patch
        if patch is None:
            step = f"build step '{entry.build_step}': applied when building"
            return PatchResult(name=entry.name, status="clean", detail=(step,)), []
        check_paths(patch)
        files = tuple(_unique([p for fp in patch.files for p in (fp.old_path, fp.new_path) if p]))
        detail: list[str] = []
        warnings: list[str] = []
        conflicts: list[FileConflict] = []
        images: dict[str, tuple[bytes | None, bytes | None]] = {}

        def result(
            status: PatchStatus, evidence: str | None = None, *, with_conflicts: bool = False
        ) -> PatchResult:
            return PatchResult(
                name=entry.name,
                status=status,
                files=files,
                added=patch.added,
                removed=patch.removed,
                detail=tuple(detail),
                evidence=evidence,
                conflicts=tuple(conflicts) if with_conflicts else (),
                images=images,
                warnings=tuple(warnings),
            )

        for path in files:
            link = state.symlink_prefix(path)
            if link is not None:
                raise PathSafetyError(
                    f"{patch.source}: '{path}' goes through the symlink '{link}' in the tree; "
                    "forkpatch refuses to write through symlinks",
                    tip="change the patch to write the real path",
                )
        pending: list[tuple[str, str | None, bytes | None]] = []
        statuses: list[str] = []
        # Apply on a scratch overlay so a failing patch leaves ``state`` intact.
        scratch = state.copy()
        for i, fp in enumerate(patch.files):
            out = self._apply_file(scratch, fp, entry.name, i)
            statuses.append(out.status)
            detail.extend(out.detail)
            warnings.extend(out.warnings)
            images.update(out.images)
            if out.conflict is not None:
                conflicts.append(out.conflict)
                continue
            for path, mode, data in out.changes:
                if mode is None:
                    scratch.delete(path)
                else:
                    scratch.set(path, mode, data or b"")
            pending.extend(out.changes)
        # A symlink the patch itself creates may not lead the patch's other paths either.
        for path in files:
            link = scratch.symlink_prefix(path)
            if link is not None and link != path:
                raise PathSafetyError(
                    (
                        f"{patch.source}: '{path}' goes through the symlink '{link}' that the "
                        "patch creates; forkpatch refuses to write through symlinks"
                    ),
                    tip="change the patch to write the real path",
                )

        if conflicts:
            if self.detect_upstream and self._reverse_applies(state, patch):
                why = "reverse-applies cleanly: every hunk's result is already there"
                return result("upstreamed", why), []
            return result("conflict", with_conflicts=True), []

        # Net effect against the state before the patch.
        changes: list[FileChange] = []
        effective = False
        for path in _unique([p for p, _, _ in pending]):
            before = state.get(path)
            after = scratch.get(path)
            if before == after:
                continue
            effective = True
            if after is None:
                changes.append(FileChange(path))
            else:
                changes.append(FileChange(path, mode=after[0], data=after[1]))
        status = worst(statuses)
        if self.detect_upstream and not effective:
            why = (
                "content already present: applying it changes nothing"
                if status != "merged"
                else "content already present: the 3-way merge adds nothing"
            )
            return result("upstreamed", why), []
        if (
            self.detect_upstream
            and status in ("merged", "fuzz")
            and self._reverse_applies(state, patch)
        ):
            why = "reverse-applies cleanly: every hunk's result is already there"
            return result("upstreamed", why), []
        for change in changes:
            if change.is_delete:
                state.delete(change.path)
            else:
                state.set(change.path, change.mode or "100644", change.data or b"")
        return result(status), changes

    # ----------------------------------------------------------------- a series

    def run(
        self,
        items: Sequence[Item],
        *,
        write: bool = False,
        stop_at_conflict: bool = True,
        parent: str | None = None,
    ) -> SeriesResult:
        """Apply ``items`` in order on ``parent`` (default: the base commit).

        With ``write`` one commit per applied patch is created (by fast-import);
        patches recognised as upstream get no commit. After a conflict the rest
        are ``blocked`` (or, with ``stop_at_conflict=False``, tried anyway on the
        tree without the conflicting patch and reported with their own status).
        """
        start = parent or self.base_commit
        results: list[PatchResult] = []
        commits: list[str] = []
        head: str | None = None
        with self.git.reader() as reader:
            state = TreeState(self.git, reader, start)
            state.prefetch(items)
            fi: FastImport | None = self.git.fast_import() if write else None
            date = commit_date(self.git, self.base_commit, reader) if write else ""
            marks: list[tuple[int, str]] = []
            tip = start
            failed = False
            for item in items:
                if failed and stop_at_conflict:
                    results.append(
                        PatchResult(
                            name=item.entry.name,
                            status="blocked",
                            detail=("not tried: a patch below it conflicted",),
                        )
                    )
                    continue
                result, changes = self.apply_patch(state, item)
                results.append(result)
                if result.status == "conflict":
                    failed = True
                    continue
                wanted = item.patch is not None or self.step_commits
                if fi is not None and wanted and result.status != "upstreamed":
                    tip = fi.commit(
                        parent=tip,
                        changes=changes,
                        message=commit_message(
                            item.entry, item.patch.header if item.patch is not None else ""
                        ),
                        date=date,
                    )
                    marks.append((len(results) - 1, tip))
            if fi is not None:
                ids = fi.finish()
                for idx, mark in marks:
                    results[idx] = replace(results[idx], commit=ids[mark])
                    commits.append(ids[mark])
                head = commits[-1] if commits else start
        return SeriesResult(
            base_commit=start, results=tuple(results), commits=tuple(commits), head=head
        )


class _Overlay(TreeState):
    """A copy of a TreeState (its changes; the tree itself is shared), discarded if a
    patch fails."""

    def __init__(self, under: TreeState) -> None:
        self.reader = under.reader
        self.files = under.files
        self.edits = dict(under.edits)
        self.content = dict(under.content)


def _unique(items: Iterable[str]) -> list[str]:
    seen: dict[str, None] = {}
    for x in items:
        seen.setdefault(x, None)
    return list(seen)


def restack(
    git: Git, base: str, entries: Sequence[PatchEntry], made: Mapping[str, str]
) -> str | None:
    """The editable stack's commits for ``entries`` on ``base`` (what
    ``SeriesApplier(step_commits=True).run(..., write=True)`` gives for them), from the
    commits made for the same patches on ``base`` already (``made``: patch name -> its
    commit, each on the one before it: a rebase's), without applying anything again: a
    patch's commit is taken as it is where its parent is the commit below it in the
    stack, and made again on it (the same tree and message, in process) where a build
    step's empty commit comes between. Returns the stack's head; None when a patch of
    ``entries`` has no commit in ``made`` or one is not a commit on the one before (the
    caller then applies the series)."""
    objects = git.objects
    date = commit_date(git, base)
    tip = base
    tip_tree: str | None = None
    for entry in entries:
        if entry.file is None:  # a build step: an empty commit carrying its name
            tip_tree = tip_tree or git.tree_of(tip)
            tip = git.commit_tree(tip_tree, [tip], commit_message(entry, ""), date=date)
            continue
        commit = made.get(entry.name)
        parts = objects.commit_parts(commit) if commit else None
        if commit is None or parts is None:
            return None
        tree, parents, message = parts
        if parents == (tip,):
            tip = commit
        elif tip_tree is not None and len(parents) == 1 and git.tree_of(parents[0]) == tip_tree:
            tip = git.commit_tree(tree, [tip], message, date=date)  # past a build step
        else:
            return None
        tip_tree = tree
    return tip


def diffs_of_commits(git: Git, commits: Sequence[str]) -> dict[str, bytes]:
    """Canonical diff of each commit against its first parent, with one git process."""
    return begin_diffs_of_commits(git, commits).result()


def begin_diffs_of_commits(git: Git, commits: Sequence[str]) -> BegunDiffs:
    """:func:`diffs_of_commits`, its git process started now and left to run on another
    core while the caller does work that does not need the diffs."""
    return BegunDiffs(git, list(commits), list(commits))


def diffs_between(git: Git, pairs: Sequence[tuple[str, str]]) -> dict[str, bytes]:
    """The diff from ``old`` to ``new`` for each ``(old, new)`` pair of commits, keyed by
    ``new``, with one git process (what ``git diff-tree DIFF_OPTIONS old new`` prints for
    each; the ``new`` commits must be distinct)."""
    return BegunDiffs(git, [f"{new} {old}" for old, new in pairs], [n for _, n in pairs]).result()


class BegunDiffs:
    """``git diff-tree --stdin``, begun: each input line's diff, split on the commit id git
    prints before it (``commits[i]`` for ``lines[i]``)."""

    def __init__(self, git: Git, lines: Sequence[str], commits: Sequence[str]) -> None:
        from forkpatch.git import DIFF_OPTIONS

        self.commits = list(commits)
        self._begun = (
            git.begin(
                "diff-tree",
                "--stdin",
                "--root",
                *DIFF_OPTIONS,
                input=("\n".join(lines) + "\n").encode(),
            )
            if lines
            else None
        )

    def done(self) -> bool:
        """Whether git has answered (:meth:`result` then does not wait)."""
        return self._begun is None or self._begun.done()

    def drop(self) -> None:
        if self._begun is not None:
            self._begun.drop()

    def result(self) -> dict[str, bytes]:
        if self._begun is None:
            return {}
        stdout = self._begun.result().stdout
        out: dict[str, bytes] = {}
        current: str | None = None
        chunks: list[bytes] = []
        commit_set = set(self.commits)
        for line in stdout.splitlines(keepends=True):
            candidate = line.rstrip(b"\n").decode("latin-1")
            if len(candidate) == 40 and candidate in commit_set and not chunks_started(line):
                if current is not None:
                    out[current] = b"".join(chunks)
                current, chunks = candidate, []
                continue
            chunks.append(line)
        if current is not None:
            out[current] = b"".join(chunks)
        for c in self.commits:
            out.setdefault(c, b"")
        return out


def chunks_started(line: bytes) -> bool:
    return line[:1] in (b" ", b"+", b"-", b"@", b"\\")


def canonical_diff(raw: bytes) -> bytes:
    """Drop ``index`` lines of text files: content ids churn whenever the file changes
    elsewhere, and forkpatch's 3-way merges never need them. Binary sections keep
    them (git needs full ids to apply a binary patch)."""
    sections = raw.split(b"\ndiff --git ")
    out = []
    for i, sec in enumerate(sections):
        if i:
            sec = b"diff --git " + sec
        if b"\nGIT binary patch\n" in sec or b"\nBinary files " in sec:
            out.append(sec)
            continue
        head, sep, rest = sec.partition(b"\n--- ")
        if not sep:
            # No hunks (mode change, rename, empty file): keep the mode from index.
            lines = [ln for ln in head.split(b"\n") if not _is_index_line(ln)]
            out.append(b"\n".join(lines))
            continue
        lines = [ln for ln in head.split(b"\n") if not _is_index_line(ln)]
        out.append(b"\n".join(lines) + sep + rest)
    return b"\n".join(out)


def _is_index_line(line: bytes) -> bool:
    return line.startswith(b"index ") and b".." in line
