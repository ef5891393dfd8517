"""Git objects in process, through libgit2 (pygit2): no git process per read or write.

What forkpatch does many times per command (read a blob, list a tree, resolve a name,
walk the stack's first parents, write a few blobs, trees and a commit, move a ref,
merge three versions of a file) costs a process start each through git's CLI; here it
costs a call. What this layer does not do stays with git's CLI (:mod:`forkpatch.git`):
anything that touches a work tree or an index (libgit2 has no sparse checkout and
reads no ``GIT_CONFIG_COUNT`` pins), diffs that become patch bytes, and large imports
(``fast-import`` writes one pack, libgit2 one loose file per object).

libgit2 reads no configuration but the repository's own: its search paths for the
system, global and XDG files are set to an empty directory before any repository is
opened, so that a user's ``~/.gitconfig`` cannot change what forkpatch reads or
writes (as ``git_env`` does for the CLI). Object hashes are not re-checked on read,
as ``git cat-file`` does not: a snapshot's placeholder blobs read as their bytes.

pygit2 is imported on first use: the read-only commands that need none of this do not
pay for its import.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
import threading
import zlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forkpatch.errors import GitError

if TYPE_CHECKING:
    import pygit2

_LOCK = threading.RLock()
_STORES: dict[Path, Objects] = {}
_EMPTY_CONFIG_DIR: tempfile.TemporaryDirectory[str] | None = None
_SCRATCH: Objects | None = None
_SCRATCH_DIR: tempfile.TemporaryDirectory[str] | None = None  # removed with the process


def _pygit2() -> Any:
    """pygit2, with its process-wide settings made hermetic (once)."""
    global _EMPTY_CONFIG_DIR
    import pygit2

    with _LOCK:
        if _EMPTY_CONFIG_DIR is None:
            _EMPTY_CONFIG_DIR = tempfile.TemporaryDirectory(prefix="forkpatch-noconfig-")
            for level in (
                pygit2.enums.ConfigLevel.SYSTEM,
                pygit2.enums.ConfigLevel.XDG,
                pygit2.enums.ConfigLevel.GLOBAL,
                pygit2.enums.ConfigLevel.PROGRAMDATA,
            ):
                pygit2.settings.search_path[level] = _EMPTY_CONFIG_DIR.name
            pygit2.settings.enable_strict_hash_verification(False)
    return pygit2


#: libgit2's words for a lock file it could not take (the path in quotes).
LOCK_FAILED = re.compile(r"failed to lock file '([^']+\.lock)'")


def _error(what: str, exc: BaseException) -> GitError:
    """A libgit2 failure as forkpatch's error; a lock file is named as git names it
    (``Unable to create '...lock': File exists``), so that git.py's lock handling (wait
    for a live holder, the tip for a stale lock) treats both alike."""
    text = str(exc)
    m = LOCK_FAILED.search(text)
    if m is not None:
        text = f"Unable to create '{m.group(1)}': File exists"
    return GitError(f"{what}: {text}")


def objects(git_dir: Path) -> Objects:
    """The in-process objects of the repository at ``git_dir`` (one per process)."""
    key = Path(os.path.abspath(git_dir))
    got = _STORES.get(key)
    if got is None:
        got = Objects(key)
        _STORES[key] = got
    return got


def forget(git_dir: Path) -> None:
    """Drop the open repository of ``git_dir`` (it was deleted or replaced)."""
    _STORES.pop(Path(os.path.abspath(git_dir)), None)


def _mode(mode: str) -> int:
    return int(mode, 8)


def signature_time(date: str) -> tuple[int, int]:
    """``@epoch +zone`` (or ``epoch +zone``) as (seconds, minutes east of UTC)."""
    when, _, zone = date.lstrip("@").partition(" ")
    zone = zone or "+0000"
    sign = -1 if zone.startswith("-") else 1
    digits = zone.lstrip("+-")
    return int(when), sign * (int(digits[:2]) * 60 + int(digits[2:4]))


class Objects:
    """One repository's objects and refs, read and written in process."""

    def __init__(self, git_dir: Path) -> None:
        self.git_dir = git_dir
        self._repo: pygit2.Repository | None = None
        self._opened: tuple[tuple[int, int, int], ...] = ()
        self._loose: Path | None = None  # where write_blob puts loose objects itself
        self._loose_known = False  # _loose looked up (None then: libgit2 writes them)

    def _identity(self) -> tuple[tuple[int, int, int], ...]:
        """What, changed, makes an open repository stale: the directory itself (deleted
        and made again) and the alternates file (libgit2 reads it when it opens)."""
        out = []
        for path, whole in (
            (self.git_dir, False),
            (self.git_dir / "objects/info/alternates", True),
        ):
            try:
                st = os.stat(path)
            except OSError:
                out.append((0, 0, 0))
                continue
            # A directory's times move with every file made in it: only its inode counts.
            out.append((st.st_ino, st.st_mtime_ns, st.st_size) if whole else (st.st_ino, 0, 0))
        return tuple(out)

    @property
    def repo(self) -> pygit2.Repository:
        identity = self._identity()
        if self._repo is not None and identity != self._opened:
            self._repo = None
        if self._repo is None:
            self._opened = identity
            pg = _pygit2()
            try:
                self._repo = pg.Repository(str(self.git_dir))
            except (pg.GitError, KeyError, OSError) as exc:
                raise _error(f"cannot open the repository {self.git_dir}", exc) from None
        return self._repo

    # ------------------------------------------------------------------ reading

    def read(self, spec: str) -> tuple[str, bytes] | None:
        """(type, content) for an object id or any name git resolves (``rev:path``)."""
        pg = _pygit2()
        repo = self.repo
        try:
            if len(spec) in (40, 64) and _is_hex(spec):
                raw = repo.odb.read(spec)
                return _TYPE_NAMES[raw[0]], bytes(raw[1])
            obj = repo.revparse_single(spec)
            raw = repo.odb.read(obj.id)
        except (KeyError, ValueError, pg.GitError, pg.InvalidSpecError):
            return None
        return _TYPE_NAMES[raw[0]], bytes(raw[1])

    def blob(self, oid: str) -> bytes | None:
        got = self.read(oid)
        return got[1] if got is not None and got[0] == "blob" else None

    def types(self, oids: Iterable[str]) -> dict[str, str]:
        pg = _pygit2()
        odb = self.repo.odb
        out: dict[str, str] = {}
        for oid in oids:
            if not oid:
                continue
            try:
                kind, _size = _read_header(odb, oid)
            except (KeyError, ValueError, pg.GitError):
                continue
            out[oid] = kind
        return out

    def rev_parse(self, rev: str) -> str | None:
        """What ``git rev-parse --verify`` gives for ``rev`` (a full id), or None."""
        pg = _pygit2()
        if rev.startswith("-"):
            return None
        try:
            return str(self.repo.revparse_single(rev).id)
        except (KeyError, ValueError, pg.GitError, pg.InvalidSpecError):
            return None

    def tree_id(self, rev: str) -> str:
        """The id of the tree of ``rev`` (a commit, a tag or a tree)."""
        pg = _pygit2()
        try:
            return str(self.repo.revparse_single(rev).peel(pg.Tree).id)
        except (KeyError, ValueError, pg.GitError, pg.InvalidSpecError) as exc:
            raise _error(f"no tree for '{rev}'", exc) from None

    def tree_entries(self, tree: str) -> dict[str, tuple[str, str]]:
        """One tree object's entries: name -> (mode, oid), a subtree's mode ``040000``.

        The object is read raw and parsed here (``<mode> <name>\\0<id>`` per entry):
        pygit2's entry objects cost an enum per mode, several times the parse."""
        pg = _pygit2()
        try:
            _kind, data = self.repo.odb.read(tree)
        except (KeyError, ValueError, pg.GitError) as exc:
            raise _error(f"cannot read the tree {tree}", exc) from None
        return {
            name.decode("utf-8", "surrogateescape"): (mode.decode().rjust(6, "0"), raw.hex())
            for name, (mode, raw) in _parse_tree(data, len(tree) // 2).items()
        }

    def ls_tree(self, rev: str) -> dict[str, tuple[str, str]]:
        """Every file of the tree of ``rev``: path -> (mode, oid) (``git ls-tree -r``)."""
        out: dict[str, tuple[str, str]] = {}

        def walk(tree: str, prefix: str) -> None:
            for name, (mode, oid) in self.tree_entries(tree).items():
                if mode == "040000":
                    walk(oid, prefix + name + "/")
                else:
                    out[prefix + name] = (mode, oid)

        walk(self.tree_id(rev), "")
        return out

    def first_parents(
        self, base: str, head: str, limit: int = 10_000
    ) -> list[tuple[str, str, str]] | None:
        """``git log --first-parent --reverse base..head`` when ``base`` is on ``head``'s
        first-parent line (the stack: always): (commit, first parent or "", message as
        ``%B`` prints it, in UTF-8, without its outer newlines), oldest first. None when it is not within ``limit`` commits (then git's walk,
        which also stops at commits reachable from ``base`` by other parents, is asked)."""
        pg = _pygit2()
        repo = self.repo
        out: list[tuple[str, str, str]] = []
        try:
            stop = repo.revparse_single(base).peel(pg.Commit).id
            commit = repo.revparse_single(head).peel(pg.Commit)
            while commit.id != stop:
                if len(out) >= limit or not commit.parent_ids:
                    return None
                parent = commit.parent_ids[0]
                out.append((str(commit.id), str(parent), _message(commit)))
                commit = repo[parent]
        except (KeyError, ValueError, pg.GitError, pg.InvalidSpecError):
            return None
        out.reverse()
        return out

    def peel(self, rev: str) -> tuple[str, str, str] | None:
        """(the object ``rev`` names, that object peeled of every tag object, its type),
        as ``git cat-file --batch-check`` of ``rev`` and ``rev^{}`` gives them; None when
        it names nothing (or is ambiguous)."""
        pg = _pygit2()
        if not rev or rev.startswith("-"):
            return None
        repo = self.repo
        try:
            obj: Any = repo.revparse_single(rev)
            named = str(obj.id)
            for _ in range(64):  # a chain of tags, bounded as git bounds it
                if obj.type != pg.enums.ObjectType.TAG:
                    break
                obj = repo[obj.target]
            else:
                return None
        except (KeyError, ValueError, pg.GitError, pg.InvalidSpecError):
            return None
        return named, str(obj.id), _TYPE_NAMES[int(obj.type)]

    def commits(self, revs: Iterable[str]) -> dict[str, tuple[str, str]]:
        """rev -> (commit id, subject as ``git log --format=%s`` prints it) for each of
        ``revs`` that names a commit (``git cat-file --batch-check`` of ``rev^{commit}``,
        then ``git log --no-walk``): an ambiguous or unknown name, or one that is no
        commit, is left out."""
        pg = _pygit2()
        repo = self.repo
        out: dict[str, tuple[str, str]] = {}
        for rev in revs:
            if not rev or rev.startswith("-"):
                continue
            try:
                commit = repo.revparse_single(rev).peel(pg.Commit)
            except (KeyError, ValueError, pg.GitError, pg.InvalidSpecError):
                continue
            subject = subject_of(_message(commit))
            # As git log prints it to a C locale and forkpatch reads it: valid UTF-8.
            subject = subject.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
            out[rev] = (str(commit.id), subject)
        return out

    def commit_parts(self, oid: str) -> tuple[str, tuple[str, ...], str] | None:
        """(tree, parents, message as written) of the commit ``oid``, or None."""
        pg = _pygit2()
        try:
            commit = self.repo.revparse_single(oid).peel(pg.Commit)
        except (KeyError, ValueError, pg.GitError, pg.InvalidSpecError):
            return None
        raw: bytes = commit.raw_message
        message = raw.decode("utf-8", "surrogateescape")
        return str(commit.tree_id), tuple(str(p) for p in commit.parent_ids), message

    def raw_changes(self, old: str, new: str) -> list[tuple[str, str, str, str, str]]:
        """(old mode, new mode, old id, new id, path) of every path whose entry differs
        between two trees, the fields of ``git diff-tree -r --raw --full-index
        --no-renames OLD NEW`` (an absent side: mode 000000 and the null id), in git's
        order; a file whose type changed (a link, an executable, a submodule) is one
        entry, as in git's, a file that became a directory a deletion and creations.

        The trees are walked here, raw, into the subtrees whose ids differ only: an
        edit's few paths read a few tree objects, where libgit2's diff (0.01 s on the
        fork) sets up a file-by-file comparison of every entry it meets."""
        out: list[tuple[str, str, str, str, str]] = []
        for path, before, after in self._tree_diff(old, new):
            null = "0" * len((before or after or ("", ""))[1])  # the ids' width
            out.append(
                (
                    before[0] if before else "000000",
                    after[0] if after else "000000",
                    before[1] if before else null,
                    after[1] if after else null,
                    path.decode("utf-8", "surrogateescape"),
                )
            )
        return out

    def changed_paths(self, old: str, new: str) -> list[str]:
        """The paths whose entries differ between two trees, sorted as git sorts them
        (``git diff --no-renames --name-only OLD NEW``)."""
        return [p.decode("utf-8", "surrogateescape") for p, _b, _a in self._tree_diff(old, new)]

    def _tree_diff(
        self, old: str, new: str
    ) -> list[tuple[bytes, tuple[str, str] | None, tuple[str, str] | None]]:
        """(path, old (mode, id) or None, new (mode, id) or None) of each file entry
        that differs between the trees of ``old`` and ``new``, sorted by path bytes
        (git's order: a tree's names compare as git compares them, a subtree's with
        its slash, so that the sorted paths are the walk's)."""
        pg = _pygit2()
        odb = self.repo.odb
        a, b = self.tree_id(old), self.tree_id(new)
        width = len(a) // 2
        out: list[tuple[bytes, tuple[str, str] | None, tuple[str, str] | None]] = []

        def entries(tree: bytes | None) -> dict[bytes, tuple[bytes, bytes]]:
            if tree is None:
                return {}
            try:
                return _parse_tree(odb.read(tree.hex())[1], width)
            except (KeyError, ValueError, pg.GitError) as exc:
                raise _error(f"cannot read the tree {tree.hex()}", exc) from None

        def walk(x: bytes | None, y: bytes | None, prefix: bytes) -> None:
            ex, ey = entries(x), entries(y)
            for name in ex.keys() | ey.keys():
                one, two = ex.get(name), ey.get(name)
                if one == two:
                    continue
                path = prefix + name
                tree_one = one is not None and one[0] == _TREE_MODE
                tree_two = two is not None and two[0] == _TREE_MODE
                if tree_one or tree_two:
                    walk(
                        one[1] if tree_one and one else None,
                        two[1] if tree_two and two else None,
                        path + b"/",
                    )
                file_one = _file_entry(one) if one is not None and not tree_one else None
                file_two = _file_entry(two) if two is not None and not tree_two else None
                if file_one != file_two:
                    out.append((path, file_one, file_two))

        walk(bytes.fromhex(a), bytes.fromhex(b), b"")
        out.sort(key=lambda item: item[0])
        return out

    # ------------------------------------------------------------------ writing

    def write_blob(self, data: bytes) -> str:
        """Write a blob (if the store lacks it) and return its id.

        A loose object compressed as git itself writes one (``core.looseCompression``
        1, zlib's fastest): libgit2 compresses at zlib's default, twice the time on the
        fork's large files, for a private store that a repack compresses anyway."""
        try:
            objects = self._loose_dir()
            if objects is None:
                return str(self.repo.create_blob(data))
            header = b"blob %d\0" % len(data)
            oid = _sha1(header, data)
            if oid not in self.repo.odb:
                _write_loose(objects, oid, header, data)
            return oid
        except (_pygit2().GitError, OSError) as exc:
            raise _error("cannot write a blob", exc) from None

    def has_blob(self, data: bytes) -> bool:
        """Whether the store already holds ``data`` as a blob (False where that is not
        cheap to tell: a store :meth:`write_blob` leaves to libgit2)."""
        try:
            if self._loose_dir() is None:
                return False
            return _sha1(b"blob %d\0" % len(data), data) in self.repo.odb
        except (_pygit2().GitError, OSError) as exc:
            raise _error("cannot read the object store", exc) from None

    def _loose_dir(self) -> Path | None:
        if not self._loose_known:
            self._loose = _loose_objects(self.git_dir, self.repo)
            self._loose_known = True
        return self._loose

    def write_tree(
        self,
        base_tree: str | None,
        changes: Mapping[str, tuple[str, str] | None],
        *,
        strict: bool = False,
    ) -> str:
        """The tree ``base_tree`` with ``changes`` (path -> (mode, blob id), or None to
        delete) made in order; a directory left empty is removed, as fast-import does.
        ``strict``: a path whose leading directory is a file or a symbolic link of the
        tree is refused (fast-import replaces it with a directory)."""
        pg = _pygit2()
        repo = self.repo
        try:
            tree = _edit_tree(repo, pg, base_tree, dict(changes), strict=strict)
            if tree is None:
                tree = str(repo.odb.write(pg.enums.ObjectType.TREE, b""))
        except (pg.GitError, OSError, ValueError) as exc:
            raise _error("cannot write a tree", exc) from None
        return tree

    def index_tree(self) -> str:
        """The tree of the index (``git write-tree``): refused, as git does, while it
        holds unmerged entries."""
        pg = _pygit2()
        try:
            index = self.repo.index
            index.read(True)
            if index.conflicts is not None:
                raise GitError(
                    f"the index of {self.git_dir} has unmerged entries",
                    tip="resolve them (git add the files), then run the command again",
                )
            return str(index.write_tree())
        except (pg.GitError, OSError) as exc:
            raise _error("cannot write the index's tree", exc) from None

    def write_commit(
        self,
        tree: str,
        parents: Sequence[str],
        message: str,
        *,
        identity: tuple[str, str],
        date: str | None,
    ) -> str:
        """A commit with ``identity`` as author and committer at ``date`` (``@epoch
        +zone``; None: now), its message written byte for byte."""
        pg = _pygit2()
        if date:
            when, offset = signature_time(date)
            who = pg.Signature(identity[0], identity[1], when, offset)
        else:
            who = pg.Signature(identity[0], identity[1])
        try:
            oid = self.repo.create_commit(None, who, who, message, tree, list(parents))
        except (pg.GitError, OSError, ValueError) as exc:
            raise _error("cannot write a commit", exc) from None
        return str(oid)

    def update_ref(
        self, ref: str, new: str, old: str | None = None, *, message: str = "forkpatch"
    ) -> None:
        """Point ``ref`` (a symbolic ref such as HEAD: the branch it names) at ``new``;
        ``old``: only if it points there now (``git update-ref REF NEW OLD``)."""
        pg = _pygit2()
        repo = self.repo
        try:
            name = ref
            current = repo.references.get(ref)
            if current is not None and current.type == pg.enums.ReferenceType.SYMBOLIC:
                name = str(current.target)
                current = repo.references.get(name)
            if old is not None:
                now = str(current.target) if current is not None else None
                if now != old:
                    raise GitError(
                        f"cannot update {ref}: it is at {now or 'nothing'}, not {old}",
                        tip="another command moved it meanwhile: run the command again",
                    )
            repo.create_reference_direct(name, pg.Oid(hex=new), True, message=message)
        except (pg.GitError, OSError) as exc:  # a held lock file is an OSError
            raise _error(f"cannot update {ref}", exc) from None

    def delete_ref(self, ref: str) -> None:
        pg = _pygit2()
        try:
            got = self.repo.references.get(ref)
            if got is not None:
                got.delete()
        except (pg.GitError, OSError) as exc:
            raise _error(f"cannot delete {ref}", exc) from None


_TYPE_NAMES = {1: "commit", 2: "tree", 3: "blob", 4: "tag"}


def _message(commit: Any) -> str:
    """A commit's message in UTF-8 (from its ``encoding`` header's, as git log does)."""
    raw: bytes = commit.raw_message
    encoding = commit.message_encoding or "utf-8"
    try:
        text = raw.decode(encoding, "surrogateescape")
    except LookupError:
        text = raw.decode("utf-8", "surrogateescape")
    return text.strip("\n")


def subject_of(message: str) -> str:
    """A commit message's subject as ``git log --format=%s`` gives it: the first
    paragraph (blank lines before it skipped), its lines' trailing white space removed
    and the lines joined with a space."""
    lines: list[str] = []
    for line in message.split("\n"):
        if not line.strip():
            if lines:
                break
            continue
        lines.append(line.rstrip())
    return " ".join(lines)


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text)


def _read_header(odb: Any, oid: str) -> tuple[str, int]:
    kind, data = odb.read(oid)
    return _TYPE_NAMES[kind], len(data)


_TREE_MODE = b"40000"


def _file_entry(entry: tuple[bytes, bytes]) -> tuple[str, str]:
    """A tree's file entry as ``git diff-tree`` prints it: (mode, hex id), its mode
    canonical as git reads it (a regular file 100644 or 100755 by its owner's
    execute bit, a link 120000, anything else a submodule's 160000)."""
    mode = int(entry[0], 8)
    kind = mode & 0o170000
    if kind == 0o100000:
        text = "100755" if mode & 0o100 else "100644"
    elif kind == 0o120000:
        text = "120000"
    else:
        text = "160000"
    return text, entry[1].hex()


def _parse_tree(data: bytes, width: int) -> dict[bytes, tuple[bytes, bytes]]:
    """A raw tree object's entries (``<mode> <name>\\0<id>`` each, ids ``width``
    bytes): name -> (mode as git writes it, ``40000`` for a subtree; raw id)."""
    entries: dict[bytes, tuple[bytes, bytes]] = {}
    i, end = 0, len(data)
    while i < end:
        space = data.index(b" ", i)
        nul = data.index(b"\0", space)
        entries[data[space + 1 : nul]] = (data[i:space], data[nul + 1 : nul + 1 + width])
        i = nul + 1 + width
    return entries


def _edit_tree(
    repo: Any,
    pg: Any,
    tree_id: str | None,
    changes: dict[str, tuple[str, str] | None],
    *,
    strict: bool = False,
) -> str | None:
    """Write ``tree_id`` with ``changes`` (relative paths); None when it ends empty.

    Tree objects are read and written raw (``<mode> <name>\\0<id>`` per entry, in
    git's order): names stay git's bytes whatever the locale's encoding, where
    pygit2's tree builder encodes them with the file system's."""
    odb = repo.odb
    entries = _parse_tree(odb.read(tree_id)[1], len(tree_id) // 2) if tree_id else {}
    direct: dict[bytes, tuple[str, str] | None] = {}
    below: dict[bytes, dict[str, tuple[str, str] | None]] = {}
    for path, value in changes.items():
        head, sep, rest = path.partition("/")
        name = head.encode("utf-8", "surrogateescape")
        if not name or b"\0" in name or name in (b".", b".."):
            raise ValueError(f"'{path}' is not a path a tree can hold")
        if sep:
            below.setdefault(name, {})[rest] = value
            direct.pop(name, None)
        else:
            direct[name] = value
            below.pop(name, None)
    for name, value in direct.items():
        if value is None:
            entries.pop(name, None)
        else:
            entries[name] = (value[0].lstrip("0").encode(), bytes.fromhex(value[1]))
    for name, sub in below.items():
        existing = entries.get(name)
        is_dir = existing is not None and existing[0] == b"40000"
        if strict and existing is not None and not is_dir:
            raise ValueError(f"'{name.decode(errors='replace')}' is not a directory of the tree")
        sub_id = existing[1].hex() if existing is not None and is_dir else None
        new = _edit_tree(repo, pg, sub_id, sub, strict=strict)
        if new is None:
            if sub_id is not None:
                entries.pop(name)
        else:
            entries[name] = (b"40000", bytes.fromhex(new))
    if not entries:
        return None
    # git's order: a directory sorts as though its name ended in "/".
    order = sorted(entries, key=lambda n: n + b"/" if entries[n][0] == b"40000" else n)
    body = b"".join(entries[n][0] + b" " + n + b"\0" + entries[n][1] for n in order)
    return str(odb.write(pg.enums.ObjectType.TREE, body))


# ---------------------------------------------------------------------- 3-way merges


class _ScratchObjects(Objects):
    """A repository of nothing but an object database in a temporary directory (no
    config, refs or HEAD: 0.5 ms to make where ``git init`` of a bare repository takes
    15-50 ms, paid by every command that merges)."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        pg = _pygit2()
        repo = pg.Repository()
        odb = pg.Odb()
        odb.add_backend(pg.OdbBackendLoose(str(directory), 1, False), 1)
        repo.set_odb(odb)
        self._repo = repo

    @property
    def repo(self) -> pygit2.Repository:
        assert self._repo is not None
        return self._repo


def _scratch() -> Objects:
    """A private object database for the blobs of 3-way merges: a merge never writes
    into the project's store, so that a read-only project still gets its status."""
    global _SCRATCH, _SCRATCH_DIR
    with _LOCK:
        if _SCRATCH is None:
            _SCRATCH_DIR = tempfile.TemporaryDirectory(prefix="forkpatch-merge-")
            _SCRATCH = _ScratchObjects(Path(_SCRATCH_DIR.name))
    return _SCRATCH


#: git's test for a binary file (``buffer_is_binary``): a NUL in its first 8,000 bytes.
BINARY_PROBE = 8000


def is_binary(data: bytes) -> bool:
    return b"\0" in data[:BINARY_PROBE]


def merge_file(
    ours: bytes, base: bytes, theirs: bytes, labels: tuple[str, str, str]
) -> tuple[bytes | None, int]:
    """A 3-way merge as ``git merge-file -p --diff3 -L ours -L base -L theirs`` prints it,
    through git's own xdiff in libgit2; returns (result, conflicting regions). A binary
    side gives (None, 1): git merge-file refuses it ("Cannot merge binary files")."""
    if is_binary(ours) or is_binary(base) or is_binary(theirs):
        return None, 1
    pg = _pygit2()
    from pygit2.errors import check_error

    ffi, lib = pg.ffi, pg.C
    store = _scratch()
    repo = store.repo
    ids = [repo.create_blob(data) for data in (base, ours, theirs)]
    keep: list[Any] = []

    def entry(oid: Any) -> Any:
        e = ffi.new("git_index_entry *")
        path = ffi.new("char[]", b"file")
        keep.append(path)
        e.path = path
        e.mode = 0o100644
        ffi.memmove(ffi.addressof(e, "id"), oid.raw, len(oid.raw))
        keep.append(e)
        return e

    opts = ffi.new("git_merge_file_options *")
    opts.version = 1
    c_labels = [ffi.new("char[]", label.encode("utf-8", "surrogateescape")) for label in labels]
    opts.our_label, opts.ancestor_label, opts.their_label = c_labels
    opts.favor = lib.GIT_MERGE_FILE_FAVOR_NORMAL
    opts.flags = lib.GIT_MERGE_FILE_STYLE_DIFF3
    opts.marker_size = 7
    out = ffi.new("git_merge_file_result *")
    # pygit2 wraps this call without its options (labels, diff3 style) and decodes the
    # result as text: it is made here on pygit2's own handle of the repository.
    handle = repo._repo  # noqa: SLF001
    err = lib.git_merge_file_from_index(
        out, handle, entry(ids[0]), entry(ids[1]), entry(ids[2]), opts
    )
    if err < 0:
        try:
            check_error(err)
        except (pg.GitError, KeyError, ValueError) as exc:
            raise _error("3-way merge failed", exc) from None
    try:
        merged = bytes(ffi.buffer(out.ptr, out.len)) if out.ptr != ffi.NULL else b""
        clean = bool(out.automergeable)
    finally:
        lib.git_merge_file_result_free(out)
    if not clean and not (ours and base and theirs):
        merged = _label_empty_sides(merged, (ours, base, theirs), labels)
    return merged, 0 if clean else max(1, count_conflicts(merged, labels))


_MARKERS = (b"<<<<<<<", b"|||||||", b">>>>>>>")


def _label_empty_sides(
    merged: bytes, sides: tuple[bytes, bytes, bytes], labels: tuple[str, str, str]
) -> bytes:
    """libgit2 leaves a side's label off its marker when that side is empty (a file one
    side creates or deletes); git writes it. The bare marker line is put back as git's."""
    named = {
        marker: marker + b" " + label.encode("utf-8", "surrogateescape")
        for marker, side, label in zip(_MARKERS, sides, labels, strict=True)
        if not side
    }
    lines = merged.split(b"\n")
    return b"\n".join(named.get(line, line) for line in lines)


def count_conflicts(merged: bytes, labels: tuple[str, str, str]) -> int:
    """The conflicting regions of a diff3-style merge result with these labels."""
    opening = b"<<<<<<< " + labels[0].encode("utf-8", "surrogateescape")
    return sum(1 for line in merged.split(b"\n") if line == opening)


def _sha1(header: bytes, data: bytes) -> str:
    digest = hashlib.sha1(header, usedforsecurity=False)
    digest.update(data)
    return digest.hexdigest()


def _loose_objects(git_dir: Path, repo: Any) -> Path | None:
    """The objects directory :meth:`Objects.write_blob` writes loose objects into
    itself: a repository's own (not a linked work tree's, whose objects live in the
    common directory) and of SHA-1 ids; None where libgit2 writes them."""
    objects = git_dir / "objects"
    if (git_dir / "commondir").exists() or not objects.is_dir() or objects.is_symlink():
        return None
    try:
        fmt = repo.config["extensions.objectformat"]
    except (KeyError, ValueError):
        fmt = "sha1"
    return objects if str(fmt).lower() == "sha1" else None


def _write_loose(objects: Path, oid: str, header: bytes, data: bytes) -> None:
    """One loose object, written whole to a new file beside it and then moved into
    place, so that no reader sees a part of it (git's own way; an object with this id
    that got there first is the same bytes)."""
    directory = objects / oid[:2]
    directory.mkdir(exist_ok=True)
    packer = zlib.compressobj(1)
    body = packer.compress(header) + packer.compress(data) + packer.flush()
    fd, tmp = tempfile.mkstemp(prefix="tmp_obj_", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(body)
        os.chmod(tmp, 0o444)
        os.replace(tmp, directory / oid[2:])
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
