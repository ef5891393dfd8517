"""The files of the editable work tree: full or sparse, and files git cannot check out.

A work tree is a ``git worktree`` of forkpatch's private store. It is *full*
(every file of the fork, the default: editors and grep see the whole tree) or
*sparse* (``apply --sparse``: the root files and the directories the applied
patches touch, recursively, plus the files directly in their parents: what
``git sparse-checkout`` calls cone mode). A sparse work tree of the 5,800-file
fork holds a few hundred files and is made in a fraction of the time.

Both use git's own sparse-checkout (cone mode for directories; non-cone
patterns once single files must be left out too): git then keeps the excluded
paths out across checkouts and resets, ``git status`` ignores them and ``git
add -A`` never stages them.

*Phantom* files are the other reason to leave a path out: a blob whose content
does not hash to its id (a fork snapshot with placeholder blobs, such as the
test fixture's four files under ``docs/``). git checks out its bytes, and when
it later rehashes the file it sees another id and reports the file as modified
although not a byte differs. Left in, such a file would show in ``git status``,
make forkpatch refuse to go on ("changes that are not in a patch"), and end up
in a patch commit as a change of id. forkpatch compares the bytes of every file
git reports as modified with the blob git recorded; when they are equal it
leaves the path out of the work tree (:func:`settle`) and says so once.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from forkpatch import log
from forkpatch.errors import ForkpatchError, ForkRepoError, GitError
from forkpatch.git import Begun, Git
from forkpatch.stackstate import Layout

if TYPE_CHECKING:
    from forkpatch.engine import TreeFiles

_SPECIAL = re.compile(r"([\\*?\[\]!#])")


def _escape(path: str) -> str:
    return _SPECIAL.sub(r"\\\1", path)


def patterns(layout: Layout) -> list[str]:
    """git sparse-checkout patterns (non-cone syntax) for ``layout``.

    Directories are written the way cone mode writes them: the root's files, each
    listed directory recursively, and the files directly in every parent.
    """
    lines = ["/*"]
    if layout.dirs is not None:
        lines.append("!/*/")
        parents: set[str] = set()
        for d in layout.dirs:
            parts = d.split("/")
            for i in range(1, len(parts)):
                parents.add("/".join(parts[:i]))
        wanted = set(layout.dirs)
        # A parent that is itself wanted is included whole; otherwise only its files.
        for p in sorted(parents - wanted):
            if any(w == p or p.startswith(w + "/") for w in wanted):
                continue
            lines += [f"/{_escape(p)}/", f"!/{_escape(p)}/*/"]
        for d in sorted(wanted):
            if any(d.startswith(w + "/") for w in wanted):
                continue  # inside another wanted directory
            lines.append(f"/{_escape(d)}/")
    lines += [f"!/{_escape(p)}" for p in layout.excluded]
    return lines


def apply_layout(wt: Git, layout: Layout) -> None:
    """Make git's sparse checkout of ``wt`` match ``layout`` (files appear or go).

    Directories alone use cone mode (git matches them by hash: fast whatever
    their number); files left out need non-cone patterns (matched one by one,
    which costs little while they are few: the usual case with phantom files).
    """
    with objects_named():
        _apply_layout(wt, layout)


def _apply_layout(wt: Git, layout: Layout) -> None:
    if layout.dirs is not None and not layout.excluded:
        dirs = [d for d in layout.dirs if not any(d.startswith(w + "/") for w in layout.dirs)]
        wt.run("sparse-checkout", "set", "--cone", "--stdin", input=_stdin(dirs))
    elif layout.restricted:
        wt.run("sparse-checkout", "set", "--no-cone", "--stdin", input=_stdin(patterns(layout)))
    elif _sparse_enabled(wt):
        wt.run("sparse-checkout", "disable")


def _stdin(lines: Sequence[str]) -> bytes:
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape")


def _sparse_enabled(wt: Git) -> bool:
    proc = wt.run("config", "--bool", "core.sparseCheckout", check=False)
    return proc.stdout.decode().strip() == "true"


# git's words for a blob it cannot read while writing a work tree: one file after the
# other, and in a parallel checkout (checkout.workers), whose workers name it the other way.
_MISSING = re.compile(r"unable to read sha1 file of (.+?) \(([0-9a-f]{40,64})\)")
_MISSING_PARALLEL = re.compile(r"cannot read object ([0-9a-f]{40,64}) '(.+?)'$", re.M)


@contextlib.contextmanager
def objects_named() -> Iterator[None]:
    """A checkout that fails on an object the fork's repository lacks (a partial
    snapshot of the fork: some large blobs left out) is reported with the files it
    could not write and the ways out, not as git's bare "unable to read sha1 file"."""
    try:
        yield
    except GitError as exc:
        missing = _MISSING.findall(exc.message) + [
            (path, oid) for oid, path in _MISSING_PARALLEL.findall(exc.message)
        ]
        if not missing:
            raise
        shown = ", ".join(f"{p} ({oid[:12]})" for p, oid in missing[:5])
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise ForkRepoError(
            f"the fork's repository lacks the content of {len(missing)} file(s) the work "
            f"tree needs: {shown}{more} (a partial snapshot of the fork, with some large "
            "blobs left out); the work tree was not made whole",
            tip="`forkpatch apply --sparse` checks out only the directories the series "
            "touches (the missing files are left out); or use a complete clone of the fork "
            "(`git clone` of its URL, or `git fetch` the missing objects into it: a "
            "`git fetch --unshallow` for a shallow clone), passed as `--fork-repo PATH` or "
            "FORKPATCH_FORK_REPO, then `forkpatch apply` again",
        ) from None


def add_worktree(store: Git, path: Path, branch: str, head: str, layout: Layout) -> Git:
    """A new work tree at ``path`` on ``branch`` = ``head``, holding ``layout``'s files
    (the caller has pruned stale work trees)."""
    with objects_named():
        return _add_worktree(store, path, branch, head, layout)


def _add_worktree(store: Git, path: Path, branch: str, head: str, layout: Layout) -> Git:
    if not layout.restricted:
        store.run("worktree", "add", "-q", "-f", "-B", branch, str(path), head)
        return open_worktree(path)
    # Sparse: check out nothing, set the patterns, then write just those files.
    store.run("worktree", "add", "-q", "-f", "--no-checkout", "-B", branch, str(path), head)
    wt = open_worktree(path)
    apply_layout(wt, layout)
    wt.run("reset", "-q", "--hard", head)
    return wt


def open_worktree(path: Path) -> Git:
    text = (path / ".git").read_text(encoding="utf-8", errors="surrogateescape").strip()
    admin = Path(text.split(":", 1)[1].strip())
    admin = admin if admin.is_absolute() else (path / admin).resolve()
    return Git(admin, work_tree=path)


# --------------------------------------------------------------------------- status


@dataclass(frozen=True)
class Change:
    """One entry of ``git status``: two status letters (as ``--porcelain`` shows them),
    the path, and for a tracked file its index entry's mode and blob id."""

    xy: str
    path: str
    index_mode: str | None = None
    index_oid: str | None = None


#: The status of a new path the ignore rules leave out (``git status --ignored``).
IGNORED = "!!"


_STATUS = ("status", "--porcelain=v2", "-z", "--untracked-files=all", "--ignored=matching")


def begin_status(wt: Git) -> Begun:
    """:func:`status`'s ``git status`` started now, to run beside the command's other
    work; its answer is read by ``status(wt, begun)``."""
    return wt.begin(*_STATUS)


def status(wt: Git, begun: Begun | None = None) -> list[Change]:
    """``git status`` of the work tree against its HEAD, untracked files one by one,
    and the new paths the ignore rules leave out (:data:`IGNORED`; an ignored directory
    as one ``dir/`` entry). ``begun``: that status, started earlier (:func:`begin_status`).

    The v2 form names each changed file's index entry, so that no second process is
    needed to read the blob it was checked out from (:func:`phantoms`). The ignored
    paths come in the same walk of the tree (a refresh names them, never drops them
    in silence); what they cost there is next to nothing."""
    raw = (begun.result() if begun is not None else wt.run(*_STATUS)).stdout
    out: list[Change] = []
    parts = raw.split(b"\0")
    i = 0
    while i < len(parts):
        item = parts[i]
        i += 1
        kind = item[:2]
        if kind in (b"? ", b"! "):
            xy = "??" if kind == b"? " else IGNORED
            out.append(Change(xy, item[2:].decode("utf-8", "surrogateescape")))
            continue
        if kind not in (b"1 ", b"2 ", b"u "):
            continue
        # 1 XY sub mH mI mW hH hI path / 2 ... hI Xscore path NUL orig / u XY sub m1 m2 m3 mW h1 h2 h3 path
        fields = {b"1 ": 8, b"2 ": 9, b"u ": 10}[kind]
        head = item.split(b" ", fields)
        xy = head[1].decode().replace(".", " ")
        path = head[fields].decode("utf-8", "surrogateescape")
        if kind == b"u ":
            out.append(Change(xy, path))
            continue
        out.append(Change(xy, path, index_mode=head[4].decode(), index_oid=head[7].decode()))
        if kind == b"2 ":
            i += 1  # the rename's source path follows
    return out


_WHAT = {
    "M": "modified",
    "A": "added",
    "D": "deleted",
    "R": "renamed",
    "C": "copied",
    "T": "type changed",
    "U": "unmerged",
}


def describe_changes(changes: Sequence[Change], limit: int = 8) -> str:
    """``changes`` for a message: each path with what happened to it, the first ``limit``."""

    def what(c: Change) -> str:
        if c.xy == "??":
            return "new, untracked"
        letter = (c.xy[1] if c.xy[1] != " " else c.xy[0]).upper()
        return _WHAT.get(letter, "changed")

    shown = ", ".join(f"{c.path} ({what(c)})" for c in changes[:limit])
    more = len(changes) - limit
    return shown + (f" and {more} more (`git status` lists them)" if more > 0 else "")


def fs_path(root: Path, path: str) -> Path:
    """The file of the git path ``path`` (UTF-8, as git prints it) under ``root``, named
    in the file system's own encoding: under a non-UTF-8 locale the bytes stay git's."""
    return root / os.fsdecode(path.encode("utf-8", "surrogateescape"))


def phantoms(wt: Git, changes: Sequence[Change]) -> list[str]:
    """Paths git reports as modified whose bytes equal the blob git recorded for them."""
    recorded = {
        c.path: c.index_oid
        for c in changes
        if c.xy == " M" and c.index_oid and c.index_mode in ("100644", "100755")
    }
    if not recorded or wt.work_tree is None:
        return []
    out = []
    with wt.reader() as reader:
        reader.prefetch(list(recorded.values()))
        for path, oid in recorded.items():
            f = fs_path(wt.work_tree, path)
            if f.is_symlink() or not f.is_file():
                continue
            if reader.blob(oid) == f.read_bytes():
                out.append(path)
    return sorted(out)


def settle(
    wt: Git, layout: Layout, source: str, begun: Begun | None = None
) -> tuple[Layout, list[Change], list[str]]:
    """Leave phantom files out of the work tree; return the new layout, the real
    changes and the ignored new paths (``begun``: the status, started earlier)."""
    changes = status(wt, begun)
    ignored = [c.path for c in changes if c.xy == IGNORED]
    changes = [c for c in changes if c.xy != IGNORED]
    found = phantoms(wt, changes)
    if not found:
        return layout, changes, ignored
    new = layout.with_excluded(found)
    # git keeps a file it takes for modified in the work tree whatever the patterns
    # say; these hold the blob's exact bytes, so nothing is lost by removing them.
    assert wt.work_tree is not None
    for path in found:
        (wt.work_tree / path).unlink()
    apply_layout(wt, new)
    shown = ", ".join(found[:4]) + (f" and {len(found) - 4} more" if len(found) > 4 else "")
    log.warn(
        f"left {len(found)} file(s) out of the work tree whose content does not match "
        f"their object id in {source} (a snapshot with placeholder blobs?): {shown}"
    )
    return new, [c for c in changes if c.path not in set(found)], ignored


# --------------------------------------------------------------------------- moving

#: Up to this many changed paths a clean work tree is moved in process (:func:`move`);
#: more go to ``git reset --hard``. Measured on the fork's 5,800-file tree: 5 paths 18
#: against 26 ms, 20 paths 25 against 31 ms, 50 paths 46 against 39 ms, 200 paths 153
#: against 56 ms. Each file is written whole under a temporary name and renamed over the
#: old one (never a half-written file), and on ext4 a rename over a file starts writing
#: the new one out; git writes in place.
MOVE_IN_PROCESS_PATHS = 24


def move(wt: Git, store: Git, target: str, layout: Layout) -> bool:
    """Move a clean work tree and its index from HEAD to ``target``, as ``git reset
    --hard`` would, in process: only the files that differ between the two commits are
    written or removed, their index entries replaced in one ``git update-index``, and
    HEAD's branch moved. False, before anything is written, where git must do it.

    ``git reset --hard`` reads both trees whole and checks every file of the index
    (0.04-0.05 s on the fork's 5,600 files) to write the few an edit moves. The caller
    knows the tree is clean (its ``git status`` of this command found no change): the
    files that stay are what both commits hold. Left to git: a sparse work tree the
    paths are not all in, a submodule, a file where a directory must go (or the other
    way round), an attributes file on a path's way (it may convert what is written;
    forkpatch's git reads none outside the tree and the store), many paths. A written
    file's index entry carries no file times: the next ``git status`` reads it once
    (the few files it moved) and writes the times back."""
    from forkpatch import intree  # the commands that only read write no file

    root = wt.work_tree
    if root is None:
        return False
    objects = wt.objects
    head = objects.rev_parse("HEAD")
    if head is None:
        return False
    if head == target:
        return True
    changes = objects.raw_changes(head, target)
    if len(changes) > MOVE_IN_PROCESS_PATHS or not _movable(
        wt, store, root, changes, (head, target), layout
    ):
        return False
    writes = [(c[1], c[3], c[4]) for c in changes if c[1] != "000000"]
    with wt.reader() as reader:
        reader.prefetch([oid for _m, oid, _p in writes])
        blobs = {oid: reader.blob(oid) for _m, oid, _p in writes}
    if any(data is None for data in blobs.values()):
        return False  # an object the store lacks: git names it (objects_named)
    for _om, new_mode, _oo, _no, path in changes:
        if new_mode == "000000" and intree.remove_in_tree(root, path):
            _prune_empty_dirs(root, path)
    for mode, oid, path in writes:
        data = blobs[oid]
        assert data is not None
        executable = mode == "100755"
        link = mode == "120000"
        intree.write_in_tree(root, path, data, mode=0o755 if executable else 0o644, symlink=link)
    null = "0" * len(target)
    records = [
        (f"0 {null}" if new_mode == "000000" else f"{new_mode} {new_oid}").encode()
        + b"\t"
        + path.encode("utf-8", "surrogateescape")
        + b"\0"
        for _om, new_mode, _oo, new_oid, path in changes
    ]
    wt.run("update-index", "-z", "--index-info", input=b"".join(records))
    wt.update_ref("HEAD", target, message="forkpatch")
    return True


def _movable(
    wt: Git,
    store: Git,
    root: Path,
    changes: Sequence[tuple[str, str, str, str, str]],
    commits: tuple[str, str],
    layout: Layout,
) -> bool:
    """Whether :func:`move` may write ``changes`` itself (see there)."""
    from forkpatch.engine import TreeFiles  # the commands that only read load no engine

    paths = [c[4] for c in changes]
    if layout.restricted and (not layout.covers(paths) or set(paths) & set(layout.excluded)):
        return False
    if any("160000" in (c[0], c[1]) for c in changes):
        return False
    trees = [TreeFiles(wt, commit) for commit in commits]
    if _attributes_on_the_way(store, root, trees, paths):
        return False
    for _om, new_mode, _oo, _no, path in changes:
        if new_mode == "000000":
            continue
        here = fs_path(root, path)
        if here.is_dir() and not here.is_symlink():
            return False  # a directory where the file goes
        parent = here.parent
        while parent != root:
            if os.path.lexists(parent) and (parent.is_symlink() or not parent.is_dir()):
                return False  # a file or a link where a directory goes
            parent = parent.parent
    return True


def _attributes_on_the_way(
    store: Git, root: Path, trees: Sequence[TreeFiles], paths: Iterable[str]
) -> bool:
    """Whether an attributes file may apply to one of ``paths``: the store's
    ``info/attributes``, or a ``.gitattributes`` in a directory on a path's way, on disk
    or in one of ``trees`` (forkpatch's git reads none elsewhere). Where one does, what
    is written or staged may be converted (a filter, line endings): git's to do."""
    if (store.git_dir / "info" / "attributes").exists():
        return True
    for path in paths:
        parts = path.split("/")
        for i in range(len(parts)):
            attributes = "/".join([*parts[:i], ".gitattributes"])
            on_disk = os.path.lexists(fs_path(root, attributes))
            if on_disk or any(t.get(attributes) is not None for t in trees):
                return True
    return False


# --------------------------------------------------------------------------- staging

#: A file larger than this is staged by git (which streams it), not read whole here.
STAGE_IN_PROCESS_BYTES = 32 << 20

#: The states of a path (``git status`` XY) :func:`stage` takes itself: changed,
#: gone, of another type, new, or new and ignored, in the work tree alone (the index
#: is HEAD's).
_UNSTAGED = frozenset({" M", " D", " T", "??", IGNORED})


def stage(
    wt: Git, store: Git, paths: Iterable[str], changes: Sequence[Change], layout: Layout
) -> str | None:
    """The tree of HEAD with ``paths`` as the work tree holds them now, as ``git add
    -A -f -- PATHS`` and ``git write-tree`` would make it, in process: the files read
    (never through a link), their blobs and the trees on their way written, and the
    paths' index entries replaced in one ``git update-index``. ``changes``: this
    command's ``git status`` of the tree. None, with nothing staged, where git must do
    it.

    ``git add`` then a tree of the index read and write the 5,600-entry index twice and
    hash every directory again (0.03 s on the fork) for the one file an edit changes.
    Left to git: anything staged already (the index is not HEAD's), a sparse work
    tree, a work tree whose file modes or links git does not trust
    (``core.fileMode``, ``core.symlinks``), an attributes file on a path's way (a filter
    or line endings may convert what is staged), a submodule, a directory, a file where
    a directory is or the other way round, anything but a file or a link, a file over
    :data:`STAGE_IN_PROCESS_BYTES`."""
    from forkpatch import intree
    from forkpatch.engine import TreeFiles  # the commands that only read load no engine

    root = wt.work_tree
    todo = sorted(set(paths))
    if root is None or not todo or layout.restricted:
        return None
    if any(p.endswith("/") for p in todo):
        return None  # a directory status names whole: a repository inside the tree
    if any(c.xy not in _UNSTAGED for c in changes):
        return None
    config = wt.objects.repo.config
    for key in ("core.fileMode", "core.symlinks"):
        try:
            if not config.get_bool(key):
                return None
        except KeyError:
            pass  # git's default: true
    head = wt.objects.rev_parse("HEAD")
    if head is None:
        return None
    tree = TreeFiles(wt, head)
    if _attributes_on_the_way(store, root, [tree], todo):
        return None
    found: dict[str, tuple[int, bytes] | None] = {}
    for path in todo:
        parts = path.split("/")
        if any(tree.get("/".join(parts[:i])) is not None for i in range(1, len(parts))):
            return None  # a file of HEAD where a directory goes
        entry = tree.get(path)
        if tree.listing(path) is not None or (entry is not None and entry[0] == "160000"):
            return None  # a directory of HEAD, or a submodule
        try:
            found[path] = intree.read_in_tree(root, path, limit=STAGE_IN_PROCESS_BYTES)
        except (OSError, ForkpatchError, ValueError):
            return None  # a link or a file on the way (git's message), a large file
    edits: dict[str, tuple[str, str] | None] = {}
    for path, got in found.items():
        if got is None:
            edits[path] = None
            continue
        st_mode, data = got
        if stat.S_ISLNK(st_mode):
            mode = "120000"
        elif stat.S_ISREG(st_mode):
            mode = "100755" if st_mode & stat.S_IXUSR else "100644"
        else:
            return None  # a directory (a repository inside?), a pipe: git's to judge
        edits[path] = (mode, store.objects.write_blob(data))
    new_tree = store.objects.write_tree(wt.objects.tree_id(head), edits, strict=True)
    null = "0" * len(head)
    records = [
        (f"0 {null}" if value is None else f"{value[0]} {value[1]}").encode()
        + b"\t"
        + path.encode("utf-8", "surrogateescape")
        + b"\0"
        for path, value in edits.items()
    ]
    wt.run("update-index", "-z", "--index-info", input=b"".join(records))
    return new_tree


def _prune_empty_dirs(root: Path, path: str) -> None:
    """Remove the directories of ``path`` left empty by its removal (as git does)."""
    parts = path.split("/")[:-1]
    while parts:
        try:
            os.rmdir(fs_path(root, "/".join(parts)))
        except OSError:
            return
        parts.pop()
