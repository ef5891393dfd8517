"""The project: series.yaml, patches/, and forkpatch's private state in .forkpatch/."""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from forkpatch import log, stackstate
from forkpatch.errors import (
    InputFileError,
    LockError,
    NoProjectError,
    PathSafetyError,
    SeriesError,
    StateError,
)
from forkpatch.forkrepo import STORE_DIR, ForkRepo
from forkpatch.fsutil import (
    TMP_NAME,
    atomic_write,
    check_inside,
    commit_files,
    project_lock,
    read_regular,
    recover_files,
    sweep_temps,
)
from forkpatch.git import Git, blob_id
from forkpatch.series import (
    PATCHES_DIR,
    SERIES_FILE,
    PatchEntry,
    Series,
    dump_series,
    parse_series,
    parse_series_bytes,
    read_series_bytes,
    save_series,
)
from forkpatch.stackstate import STATE_FILE, FileRecord, StackState, SyncRecord

COMMIT_JOURNAL = "commit.json"
# The journal of a rebase in progress (written by forkpatch.rebase.state): while it
# exists, patches/ and series.yaml belong to the rebase.
REBASE_JOURNAL = "rebase/state.json"


def find_root(start: Path) -> Path:
    """The nearest directory at or above ``start`` holding series.yaml."""
    start = start.resolve()
    if not start.is_dir():
        raise SeriesError(
            f"{start} is not a directory" if start.exists() else f"{start} does not exist",
            tip="pass -C the project's directory (the one holding series.yaml)",
        )
    for d in (start, *start.parents):
        # Anything there (a device, a FIFO, a dangling link): load_series says what it is.
        if os.path.lexists(d / SERIES_FILE):
            return d
    raise NoProjectError(
        f"no {SERIES_FILE} in {start} or any parent directory",
        tip="run `forkpatch init --fork-url URL --base TAG` to start a series, or pass -C DIR",
    )


if TYPE_CHECKING:
    from forkpatch.engine import Item
    from forkpatch.patchfile import PatchFile

# The patch parser and the engine load with the first patch file a command reads:
# reading the stack (top) needs neither.


class _Unread:
    """state.json not read yet in this process."""


_UNREAD = _Unread()


@dataclass
class Project:
    root: Path
    fork_override: str | None = None
    _series: Series | None = field(default=None, repr=False)
    _crlf_seen: set[str] = field(default_factory=set, repr=False)
    _fork: ForkRepo | None = field(default=None, repr=False)
    _stack_state: StackState | _Unread | None = field(default=None, repr=False)
    _blobs: dict[str, tuple[tuple[int, int, int, int], str]] = field(
        default_factory=dict, repr=False
    )
    # The bytes of each file of the project this process read (None: it was absent):
    # what a write of that file expects still to find on disk (commit_files' expect).
    _read: dict[Path, bytes | None] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._stack_state = _UNREAD

    @property
    def series_path(self) -> Path:
        return self.root / SERIES_FILE

    @property
    def patches_dir(self) -> Path:
        return self.root / PATCHES_DIR

    @property
    def state_dir(self) -> Path:
        return self.root / STORE_DIR

    @property
    def series(self) -> Series:
        if self._series is None:
            # Parsed once per process for the same bytes (series.parse_series keeps
            # the last results by text: exact, unlike an mtime/size key), and kept
            # across commands for exactly that text (forkpatch.seriescache).
            from forkpatch import seriescache

            data = read_series_bytes(self.series_path)
            series = seriescache.cached_series(data, self.state_dir)
            if series is None:
                series = parse_series_bytes(data, self.series_path)
                seriescache.keep_series(data, series, self.state_dir)
            self._series = series
            self._read[self.series_path] = data
        return self._series

    def reload(self) -> Series:
        """Read series.yaml and state.json again (another step of this process wrote them)."""
        self._series = None
        self._stack_state = _UNREAD
        self._read.clear()  # what is on disk now is this process's
        return self.series

    def fork(self) -> ForkRepo:
        if self._fork is None:
            self._fork = ForkRepo.open(self.root, self.series.fork.url, self.fork_override)
        return self._fork

    # ----------------------------------------------------------------- patches

    def patch_path(self, entry: PatchEntry) -> Path:
        """``patches/<file>`` of an entry, checked for every read, write and delete: no
        symbolic link at ``patches/`` itself or at any directory below it (a link would
        take the operation outside the project)."""
        assert entry.file is not None
        return self.patch_file(entry.file, where=f"patch '{entry.name}'")

    def patch_file(self, rel: str, *, where: str = PATCHES_DIR) -> Path:
        """``patches/<rel>``, with the checks of :meth:`patch_path`."""
        try:
            return check_inside(self.root, f"{PATCHES_DIR}/{rel}", where=where)
        except PathSafetyError as exc:
            raise PathSafetyError(
                exc.message,
                tip=f"{PATCHES_DIR}/ and its subdirectories must be real directories inside "
                f"{self.root}: replace the symbolic link by the files it points to",
            ) from None

    def rel(self, path: Path) -> str:
        try:
            return str(path.relative_to(self.root))
        except ValueError:
            return str(path)

    def raw_patch_bytes(self, entry: PatchEntry) -> bytes | None:
        """The bytes of an entry's patch file as they are on disk; None when it does not
        exist. Only a regular file is read (a link to one is followed, never one to a
        device, a FIFO or a directory), within the size limit
        (:func:`forkpatch.fsutil.read_regular`)."""
        path = self.patch_path(entry)
        try:
            data: bytes | None = read_regular(
                path,
                tip=f"patches/ holds patch files: replace {PATCHES_DIR}/{entry.file} by the patch "
                f"file itself, or remove the entry with `forkpatch delete {entry.name}`",
            )
        except FileNotFoundError:
            data = None
        # The first read is what the command decided on; a write expects to find it.
        self._read.setdefault(path, data)
        return data

    def load_patch(self, entry: PatchEntry) -> PatchFile | None:
        if entry.file is None:
            return None
        path = self.patch_path(entry)
        data = self.raw_patch_bytes(entry)
        if data is None:
            meant = self.meant_file(entry)
            if meant is not None:
                raise SeriesError(
                    f"{SERIES_FILE}:{entry.line}: patch '{entry.name}' names {self.rel(path)}, "
                    f"which does not exist; did you mean {PATCHES_DIR}/{meant}? (it is in "
                    f"{PATCHES_DIR}/ and no entry names it: a typo in `file:`?)",
                    tip=f"correct `file: {entry.file}` to `file: {meant}` in {SERIES_FILE}",
                )
            raise SeriesError(
                f"{SERIES_FILE}:{entry.line}: patch '{entry.name}' names {self.rel(path)}, "
                "which does not exist",
                tip=self.missing_tip(entry),
            )
        from forkpatch.patchfile import parse_patch

        self._refuse_markers(path, data)
        return parse_patch(self._lf_form(path, data), source=self.rel(path))

    def patch_bytes(self, entry: PatchEntry) -> bytes | None:
        """A patch file's bytes as forkpatch reads them (LF line endings, see
        :meth:`_lf_form`); None when it does not exist. A file with git's conflict
        markers is refused as an unresolved merge."""
        data = self.raw_patch_bytes(entry)
        if data is None:
            return None
        path = self.patch_path(entry)
        self._refuse_markers(path, data)
        return self._lf_form(path, data)

    def _refuse_markers(self, path: Path, data: bytes) -> None:
        if b"<<<<<<<" not in data:  # the common case, without loading the marker module
            return
        from forkpatch.markers import merge_markers, unresolved_merge

        markers = merge_markers(data)
        if markers is not None:
            raise unresolved_merge(
                self.rel(path),
                markers,
                "run `forkpatch status`; with a work tree, `forkpatch apply` takes the "
                "resolved file into it",
            )

    def _lf_form(self, path: Path, data: bytes) -> bytes:
        """A patch file with CRLF line endings throughout is read as LF, as import reads
        one, and said once: a checkout converted it (git never writes a CR at the
        end of a diff's header lines)."""
        from forkpatch.patchfile import crlf_throughout, lf_form

        if not crlf_throughout(data):
            return data
        rel = self.rel(path)
        if rel not in self._crlf_seen:
            self._crlf_seen.add(rel)
            log.warn(
                f"{rel}: every line ends in CRLF, likely a checkout with core.autocrlf=true "
                "(or an eol=crlf attribute); read with LF line endings, as import reads such "
                "a file, and written back with CRLF when forkpatch rewrites it. To keep "
                "patch files byte for byte in every checkout, add `patches/*.patch -text` "
                "(or `eol=lf`) to the repository's .gitattributes"
            )
        return lf_form(data)

    def file_blob(self, entry: PatchEntry) -> str | None:
        """The git blob id of an entry's patch file as it is now (None: no file).

        Kept for the file as it is (its inode, size and times): a command asks for
        each file's id more than once, and forkpatch's own writes replace the file."""
        if entry.file is None:
            return None
        try:
            st = os.stat(self.patch_path(entry))
        except (FileNotFoundError, NotADirectoryError):
            st = None
        stamp = None if st is None else (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        known = self._blobs.get(entry.file)
        if stamp is not None and known is not None and known[0] == stamp:
            return known[1]
        try:
            data = self.raw_patch_bytes(entry)
        except NotADirectoryError:
            return None
        blob = None if data is None else blob_id(data)
        if stamp is not None and blob is not None:
            self._blobs[entry.file] = (stamp, blob)
        return blob

    def items(self, entries: list[PatchEntry] | tuple[PatchEntry, ...] | None = None) -> list[Item]:
        from forkpatch.engine import Item

        chosen = self.series.patches if entries is None else entries
        return [Item(entry=e, patch=self.load_patch(e)) for e in chosen]

    def orphans(self) -> list[str]:
        """Files in patches/ that series.yaml does not list."""
        if not self.patches_dir.is_dir():
            return []
        listed = {p.file for p in self.series.patches if p.file}
        out = []
        # os.walk does not follow symbolic links to directories (one may point anywhere).
        for dirpath, dirnames, filenames in os.walk(self.patches_dir):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in filenames:
                path = Path(dirpath) / name
                if not name.startswith(".") and path.is_file():
                    rel = path.relative_to(self.patches_dir).as_posix()
                    if rel not in listed:
                        out.append(rel)
        return sorted(out)

    def meant_file(self, entry: PatchEntry) -> str | None:
        """For an entry whose ``file:`` does not exist: the file in patches/ that no entry
        names and that it most likely meant (a typo), or None."""
        if entry.file is None:
            return None
        import difflib

        close = difflib.get_close_matches(entry.file, self.orphans(), n=1, cutoff=0.6)
        return close[0] if close else None

    def meant_by(self, orphan: str) -> PatchEntry | None:
        """The entry whose missing ``file:`` most likely meant the orphan ``orphan``."""
        for entry in self.series.patches:
            if (
                entry.file is not None
                and not os.path.lexists(self.patch_path(entry))
                and self.meant_file(entry) == orphan
            ):
                return entry
        return None

    def missing_tip(self, entry: PatchEntry) -> str:
        """The ways out for an entry whose patch file was deleted (by hand, a merge)."""
        assert entry.file is not None
        return (
            f"restore it: `git checkout -- {PATCHES_DIR}/{entry.file}` (the committed "
            "version), or, when the work tree holds the patch, `forkpatch export --force` "
            f"(writes it from the work tree); or remove the patch: `forkpatch delete "
            f"{entry.name}`"
        )

    def save_series(self, series: Series) -> bool:
        changed = save_series(series, self.series_path)
        self._series = series
        self._read.pop(self.series_path, None)
        return changed

    def commit(
        self,
        patches: Mapping[PatchEntry, tuple[str, bytes] | bytes | None] | None = None,
        series: Series | None = None,
        *,
        extra: Mapping[Path, bytes | Path | None] | None = None,
    ) -> list[str]:
        """Write patch files and series.yaml as one unit (see
        :func:`forkpatch.fsutil.commit_files`); returns the changed relative paths.

        A patch's content is ``(header, diff)`` (written in the canonical form), the
        file's bytes (as :class:`forkpatch.patchtext.PatchTexts` renders them), or
        None (the file is deleted).

        series.yaml is rendered and parsed back first: nothing is written that could
        not be read again.
        """
        from forkpatch.patchfile import format_patch, in_line_endings_of

        changes: dict[Path, bytes | Path | None] = {}
        for entry, content in (patches or {}).items():
            path = self.patch_path(entry)
            if content is not None and not isinstance(content, bytes):
                content = format_patch(*content)
            if content is not None:
                # A file the checkout keeps in CRLF is written back in CRLF.
                content = in_line_endings_of(content, _current(path))
            changes[path] = content
        if series is not None:
            text = dump_series(series)
            parse_series(text, path=str(self.series_path))
            changes[self.series_path] = text.encode("utf-8")
        changes.update(extra or {})
        self.state_dir.mkdir(parents=True, exist_ok=True)
        changed = commit_files(
            changes,
            journal=self.state_dir / COMMIT_JOURNAL,
            root=self.root,
            allowed=_owned,
            expect={p: self._read[p] for p in changes if p in self._read},
        )
        for p, written in changes.items():
            if p in self._read:  # what is on disk now is this process's
                if isinstance(written, Path):
                    del self._read[p]
                else:
                    self._read[p] = written
        if series is not None:
            self._series = series
        return [self.rel(p) for p in changed]

    def recover(self, interrupted: str | None = None) -> list[str]:
        """Finish a multi-file write that a killed forkpatch left half done, and remove its
        temporary files. Must hold the lock. Returns the paths completed.

        ``interrupted``: what the lock file says of an earlier holder that never
        released it (``"<pid> <command>"``); the git locks its processes held in
        forkpatch's store are stale then, and are removed."""
        if interrupted:
            self._clear_stale_git_locks(interrupted)
        done = recover_files(self.state_dir / COMMIT_JOURNAL, root=self.root, allowed=_owned)
        if done:
            self._series = None
            log.warn(
                "finished writing "
                + ", ".join(self.rel(Path(p)) for p in done)
                + " (an earlier forkpatch was interrupted after deciding to write them)"
            )
        for d, recursive in self._temp_dirs(interrupted is not None):
            # .forkpatch/ is also written by read-only commands (status's cache), which
            # take no lock: there only what nobody has touched for a minute goes.
            young = d == self.state_dir and not interrupted
            sweep_temps(d, recursive=recursive, older_than=60.0 if young else None)
        return done

    def _temp_dirs(self, everywhere: bool) -> list[tuple[Path, bool]]:
        """Where forkpatch's writers leave temporary files when killed: series.yaml's
        directory, patches/, dist/, .forkpatch/ (state files) and the rebase journal's
        directory; ``everywhere`` (the last holder of the lock was killed): also all of
        .forkpatch/ and the work tree (files written into a work tree one by one)."""
        dirs = [
            (self.root, False),
            (self.patches_dir, True),
            (self.root / "dist", False),
            (self.state_dir / "rebase", False),
        ]
        dirs.append((self.state_dir, everywhere))
        if everywhere:
            with contextlib.suppress(StateError, OSError):
                state = self.read_state()
                if state is not None and state.worktree is not None:
                    dirs.append((state.worktree, True))
        return [(d, r) for d, r in dirs if d.is_dir() and not d.is_symlink()]

    def _clear_stale_git_locks(self, holder: str) -> None:
        """Remove the lock files git leaves when it is killed (``index.lock``,
        ``HEAD.lock``, ``refs/...lock``, a work tree's ``locked`` marker that ``git
        worktree add`` writes while it initialises), in this project's store only.

        Only called when the previous forkpatch died holding the project lock: every
        git process in the store runs under that lock, so these locks are its."""
        from forkpatch.gitlocks import lock_holders  # after a kill only

        store = self.store_dir
        if not store.is_dir() or store.is_symlink():
            return
        removed: list[str] = []
        for top, dirs, files in os.walk(store):
            dirs[:] = [d for d in dirs if d != "objects" and not (Path(top) / d).is_symlink()]
            for name in files:
                path = Path(top) / name
                stale = name.endswith(".lock")
                if name == "locked" and path.parent.parent.name == "worktrees":
                    with contextlib.suppress(OSError):
                        stale = (
                            path.read_text(encoding="utf-8", errors="replace").strip()
                            == "initializing"
                        )
                # The user's own git in the work tree may hold one right now.
                if stale and not path.is_symlink() and not lock_holders(path):
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
                        removed.append(path.relative_to(store).as_posix())
        if removed:
            pid, _, command = holder.partition(" ")
            log.warn(
                f"removed git lock files left in {self.rel(store)} by an interrupted "
                f"`forkpatch {command or '?'}` (pid {pid}): {', '.join(sorted(removed))}"
            )

    def recover_if_needed(self) -> None:
        """For read-only commands: finish an interrupted write, and repair the links of a
        moved or copied project, when nobody holds the lock."""
        if (
            not (self.state_dir / COMMIT_JOURNAL).exists()
            and not any(
                TMP_NAME.match(p.name)
                for d, recursive in self._temp_dirs(False)
                if not recursive and d != self.state_dir
                for p in d.iterdir()
            )
            and not any(TMP_NAME.match(p.name) for p in self.patches_dir.rglob(".*"))
            and not self._lock_left_behind()
            and not self.moved()
        ):
            return
        try:
            with project_lock(self.state_dir / "lock", command="recover") as left:
                self.recover(left)
                self.relocate_if_moved()
        except LockError:
            pass  # the holder will (or is about to) finish it

    def _lock_left_behind(self) -> bool:
        """Whether the lock file still names a holder: one that is running, or one that
        was killed (its temporary files and git locks are to be cleaned up)."""
        try:
            return (self.state_dir / "lock").stat().st_size > 0
        except OSError:
            return False

    def moved(self) -> bool:
        """Whether this project's links name another directory (it was moved or copied)."""
        try:
            state = stackstate.load_raw(self.state_dir / STATE_FILE)
        except StateError:
            state = None
        if state and state.get("root") not in (None, str(self.root)):
            return True
        admins = self.store_dir / "worktrees"
        if not admins.is_dir():
            return False
        for gitdir in admins.glob("*/gitdir"):
            with contextlib.suppress(OSError):
                target = Path(gitdir.read_text(encoding="utf-8", errors="replace").strip())
                prev = _project_of(target)
                if prev is not None and prev != self.root:
                    return True
        return False

    # ----------------------------------------------------------------- state

    @contextlib.contextmanager
    def locked(self, command: str) -> Iterator[None]:
        with project_lock(self.state_dir / "lock", command=command) as left:
            self.recover(left)
            if self.moved():
                self.relocate_if_moved()
            # While a rebase is in progress patches/ belongs to it: only `rebase`
            # (--continue / --skip / --abort) may change the project.
            if command != "rebase":
                self.refuse_during_rebase(command)
            yield

    def refuse_during_rebase(self, command: str) -> None:
        """Refuse ``command`` while the rebase journal exists (mutating commands only)."""
        path = self.state_dir / REBASE_JOURNAL
        if not (path.exists() or path.is_symlink()):
            return
        raise StateError(
            f"`forkpatch {command}` is refused while a rebase{_onto_of(path)} is in progress",
            tip="finish it with `forkpatch rebase --continue` "
            "(or --skip), or undo it with `forkpatch rebase --abort`",
        )

    def remember_files(
        self,
        records: Mapping[str, FileRecord],
        *,
        full: bool = False,
        base: SyncRecord | None = None,
        forget: Iterable[str] = (),
        state: StackState | None = None,
    ) -> None:
        """Put ``records`` into state.json's record of what the work tree agrees with
        (:class:`SyncRecord`). ``full``: they are the whole record now (the work tree
        was rebuilt from every file), in series.yaml's order; otherwise they go over
        ``base`` (default: the record state.json holds; without one, nothing is
        written: the stack makes one from what agrees, ``Stack.record``). A new entry
        goes after the one before it in series.yaml; the recorded order is otherwise
        kept, so that a reorder made outside forkpatch still shows. ``forget``: entries
        forkpatch removed. Nothing is recorded without a work tree. ``state``: the
        caller's next state, written with the record (default: the one on disk)."""
        given = state
        state = state if state is not None else self.read_state()
        if (
            state is None
            or state.worktree is None
            or (not full and base is None and state.synced is None)
        ):
            if given is not None:
                self.write_state(given)
            return
        if not full and base is None:
            assert state.synced is not None
            base = state.synced
        names = self.series.names()
        gone = set(forget)
        if base is None:
            patches: dict[str, FileRecord] = {}
            order = [n for n in names if n in records]
        else:
            patches = {n: r for n, r in base.patches.items() if n not in gone}
            order = [n for n in base.order if n not in gone]
        for name, rec in records.items():
            patches[name] = rec
            if name not in order:
                before = names[: names.index(name)] if name in names else names
                at = max((order.index(n) + 1 for n in before if n in order), default=0)
                order.insert(at, name)
        self.write_state(state.with_(synced=SyncRecord(patches=patches, order=tuple(order))))

    def read_state(self) -> StackState | None:
        """``.forkpatch/state.json`` (the work tree's), checked before it is trusted
        (None: absent); read once per command, then kept until :meth:`write_state`.
        (The rebase keeps and validates its own journal: forkpatch.rebase.state.)"""
        if self._stack_state is _UNREAD:
            path = self.state_dir / STATE_FILE
            self._stack_state = stackstate.load(path, root=self.root, where=self.rel(path))
        assert not isinstance(self._stack_state, _Unread)
        return self._stack_state

    def write_state(self, state: StackState | None) -> None:
        """Write (None: remove) ``state.json`` atomically, versioned and checksummed."""
        path = self.state_dir / STATE_FILE
        if state is None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            self._stack_state = None
            return
        atomic_write(path, stackstate.dump(state, root=self.root, where=self.rel(path)))
        self._stack_state = state.with_(root=str(self.root))

    # ----------------------------------------------------------------- moved or copied

    @property
    def store_dir(self) -> Path:
        return self.state_dir / "repo.git"

    def linked_worktree(self, path: Path) -> Git:
        """The git of the work tree at ``path``, checked to belong to this project's store.

        A work tree is ours when its ``.git`` file names an admin directory inside
        ``.forkpatch/repo.git/worktrees/`` whose ``gitdir`` names that ``.git`` file
        back. Anything else (a copied project's link to the original, a crafted
        state.json pointing at some other repository) is refused: forkpatch never
        runs git in another project's work tree.
        """
        dotgit = path / ".git"
        where = self.rel(dotgit)
        try:
            if not stat.S_ISREG(os.lstat(dotgit).st_mode):
                raise OSError(f"{where} is not a regular file")
            text = dotgit.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            text = f"<{where} cannot be read: {exc.__class__.__name__}>"
        admin = Path(text.removeprefix("gitdir:").strip()) if text.startswith("gitdir:") else None
        if admin is not None and not admin.is_absolute():
            admin = path / admin
        store = self.store_dir
        real = os.path.realpath
        ok = False
        if admin is not None and real(admin.parent) == real(store / "worktrees"):
            with contextlib.suppress(OSError, UnicodeDecodeError):
                back = (admin / "gitdir").read_text(encoding="utf-8").strip()
                ok = real(back) == real(dotgit)
        if not ok:
            raise StateError(
                f"the work tree {path} is not linked to this project's store {store} "
                f"(its .git names {admin or text!r}): the project was moved or copied, or "
                "the work tree belongs to another project",
                tip=f"forkpatch leaves it alone; move {self.rel(self.state_dir / STATE_FILE)} "
                "aside and run `forkpatch apply` (or `forkpatch apply --worktree NEW_DIR`) to "
                "make a work tree for this project",
            )
        assert admin is not None
        return Git(admin, work_tree=path)

    def relocate_if_moved(self) -> list[str]:
        """Repair a project that was moved or copied (``cp -a``, ``mv``); returns what changed.

        git's links between the store and its work trees are absolute paths. A work tree
        inside the project is re-linked to this project's store (both link files are
        inside the project). A work tree outside it is re-linked only when the project it
        came from no longer has a store (a move); after a copy it belongs to the original,
        so this copy forgets it (the original is never touched). Must hold the lock.
        """
        done: list[str] = []
        store = self.store_dir
        admins = store / "worktrees"
        import shutil  # only for a moved or copied project

        state_path = self.state_dir / STATE_FILE
        state = self.read_state() if state_path.exists() else None
        recorded = state.root if state is not None else None
        old_root = Path(recorded) if recorded and Path(recorded) != self.root else None
        if admins.is_dir() and not admins.is_symlink():
            for admin in sorted(admins.iterdir()):
                gitdir = admin / "gitdir"
                if admin.is_symlink() or not gitdir.is_file() or gitdir.is_symlink():
                    continue
                target = Path(gitdir.read_text(encoding="utf-8", errors="replace").strip())
                if _within(target, self.root):
                    continue  # already this project's
                prev = _project_of(target) or old_root
                if prev is None or prev == self.root:
                    continue
                try:
                    rel = target.relative_to(prev)
                except ValueError:
                    rel = None
                if rel is not None:
                    # Inside the project: the copy has its own files there; link them here.
                    mine = self.root / rel
                    if mine.parent.is_dir() and not mine.is_symlink() and mine.is_file():
                        check_inside(self.root, mine, where=self.rel(gitdir))
                        atomic_write(mine, f"gitdir: {admin}\n".encode())
                        atomic_write(gitdir, f"{mine}\n".encode())
                        done.append(f"re-linked the work tree {self.rel(mine.parent)}")
                    else:
                        shutil.rmtree(admin)
                    continue
                if (prev / STORE_DIR / "repo.git").exists():
                    # Outside, and the original still exists: it is the original's.
                    shutil.rmtree(admin)
                    if state is not None and state.worktree == target.parent:
                        state = state.with_(worktree=None, editing=None)
                    done.append(
                        f"forgot the work tree {target.parent}: it belongs to the project in "
                        f"{prev}, which this one was copied from"
                    )
                elif target.is_file() and not target.is_symlink():
                    atomic_write(target, f"gitdir: {admin}\n".encode())
                    done.append(f"re-linked the work tree {target.parent}")
        if state is not None and old_root is not None:
            self.write_state(state)  # records the new root (and what was forgotten)
        if done:
            log.warn(
                f"this project was moved or copied (it was in {old_root or 'another directory'}): "
                + "; ".join(done)
            )
        return done


def _current(path: Path) -> bytes | None:
    """A file's bytes now; None when it is not there (or not a regular file)."""
    try:
        return read_regular(path, follow=False)
    except (OSError, InputFileError):
        return None


def _owned(rel: str) -> bool:
    """The files of a project that forkpatch's multi-file commits may create or delete:
    series.yaml, patches/, and built wheels with their reports and SHA256SUMS."""
    parts = rel.split("/")
    if any(p.casefold() in (".git", STORE_DIR) for p in parts):
        return False
    if rel == SERIES_FILE or parts[0] == PATCHES_DIR:
        return True
    return parts[-1] == "SHA256SUMS" or parts[-1].endswith((".whl", ".smoke.json"))


def _within(path: Path, root: Path) -> bool:
    try:
        Path(os.path.abspath(path)).relative_to(root)
    except ValueError:
        return False
    return True


def _project_of(path: Path) -> Path | None:
    """The project directory a path under ``<project>/.forkpatch/`` belongs to."""
    parts = path.parts
    if STORE_DIR not in parts:
        return None
    idx = len(parts) - 1 - parts[::-1].index(STORE_DIR)
    return Path(*parts[:idx]) if idx else None


def _onto_of(journal: Path) -> str:
    """ " onto TAG" for a message, read without trusting the file (the rebase validates it)."""
    try:
        doc = json.loads(journal.read_bytes()) if not journal.is_symlink() else None
        data = doc.get("data") if isinstance(doc, dict) else None
        # Version 3 keeps the target in the plan; version 2 kept its name flat.
        onto = (
            (data["plan"]["target"]["name"] if "plan" in data else data["onto"])
            if isinstance(data, dict)
            else None
        )
    except (OSError, ValueError, KeyError, TypeError):
        return ""
    ok = isinstance(onto, str) and 0 < len(onto) <= 200 and onto.isprintable()
    return f" onto {onto}" if ok else ""


def open_project(directory: Path | None = None, fork_override: str | None = None) -> Project:
    project = Project(root=find_root(directory or Path.cwd()), fork_override=fork_override)
    project.recover_if_needed()
    return project
