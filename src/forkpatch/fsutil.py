"""Small filesystem primitives: atomic writes, multi-file commits and the project lock.

Test hook (documented, zero-cost when unset: the environment is read once at
import): every rename or unlink that changes a user-visible file is a *write
event* (:func:`write_event`). ``FORKPATCH_TEST_COUNT_WRITES=<file>`` appends one
line per event to ``<file>``; ``FORKPATCH_TEST_KILL_AT=<n>`` makes the process
SIGKILL itself at its n-th event. The hardening suite uses them to kill
forkpatch deterministically at every write point of a command.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import importlib
import json
import os
import re
import signal
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from forkpatch import settings
from forkpatch.errors import InputFileError, LockError, StateError

# Temporary files forkpatch leaves only when it is killed mid-write; swept by
# :func:`sweep_temps` under the project lock.
TMP_SUFFIX = ".forkpatch-tmp"
TMP_NAME = re.compile(r"\A\..+\.forkpatch-tmp\Z")
# The writer's pid in a temporary file's name (``.<name>.pid<N>.<random>.forkpatch-tmp``):
# a file whose writer is gone is a leftover however young it is.
_T = TypeVar("_T")
_TMP_PID = re.compile(r"\.pid([0-9]{1,10})\.[^.]+\.forkpatch-tmp\Z")

# The test hooks of this process: (kill at the n-th event, the file counting them),
# read from the environment at the first write event (never at import: a command
# server's worker imports nothing, and its environment is the command's).
_hooks: tuple[int, str] | None = None
_events = 0


def write_event(label: str) -> None:
    """Test hook point (see the module docstring); does nothing unless a test asked."""
    hooks = write_hooks()
    if hooks[0] or hooks[1]:
        _fire(label, *hooks)


def write_hooks() -> tuple[int, str]:
    """This process's write-event hooks: (kill at the n-th event or 0, the file that
    counts them or ""), read once, at the first write event."""
    global _hooks
    if _hooks is None:
        _hooks = (
            settings.count("FORKPATCH_TEST_KILL_AT"),
            settings.text("FORKPATCH_TEST_COUNT_WRITES") or "",
        )
    return _hooks


def pause_point(point: str) -> None:
    """Test hook: stop (SIGSTOP) when ``FORKPATCH_TEST_PAUSE_AFTER`` names ``point``, so a
    test can change the world at a known moment and then SIGCONT the process."""
    if settings.text("FORKPATCH_TEST_PAUSE_AFTER") == point:
        import sys

        print(f"forkpatch: test pause at {point}", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)


def _fire(label: str, kill_at: int, count_to: str) -> None:
    global _events
    _events += 1
    if count_to:
        with open(count_to, "a", encoding="utf-8") as fh:
            fh.write(f"{_events} {label}\n")
    if _events == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)


@contextlib.contextmanager
def naming(path: Path | str) -> Iterator[None]:
    """An OSError raised inside without a file name (a write on a full disk, past a
    quota or a size limit: ``os.write`` and ``fsync`` name none) gets ``path``, the
    file forkpatch was writing, so that the message says which file it was."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None and exc.errno is not None:
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from None
        raise


_UMASK: int | None = None


def umask() -> int:
    """The process's umask (read once: from /proc without changing it where it can be)."""
    global _UMASK
    if _UMASK is None:
        try:
            with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
                line = next((x for x in fh if x.startswith("Umask:")), None)
            _UMASK = int(line.split()[1], 8) if line else None
        except (OSError, ValueError, IndexError):
            _UMASK = None
        if _UMASK is None:
            _UMASK = os.umask(0o022)
            os.umask(_UMASK)
    return _UMASK


def new_file_mode(executable: bool = False) -> int:
    """The mode of a file forkpatch creates (0666 or 0777 less the umask), as the
    user's other tools would create it: under umask 077 nobody else reads it."""
    return (0o777 if executable else 0o666) & ~umask()


def write_temp(
    path: Path, data: bytes, *, mode: int | None = None, sync: bool = True
) -> str | None:
    """Write ``data`` to a new temporary file beside ``path`` (for a later rename).

    Returns None, writing nothing, when ``path`` already holds exactly ``data``.
    The temporary file gets ``mode``, else the mode of ``path``, else
    :func:`new_file_mode` (the umask's); it is
    named ``.<name>.pid<pid>.<random>.forkpatch-tmp`` so that a killed process's
    leftovers are recognised and removed (at once, by the pid: :func:`sweep_temps`). ``sync=False`` leaves flushing to the caller
    (:func:`fsync_files` for a batch).
    """
    try:
        st = path.stat()
        current = st.st_mode & 0o7777
        # Compared only when it is a regular file of the same size: a FIFO or a device
        # at the target is replaced, never read.
        if stat.S_ISREG(st.st_mode) and st.st_size == len(data) and path.read_bytes() == data:
            return None
        if not stat.S_ISREG(st.st_mode):
            current = new_file_mode()
    except FileNotFoundError:
        current = new_file_mode()
    import tempfile  # with the first write: a command that only reads loads none

    with naming(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(
            prefix=f".{path.name}.pid{os.getpid()}.", suffix=TMP_SUFFIX, dir=path.parent
        )
    try:
        with naming(path), os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if sync:
                os.fsync(fh.fileno())
        os.chmod(tmp, current if mode is None else mode)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return tmp


def atomic_write(path: Path, data: bytes, *, mode: int | None = None, durable: bool = True) -> bool:
    """Write ``data`` to ``path`` via a temporary file and ``rename``.

    Returns False (and touches nothing) when the file already holds exactly
    ``data``: a no-op write must not even change the mtime, so that export and
    refresh are churn-free. ``durable=False`` (a cache, checked when read, that is
    made again when it does not read) leaves the flushing to the system: the write is
    still all or nothing for every reader, but a power cut may take it back.
    """
    path = Path(path)
    tmp = write_temp(path, data, mode=mode, sync=durable)
    if tmp is None:
        return False
    _rename_into_place(tmp, path)
    if durable:
        fsync_dir(path.parent)
    write_event(f"after-rename {path.name}")
    return True


def atomic_write_each(files: Mapping[Path, bytes]) -> list[Path]:
    """:func:`atomic_write` of several independent files (each all or nothing on its
    own, unlike :func:`commit_files`), their flushes made together: one round of
    concurrent fsyncs for the files, one for their directories. Returns the paths
    written (a file that already holds its bytes is left alone)."""
    temps: list[tuple[str, Path]] = []
    try:
        for path, data in files.items():
            tmp = write_temp(Path(path), data, sync=False)
            if tmp is not None:
                temps.append((tmp, Path(path)))
        fsync_files([tmp for tmp, _ in temps])
    except BaseException:
        for tmp, _ in temps:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        raise
    for i, (tmp, path) in enumerate(temps):
        try:
            _rename_into_place(tmp, path)
        except BaseException:
            for later, _ in temps[i + 1 :]:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(later)
            raise
    _fsync_dirs({path.parent for _, path in temps})
    for _, path in temps:
        write_event(f"after-rename {path.name}")
    return [path for _, path in temps]


def _rename_into_place(tmp: str, path: Path) -> None:
    try:
        write_event(f"before-rename {path.name}")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


COMMIT_KIND = "commit-journal"
COMMIT_VERSION = 1


def commit_files(
    changes: Mapping[Path, bytes | Path | None],
    *,
    journal: Path,
    root: Path | None = None,
    allowed: Callable[[str], bool] | None = None,
    expect: Mapping[Path, bytes | None] | None = None,
) -> list[Path]:
    """Create, replace or delete several files as one unit; returns the paths that changed.

    ``expect``: for targets the caller read before deciding what to write, the bytes it
    read (None: absent then). Checked against the disk just before the commit point,
    after every temporary file is written: a target that changed meanwhile (another
    process wrote it) raises :class:`ChangedOnDisk` naming it, and nothing is written.

    A value is the new bytes, a ``Path`` to an already written file to move into
    place (same file system), or None to delete. Unchanged files are skipped.
    The new contents go to temporary files beside their targets, fsynced together
    (:func:`fsync_files`); then
    ``journal`` (the list of renames and deletions) is written atomically: that
    is the commit point. A process killed before it leaves every target as it
    was; killed after it, :func:`recover_files` (run by the next forkpatch
    command on the project) finishes the renames. Either way the set of files
    ends exactly old or exactly new, never a mix.

    Every path must lie inside ``root`` (default: the directory above the
    journal's, i.e. the project of ``<root>/.forkpatch/commit.json``) with no
    symbolic link at any directory component, and pass ``allowed`` (given the
    path relative to ``root``) when that is set; the journal stores the paths
    relative to ``root``, with a version and a checksum (:func:`dump_state`).
    """
    root = Path(os.path.abspath(root if root is not None else Path(journal).parent.parent))
    ops: list[list[str]] = []
    temps: list[str] = []
    try:
        for path, data in changes.items():
            path = Path(path)
            rel = _commit_rel(root, path, allowed, where="commit")
            if data is None:
                if path.exists() or path.is_symlink():
                    ops.append(["delete", rel])
                continue
            if isinstance(data, Path):
                src = _commit_rel(root, data, None, where="commit")
                if not _staged_beside(src, rel):
                    raise ValueError(f"commit_files: {src} is not staged beside {rel}")
                ops.append(["rename", src, rel])
                continue
            tmp = write_temp(root / rel, data, sync=False)
            if tmp is None:
                continue
            temps.append(tmp)
            ops.append(["rename", Path(tmp).relative_to(root).as_posix(), rel])
            write_event(f"temp-written {path.name}")
        if not ops:
            return []
        pause_point("commit-files")
        _check_expected(root, ops, expect or {})
        if len(ops) == 1 and temps:
            # One file written (the common refresh): its own rename is all or nothing,
            # so it is the commit point; a temp left by a kill is swept by the next command.
            fsync_files(temps)
            _roll_forward(root, ops)
            return [root / ops[0][-1]]
        fsync_files(temps)
        _fsync_dirs({(root / op[-1]).parent for op in ops})
        atomic_write(journal, dump_state(COMMIT_KIND, COMMIT_VERSION, {"ops": ops}))
    except BaseException:
        for tmp in temps:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        raise
    _roll_forward(root, ops)
    journal.unlink()
    fsync_dir(journal.parent)
    return [root / op[-1] for op in ops]


class ChangedOnDisk(StateError):
    """A file forkpatch read and was about to replace changed on disk meanwhile."""

    def __init__(self, message: str, *, tip: str | None = None, paths: list[str]) -> None:
        super().__init__(message, tip=tip)
        self.paths = paths


def _check_expected(root: Path, ops: list[list[str]], expect: Mapping[Path, bytes | None]) -> None:
    """Refuse the commit when a target in ``expect`` is no longer what was read."""
    if not expect:
        return
    wanted = {Path(os.path.abspath(p)): data for p, data in expect.items()}
    changed = []
    for op in ops:
        target = root / op[-1]
        if target not in wanted:
            continue
        try:
            # What the command read: through a link, as it was read (the write itself
            # replaces the link and never follows it).
            now: bytes | None = read_regular(target, follow=True)
        except FileNotFoundError:
            now = None
        except (OSError, InputFileError):
            now = b"\0<not a regular file>"
        if now != wanted[target]:
            changed.append(op[-1])
    if changed:
        raise ChangedOnDisk(
            f"{', '.join(changed)} changed on disk while forkpatch was working (another "
            "process wrote it: a `git pull` or an editor in another terminal); nothing was "
            "written, so that neither version is lost",
            tip="the work tree keeps forkpatch's side and the file the other one: "
            "`forkpatch status` names both; keep the file with `forkpatch apply --force` "
            "(the work tree's edits are discarded), or the work tree with "
            "`forkpatch export --force`",
            paths=changed,
        )


def _commit_rel(
    root: Path, path: Path, allowed: Callable[[str], bool] | None, *, where: str
) -> str:
    """``path`` relative to ``root`` after checking it is inside (no symlinked directory)."""
    from forkpatch.errors import PathSafetyError

    inside = check_inside(root, path, where=where)
    rel = inside.relative_to(root).as_posix()
    check_relpath(rel, where=where)
    if allowed is not None and not allowed(rel):
        raise PathSafetyError(
            f"{where}: forkpatch does not write {rel!r} in {root}",
            tip="the file was not written by forkpatch for this project; remove it",
        )
    return rel


def _staged_beside(src: str, dst: str) -> bool:
    """Whether ``src`` is where forkpatch stages a new ``dst``: a temporary file in the
    same directory, or a file in a ``.forkpatch-stage-*`` directory there."""
    s, d = Path(src), Path(dst)
    if s.parent == d.parent:
        return TMP_NAME.match(s.name) is not None
    return s.parent.parent == d.parent and s.parent.name.startswith(".forkpatch-stage-")


def _roll_forward(root: Path, ops: list[list[str]]) -> None:
    """Do a journal's renames and deletions; idempotent (a done step is skipped)."""
    for op in ops:
        if op[0] == "rename":
            src, dst = root / op[1], root / op[2]
            if os.path.lexists(src):
                write_event(f"before-rename {dst.name}")
                os.replace(src, dst)
                write_event(f"after-rename {dst.name}")
        elif op[0] == "delete" and os.path.lexists(root / op[1]):
            target = root / op[1]
            write_event(f"before-unlink {target.name}")
            os.unlink(target)
            write_event(f"after-unlink {target.name}")
    _fsync_dirs({(root / op[-1]).parent for op in ops})


def recover_files(
    journal: Path,
    *,
    root: Path | None = None,
    allowed: Callable[[str], bool] | None = None,
) -> list[str]:
    """Finish the commit an interrupted :func:`commit_files` left in ``journal``.

    Returns the target paths of the journal (empty when there was none). Call
    it only while holding the project lock. The journal is trusted only when
    it is a commit journal of this version with a matching checksum and every
    path in it is a plain relative path inside ``root`` (no ``..``, no
    symbolic link at any directory component, allowed by ``allowed``); a
    rename's source must sit in its target's directory. Anything else raises
    :class:`StateError` naming the journal, and nothing is renamed or deleted.
    """
    from forkpatch.errors import PathSafetyError

    root = Path(os.path.abspath(root if root is not None else Path(journal).parent.parent))
    data = load_state(journal, kind=COMMIT_KIND, version=COMMIT_VERSION)
    if data is None:
        return []
    tip = (
        f"check patches/ and series.yaml by hand (`git status`), then delete {journal} "
        "if no forkpatch command is running on this project"
    )
    ops = data.get("ops")
    if not isinstance(ops, list):
        raise StateError(f"{journal}: 'ops' must be a list", tip=tip)
    checked: list[list[str]] = []
    try:
        for n, op in enumerate(ops, 1):
            where = f"{journal}: operation {n}"
            if (
                not isinstance(op, list)
                or not op
                or (op[0], len(op)) not in (("rename", 3), ("delete", 2))
                or not all(isinstance(x, str) for x in op)
            ):
                raise StateError(f"{where} is not a rename or a delete: {op!r}", tip=tip)
            # The target must be allowed; a rename's source must be staged beside it.
            rels = [
                _commit_rel(
                    root,
                    root / check_relpath(x, where=where),
                    allowed if i == len(op) - 2 else None,
                    where=where,
                )
                for i, x in enumerate(op[1:])
            ]
            if op[0] == "rename" and not _staged_beside(rels[0], rels[1]):
                raise StateError(
                    f"{where}: {rels[0]!r} is not a forkpatch temporary file beside {rels[1]!r}",
                    tip=tip,
                )
            checked.append([op[0], *rels])
    except PathSafetyError as exc:
        raise StateError(exc.message, tip=tip) from None
    _roll_forward(root, checked)
    journal.unlink(missing_ok=True)
    return [str(root / op[-1]) for op in checked]


def _writer_gone(name: str) -> bool:
    """Whether ``name`` is a temporary file whose writer (the pid in its name) has
    ended. A pid that is running, or not ours to signal, counts as alive."""
    m = _TMP_PID.search(name)
    if m is None:
        return False
    pid = int(m.group(1))
    return pid != os.getpid() and not _pid_alive(pid)


def sweep_temps(
    directory: Path, *, recursive: bool = False, older_than: float | None = None
) -> list[Path]:
    """Remove temporary files a killed forkpatch left in ``directory``.

    Only under the project lock: a running forkpatch's temporary files look the same.
    ``older_than`` (seconds): only files not modified for that long (a directory that
    commands without the lock write too: nobody writes a file that has not moved), or
    whose writer, named by the pid in the file's name, is no longer running.
    """
    if not directory.is_dir():
        return []
    import time

    found = []
    now = time.time()
    for p in directory.rglob(".*") if recursive else directory.glob(".*"):
        if older_than is not None and not _writer_gone(p.name):
            try:
                if now - p.lstat().st_mtime < older_than:
                    continue
            except OSError:
                continue
        if TMP_NAME.match(p.name) and (p.is_file() or p.is_symlink()):
            p.unlink(missing_ok=True)
            found.append(p)
        elif p.is_dir() and p.name.startswith(".forkpatch-stage-"):
            import shutil

            shutil.rmtree(p, ignore_errors=True)
            found.append(p)
    return found


# --------------------------------------------------------------------------- reading inputs

#: The most forkpatch reads of one input file (a patch, series.yaml, a state file, a report).
READ_LIMIT = 256 << 20

_NOT_REGULAR = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _not_regular(path: Path | str, what: str, tip: str | None) -> InputFileError:
    return InputFileError(
        f"{path} is {what}, not a regular file: forkpatch reads only regular files there",
        tip=tip or f"replace {path} by the file it should be (or remove it), then run again",
    )


def open_regular(path: Path | str, *, follow: bool = True, tip: str | None = None) -> int:
    """Open ``path`` for reading and return the descriptor, only if it is a regular file.

    Never blocks on a FIFO (opened non-blocking, then refused) and never reads a
    device: the kind is checked with ``fstat`` on the open descriptor, so a link
    swapped in between cannot change what is read. ``follow=False`` (paths that must
    be files inside a tree forkpatch owns) refuses a symbolic link at the last
    component too. Raises FileNotFoundError for a missing file, InputFileError for
    the rest, naming ``path``.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _not_regular(path, "a symbolic link", tip) from None
        if exc.errno == errno.ENXIO:  # a socket
            raise _not_regular(path, "a socket", tip) from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            what = next((w for test, w in _NOT_REGULAR if test(mode)), "not a regular file")
            raise _not_regular(path, what, tip)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(
    path: Path | str, *, limit: int = READ_LIMIT, follow: bool = True, tip: str | None = None
) -> bytes:
    """The bytes of the regular file ``path`` (see :func:`open_regular`), at most ``limit``.

    A larger file is refused before it is read (and one that grows while it is read
    is refused too), naming the path and both sizes.
    """
    fd = open_regular(path, follow=follow, tip=tip)
    with os.fdopen(fd, "rb") as fh:
        size = os.fstat(fd).st_size
        data = fh.read(limit + 1) if size <= limit else b""
        if size > limit or len(data) > limit:
            raise InputFileError(
                f"{path} is {max(size, len(data))} bytes, more than forkpatch reads from one "
                f"file ({limit} bytes)",
                tip=tip or f"check that {path} is the file you meant",
            )
    return data


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes, read in 1 MiB blocks (wheels can be large)."""
    import hashlib

    digest = hashlib.sha256()
    with os.fdopen(open_regular(path), "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


SUMS_FILE = "SHA256SUMS"


def read_sums(directory: Path) -> dict[str, str]:
    """``directory/SHA256SUMS`` as name -> sha256 (empty when there is none)."""
    path = Path(directory) / SUMS_FILE
    if not path.is_file():
        return {}
    found: dict[str, str] = {}
    for line in read_regular(path).decode("utf-8", errors="replace").splitlines():
        sha, _, name = line.partition("  ")
        if name and re.fullmatch(r"[0-9a-f]{64}", sha):
            found[name] = sha
    return found


def sums_text(files: Mapping[str, Path | str]) -> bytes:
    """SHA256SUMS in ``sha256sum -c`` format, sorted by name: each value is the file
    to hash or its sha256 already known (a gated wheel's, not a new read)."""
    lines = []
    for name in sorted(files):
        value = files[name]
        sha = value if isinstance(value, str) else file_sha256(value)
        lines.append(f"{sha}  {name}\n")
    return "".join(lines).encode("utf-8")


def write_sums(directory: Path, files: Mapping[str, Path | str]) -> Path:
    """``directory/SHA256SUMS`` for ``files`` (see :func:`sums_text`), written atomically."""
    path = Path(directory) / SUMS_FILE
    atomic_write(path, sums_text(files))
    return path


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        with naming(path):
            os.fsync(fd)
    finally:
        os.close(fd)


def fsync_files(paths: list[str]) -> None:
    """fsync every file of ``paths``, concurrently.

    Each file is flushed by its own ``fsync`` (nothing else on the machine is,
    unlike ``os.sync()``), but from a pool of threads, so that the file system
    commits them together: 300 patch files take about as long as a few, where one
    fsync after the other costs 1-2 s on a small VM's disk (bench/RESULTS.md).
    """
    _each_at_once(_fsync_path, paths, alone=2, workers=16)


def _fsync_dirs(directories: set[Path]) -> None:
    """:func:`fsync_dir` of each of ``directories``, concurrently where there are more
    than one (each flush waits on the disk, not on a core)."""
    _each_at_once(fsync_dir, list(directories), alone=1, workers=8)


def _each_at_once(
    flush: Callable[[_T], None], items: list[_T], *, alone: int, workers: int
) -> None:
    """``flush(item)`` for each of ``items``: one after the other for up to ``alone``
    of them, else from a pool of up to ``workers`` threads."""
    if len(items) <= alone:
        for item in items:
            flush(item)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(workers, len(items))) as pool:
        list(pool.map(flush, items))


def fsync_dir(directory: Path) -> None:
    """Make renames in ``directory`` durable (best effort: some filesystems refuse)."""
    try:
        dfd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError as exc:
        return exc.errno == errno.EPERM
    return True


@contextlib.contextmanager
def project_lock(lock_path: Path, *, command: str = "forkpatch") -> Iterator[str | None]:
    """Hold an exclusive lock for the duration of a mutating command.

    The lock is an ``flock`` on ``lock_path``, so a killed process releases
    it automatically (no stale lock can block anyone); the file also records
    the holder's pid and command so that the refusal can name it.

    Yields what an earlier holder left in the file (``"<pid> <command>"``) when it
    ended without releasing the lock (killed, or the machine went down), else None:
    the git lock files that command's processes held are stale then.
    """
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        _take_lock(fd)
        left = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or None
        # The record is written first and cut to length after, so that a command
        # refused meanwhile never reads an empty or half-written holder.
        record = f"{os.getpid()} {command}\n".encode()
        os.pwrite(fd, record, 0)
        os.ftruncate(fd, len(record))
        try:
            yield left
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


#: How long a refused command waits for a holder that is just starting (its record
#: not written yet) or just ending (its record cleared, the lock not yet released).
LOCK_SETTLE_S = 1.0


def _take_lock(fd: int) -> None:
    """flock ``fd`` (exclusive, not waiting for a running holder), or raise LockError
    naming the holder: its pid and command as it recorded them."""
    import time

    deadline = time.monotonic() + LOCK_SETTLE_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip().split("\n")[0]
        pid_text, _, what = holder.partition(" ")
        if not (pid_text.isdigit() and what) and time.monotonic() < deadline:
            time.sleep(0.01)  # starting or ending: try again
            continue
        who = f"pid {pid_text}" if pid_text.isdigit() else "unknown pid"
        if pid_text.isdigit() and not _pid_alive(int(pid_text)):
            who += ", which is no longer running; its lock is held by a child process"
        raise LockError(
            f"another forkpatch ({who}) is running on this project: "
            f"`forkpatch {what or '<unknown command>'}`",
            tip="wait for it to finish, then run your command again",
        )


# --------------------------------------------------------------------------- paths inside a tree


_DRIVE = re.compile(r"\A[A-Za-z]:")


def relpath_problem(path: str) -> str | None:
    """Why ``path`` is not a plain relative POSIX path inside a tree (None when it is).

    The one lexical path check behind patch paths, wheel member names and the
    paths in state files. Refused: an empty path, a NUL byte, a backslash (a
    separator to other tools), an absolute path, a drive letter, and an empty,
    ``.`` or ``..`` component: each can name a file outside the tree.
    """
    if not path:
        return "the path is empty"
    if "\0" in path:
        return "it contains a NUL byte"
    if "\\" in path:
        return "it contains a backslash"
    if path.startswith("/"):
        return "it is absolute"
    if _DRIVE.match(path):
        return "it starts with a drive letter"
    for component in path.split("/"):
        if component == "":
            return "it has an empty component (// or a trailing /)"
        if component in (".", ".."):
            return f"it has a {component!r} component"
    return None


_NOT_IN_A_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def name_part(text: str) -> str:
    """``text`` (a tag, a branch) as part of a file name: each run of characters other
    than ASCII letters, digits, ``.``, ``_`` and ``-`` becomes one ``_``."""
    return _NOT_IN_A_NAME.sub("_", text)


def check_relpath(value: object, *, where: str) -> str:
    """Return ``value`` if it is a safe relative POSIX path, else raise PathSafetyError.

    Safe is what :func:`relpath_problem` accepts. ``where`` names the file and
    field in the message.
    """
    from forkpatch.errors import PathSafetyError

    if not isinstance(value, str) or not value:
        raise PathSafetyError(f"{where}: expected a relative path, found {value!r}")
    problem = relpath_problem(value)
    if problem is not None:
        raise PathSafetyError(
            f"{where}: {value!r} is not a plain relative path inside the tree ({problem})",
            tip="paths must be relative, without '..', '.', empty components or backslashes",
        )
    return value


def check_inside(root: Path, path: Path | str, *, where: str) -> Path:
    """Return ``path`` (absolute, or relative to ``root``) if it lies inside ``root``.

    Inside means: lexically under ``root`` with no ``..`` and no symbolic link
    at any existing component below ``root``. Raises PathSafetyError naming
    ``where`` otherwise. Used for every path read from a state file before it
    is trusted.
    """
    from forkpatch.errors import PathSafetyError

    # Strings and os.path, not pathlib: this runs for every patch file of a series.
    root_s = os.path.abspath(root)
    text = os.fspath(path)
    full = text if os.path.isabs(text) else os.path.join(root_s, text)
    parts = full.split(os.sep)
    if ".." in parts or "\0" in full:
        raise PathSafetyError(f"{where}: {text!r} leaves {root_s}")
    prefix = root_s.rstrip(os.sep) + os.sep
    if not full.startswith(prefix) or len(full) == len(prefix):
        raise PathSafetyError(
            f"{where}: {text!r} is outside {root_s}",
            tip="the file was not written by forkpatch for this project; remove it",
        )
    cur = root_s
    for comp in full[len(prefix) :].split(os.sep)[:-1]:
        cur = os.path.join(cur, comp)
        if os.path.islink(cur):
            raise PathSafetyError(
                f"{where}: {text!r} goes through the symbolic link {cur}",
                tip="the file was not written by forkpatch for this project; remove it",
            )
    return Path(full)


# --------------------------------------------------------------------------- state files


def _state_checksum(data: object) -> str:
    canon = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return digest("sha256", canon.encode("ascii"))


# CPython's own module for each algorithm (the one hashlib falls back to), by version.
_BUILTIN_HASHES = {"sha1": ("_sha1",), "sha256": ("_sha256", "_sha2")}
SMALL_DIGEST = 1 << 16


def digest(name: str, *parts: bytes) -> str:
    """The hex digest (``sha1`` or ``sha256``) of ``parts`` joined: the same as
    hashlib's. Small inputs (state files, patch files) go through CPython's own module
    for the algorithm: loading hashlib loads OpenSSL and blake2, about 2 ms of every
    short command's start. Large ones (and any Python without that module) through
    hashlib, whose OpenSSL code is faster on them."""
    if sum(map(len, parts)) <= SMALL_DIGEST:
        for module in _BUILTIN_HASHES.get(name, ()):
            try:
                h = getattr(importlib.import_module(module), name)()
            except (ImportError, AttributeError):
                continue
            for part in parts:
                h.update(part)
            return str(h.hexdigest())
    import hashlib

    h = hashlib.new(name)
    for part in parts:
        h.update(part)
    return h.hexdigest()


def dump_state(kind: str, version: int, data: Mapping[str, object]) -> bytes:
    """Serialise a state file: ``kind`` and ``version`` identify it, a sha256 seals ``data``."""
    doc = {"kind": kind, "version": version, "sha256": _state_checksum(data), "data": data}
    # One line: json's C encoder (an indented dump takes the pure-Python one, 15-20 ms
    # for a rebase journal of 300 patches, on every step of the rebase).
    return (json.dumps(doc, sort_keys=True) + "\n").encode("utf-8")


def parse_state(raw: bytes, *, path: Path, kind: str, version: int) -> dict[str, object]:
    """Check and return the ``data`` of a state file made by :func:`dump_state`.

    Refuses, with a StateError naming the file, anything that is not valid
    JSON, has another kind, an unknown version or a checksum that does not
    match: a state file is trusted only when forkpatch wrote it as it is.
    The caller still validates the fields (types, paths) of the data.
    """
    return parse_state_versions(raw, path=path, kind=kind, versions=(version,))[1]


def parse_state_versions(
    raw: bytes, *, path: Path, kind: str, versions: Sequence[int]
) -> tuple[int, dict[str, object]]:
    """:func:`parse_state` for a file of which several versions are read (the newest is
    written): (its version, its data)."""
    tip = f"if no forkpatch command is running on this project, move {path} aside and run again"
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise StateError(f"{path} is not valid JSON ({exc})", tip=tip) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), dict):
        raise StateError(f"{path} is not a forkpatch state file", tip=tip)
    if doc.get("kind") != kind:
        raise StateError(
            f"{path} is not a forkpatch {kind} file (kind {doc.get('kind')!r})", tip=tip
        )
    found = doc.get("version")
    if isinstance(found, bool) or not isinstance(found, int) or found not in versions:
        newer = isinstance(found, int) and not isinstance(found, bool) and found > max(versions)
        reads = " and ".join(str(v) for v in versions)
        raise StateError(
            f"{path} has version {found!r}; this forkpatch reads version {reads}",
            tip="finish or abort it with the forkpatch that started it" if newer else tip,
        )
    if doc.get("sha256") != _state_checksum(doc["data"]):
        raise StateError(f"{path} does not match its checksum (edited or damaged)", tip=tip)
    return found, dict(doc["data"])


def load_state(path: Path, *, kind: str, version: int) -> dict[str, object] | None:
    """Read and check a state file; None when it does not exist (see :func:`parse_state`)."""
    try:
        raw = read_regular(path, follow=False)
    except FileNotFoundError:
        return None
    return parse_state(raw, path=path, kind=kind, version=version)
