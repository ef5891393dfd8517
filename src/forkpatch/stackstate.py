"""The editable stack's state, ``.forkpatch/state.json``, as frozen data.

:class:`StackState` is read once per command (validated field by field before it
is trusted) and written whole, atomically, versioned and checksummed: a command
makes the next state with :meth:`StackState.with_` and saves it. It lives below
the project (which records its own root in it, to notice a moved or copied
project) and below the stack (the commands that change it).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from forkpatch.errors import PathSafetyError, StateError
from forkpatch.fsutil import check_inside, check_relpath, dump_state, parse_state, read_regular
from forkpatch.series import COMMIT_RE, NAME_RE
from forkpatch.typedreader import TypedReader

STATE_FILE = "state.json"
STACK_KIND = "stack"
# 2: "synced", what the work tree last agreed with in patches/ and series.yaml.
STACK_VERSION = 2
# Older versions still read: their fields are a subset of this one's, and a state
# without "synced" gets its record made from what agrees on the next command.
STACK_OLDER_VERSIONS = (1,)

_OID = re.compile(r"\A[0-9a-f]{40}\Z")
_KEYS = frozenset({"root", "worktree", "base", "editing", "merge_bases", "layout", "synced"})
_RECORD_KEYS = frozenset({"file", "blob", "commit"})

#: For each patch, each file's (before, after) blob ids: the merge bases saved for a
#: later ``push --merge`` (None: the file was absent).
MergeBases = Mapping[str, Mapping[str, tuple[str | None, str | None]]]


@dataclass(frozen=True)
class Layout:
    """What the work tree holds: ``dirs`` None means every file."""

    dirs: tuple[str, ...] | None = None
    excluded: tuple[str, ...] = ()

    @property
    def sparse(self) -> bool:
        return self.dirs is not None

    @property
    def restricted(self) -> bool:
        """Whether git's sparse checkout must be on."""
        return self.dirs is not None or bool(self.excluded)

    def to_json(self) -> dict[str, object]:
        return {
            "dirs": None if self.dirs is None else list(self.dirs),
            "excluded": list(self.excluded),
        }

    @classmethod
    def from_json(cls, data: object) -> Layout:
        if not isinstance(data, dict):
            return cls()
        dirs = data.get("dirs")
        return cls(
            dirs=None if dirs is None else tuple(str(d) for d in dirs),
            excluded=tuple(str(p) for p in data.get("excluded") or ()),
        )

    def with_dirs(self, more: Iterable[str]) -> Layout:
        if self.dirs is None:
            return self
        merged = tuple(sorted(set(self.dirs) | set(more)))
        return Layout(dirs=merged, excluded=self.excluded)

    def with_excluded(self, more: Iterable[str]) -> Layout:
        return Layout(dirs=self.dirs, excluded=tuple(sorted(set(self.excluded) | set(more))))

    def covers(self, paths: Iterable[str]) -> bool:
        """Whether every one of ``paths`` lies in the work tree's directories."""
        if self.dirs is None:
            return True
        return set(dirs_of(paths)) <= set(self.dirs)


def dirs_of(paths: Iterable[str]) -> list[str]:
    """The directories to check out for ``paths`` (root files need none)."""
    out = set()
    for p in paths:
        parent = str(PurePosixPath(p).parent)
        if parent not in ("", "."):
            out.add(parent)
    return sorted(out)


@dataclass(frozen=True)
class FileRecord:
    """A patch as forkpatch last wrote or read it for the work tree: its file, the blob
    id of the file's bytes (None: there was no file) and the work tree's commit that
    those bytes give or were written from (None: not applied, or applied in a form the
    file does not hold, such as a `push --merge` with conflict markers)."""

    file: str | None
    blob: str | None
    commit: str | None

    def to_json(self) -> dict[str, str | None]:
        return {"file": self.file, "blob": self.blob, "commit": self.commit}


@dataclass(frozen=True)
class SyncRecord:
    """What the work tree last agreed with: each patch's :class:`FileRecord` and the
    order of series.yaml's entries then. A patch file whose blob differs, or an entry
    that is new, gone or moved, was changed outside forkpatch (a `git pull`, an edit)."""

    patches: Mapping[str, FileRecord]
    order: tuple[str, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "patches": {name: rec.to_json() for name, rec in self.patches.items()},
            "order": list(self.order),
        }

    @classmethod
    def from_json(cls, data: object) -> SyncRecord:
        """The record from state.json, every field checked (ValueError says which)."""
        if not isinstance(data, dict) or set(data) != {"patches", "order"}:
            raise ValueError("must be {patches: {NAME: {file, blob, commit}}, order: [NAME...]}")
        patches, order = data["patches"], data["order"]
        if not isinstance(order, list) or not all(_is_name(n) for n in order):
            raise ValueError(f"'order' must be a list of patch names, found {order!r}")
        if not isinstance(patches, dict):
            raise ValueError("'patches' must be a mapping")
        out: dict[str, FileRecord] = {}
        for name, rec in patches.items():
            if not _is_name(name) or not isinstance(rec, dict) or set(rec) != _RECORD_KEYS:
                raise ValueError(f"bad entry {name!r}")
            file, blob, commit = rec["file"], rec["blob"], rec["commit"]
            if file is not None:
                try:
                    check_relpath(file, where=f"synced.{name}.file")
                except PathSafetyError as exc:
                    raise ValueError(exc.message) from None
            for key, oid in (("blob", blob), ("commit", commit)):
                if oid is not None and not (isinstance(oid, str) and _OID.match(oid)):
                    raise ValueError(f"'{name}.{key}' must be a 40-hex id or null, found {oid!r}")
            out[name] = FileRecord(file=file, blob=blob, commit=commit)
        return cls(patches=out, order=tuple(order))


@dataclass(frozen=True)
class Editing:
    """``edit`` popped the patches above ``patch``: ``refresh`` re-applies ``above``."""

    patch: str
    above: tuple[str, ...] = ()


@dataclass(frozen=True)
class StackPosition:
    """Where the stack stood: its head, the base it was built on, the applied patches
    (a rebase keeps it to move the stack along at the end, or put it back)."""

    head: str
    base: str
    applied: tuple[str, ...]


@dataclass(frozen=True)
class StackState:
    """Where the editable stack stands.

    ``worktree``: the work tree's absolute path (None: no work tree); ``base``: the
    commit it was built on; ``editing``: the patch ``edit`` opened; ``layout``: which
    files the work tree holds; ``merge_bases``: images kept for ``push --merge``;
    ``synced``: what the work tree last agreed with in patches/; ``root``: the
    project directory the state was written in (a move or copy shows as another).
    """

    worktree: Path | None = None
    base: str | None = None
    editing: Editing | None = None
    layout: Layout = field(default_factory=Layout)
    merge_bases: MergeBases = field(default_factory=dict)
    synced: SyncRecord | None = None
    root: str | None = None

    def with_(self, **changes: Any) -> StackState:
        return replace(self, **changes)

    @property
    def empty(self) -> bool:
        """Nothing worth a file: no work tree, nothing kept for later."""
        return self.worktree is None and not self.merge_bases and self.base is None

    def above(self, patch: str) -> tuple[str, ...]:
        """The patches ``refresh`` of ``patch`` re-applies (none unless it is the one
        being edited)."""
        if self.editing is None or self.editing.patch != patch:
            return ()
        return self.editing.above

    def to_json(self, root: Path) -> dict[str, object]:
        """The file's data; the work tree relative when it is inside ``root`` (so that
        a moved project still finds it)."""
        out: dict[str, object] = {"root": str(root)}
        if self.worktree is not None:
            wt: str = str(self.worktree)
            with contextlib.suppress(ValueError):
                wt = self.worktree.relative_to(root).as_posix()
            out["worktree"] = wt
        if self.base is not None:
            out["base"] = self.base
        if self.editing is not None:
            out["editing"] = {"patch": self.editing.patch, "above": list(self.editing.above)}
        if self.layout != Layout():
            out["layout"] = self.layout.to_json()
        if self.merge_bases:
            out["merge_bases"] = {
                name: {rel: list(pair) for rel, pair in files.items()}
                for name, files in self.merge_bases.items()
            }
        if self.synced is not None:
            out["synced"] = self.synced.to_json()
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, root: Path, where: str) -> StackState:
        """The state from a file's data, every field checked: the work tree must be a
        plain path (inside ``root`` never through a symbolic link), names and object
        ids well-formed. ``where``: the file, for messages."""
        r = TypedReader(
            where, tip=f"move {where} aside and run `forkpatch apply` to make a new work tree"
        )
        r.mapping(data, "", keys=_KEYS)
        recorded = data.get("root")
        if recorded is not None and not (
            isinstance(recorded, str) and Path(recorded).is_absolute()
        ):
            raise r.fail("", f"'root' must be an absolute path, found {recorded!r}")
        return cls(
            worktree=_worktree(data.get("worktree"), root, r),
            base=_base(data.get("base"), r),
            editing=_editing(data.get("editing"), r),
            layout=_layout(data.get("layout"), r),
            merge_bases=_merge_bases(data.get("merge_bases"), r),
            synced=_synced(data.get("synced"), r),
            root=recorded,
        )


def load(path: Path, *, root: Path, where: str) -> StackState | None:
    """The state in ``path`` (None: absent), of this version or of an older one this
    forkpatch upgrades, checked before it is trusted (see :func:`parse_state`)."""
    raw = load_raw(path)
    return None if raw is None else StackState.from_json(raw, root=root, where=where)


def load_raw(path: Path) -> dict[str, object] | None:
    """The file's data, its seal and version checked but not its fields (None: absent)."""
    try:
        raw = read_regular(path, follow=False)
    except FileNotFoundError:
        return None
    try:
        return parse_state(raw, path=path, kind=STACK_KIND, version=STACK_VERSION)
    except StateError:
        for older in STACK_OLDER_VERSIONS:
            with contextlib.suppress(StateError):
                return parse_state(raw, path=path, kind=STACK_KIND, version=older)
        raise


def dump(state: StackState, *, root: Path, where: str) -> bytes:
    """The file's bytes; what could not be read back is never written."""
    body = state.to_json(root)
    StackState.from_json(body, root=root, where=where)
    return dump_state(STACK_KIND, STACK_VERSION, body)


# ----------------------------------------------------------------- field checks


def _is_name(value: object) -> bool:
    return isinstance(value, str) and NAME_RE.match(value) is not None


def _worktree(wt: object, root: Path, r: TypedReader) -> Path | None:
    if wt is None:
        return None
    if not isinstance(wt, str) or not wt:
        raise r.fail("", f"'worktree' must be a path, found {wt!r}")
    try:
        if Path(wt).is_absolute():
            full = Path(wt)
            if ".." in full.parts or "\0" in wt:
                raise PathSafetyError(f"worktree {wt!r} is not a plain path")
            with contextlib.suppress(ValueError):
                rel = full.relative_to(root).as_posix()
                check_inside(root, f"{rel}/.git", where="worktree")
        else:
            # ".git" below it: the work tree itself may not be a link either.
            rel = r.relpath(wt, "worktree")
            full = check_inside(root, f"{rel}/.git", where="worktree").parent
    except PathSafetyError as exc:
        raise r.fail("", exc.message) from None
    return full


def _base(base: object, r: TypedReader) -> str | None:
    if base is not None and not (isinstance(base, str) and COMMIT_RE.match(base)):
        raise r.fail("", f"'base' must be a 40-hex commit id, found {base!r}")
    return base


def _editing(editing: object, r: TypedReader) -> Editing | None:
    if editing is None:
        return None
    if (
        not isinstance(editing, dict)
        or set(editing) - {"patch", "above"}
        or not _is_name(editing.get("patch"))
        or not isinstance(editing.get("above", []), list)
        or not all(_is_name(n) for n in editing.get("above", []))
    ):
        raise r.fail("", f"'editing' must be {{patch: NAME, above: [NAME...]}}, found {editing!r}")
    return Editing(patch=editing["patch"], above=tuple(editing.get("above", [])))


def _layout(layout: object, r: TypedReader) -> Layout:
    if layout is None:
        return Layout()
    # Sparse directories or None (all), and files left out; every one a plain path.
    dirs = layout.get("dirs") if isinstance(layout, dict) else ()
    excluded = layout.get("excluded", []) if isinstance(layout, dict) else ()
    if (
        not isinstance(layout, dict)
        or set(layout) - {"dirs", "excluded"}
        or not (dirs is None or isinstance(dirs, list))
        or not isinstance(excluded, list)
    ):
        raise r.fail("", "'layout' must be {dirs: [DIR...]|null, excluded: [PATH...]}")
    for rel in [*(dirs or []), *excluded]:
        r.relpath(rel, "layout")
    return Layout.from_json(layout)


def _merge_bases(bases: object, r: TypedReader) -> MergeBases:
    if bases is None:
        return {}
    if not isinstance(bases, dict):
        raise r.fail("", "'merge_bases' must be a mapping")
    out: dict[str, dict[str, tuple[str | None, str | None]]] = {}
    for name, files in bases.items():
        if not _is_name(name) or not isinstance(files, dict):
            raise r.fail("", f"'merge_bases': bad entry {name!r}")
        out[name] = {}
        for rel, pair in files.items():
            r.relpath(rel, f"merge_bases.{name}")
            if not (
                isinstance(pair, list)
                and len(pair) == 2
                and all(o is None or (isinstance(o, str) and _OID.match(o)) for o in pair)
            ):
                raise r.fail("", f"'merge_bases.{name}.{rel}' must be [oid|null, oid|null]")
            out[name][rel] = (pair[0], pair[1])
    return out


def _synced(synced: object, r: TypedReader) -> SyncRecord | None:
    if synced is None:
        return None
    try:
        return SyncRecord.from_json(synced)
    except ValueError as exc:
        raise r.fail("", f"'synced': {exc}") from None
