"""Files inside a tree (a work tree, a journal), named as git names them and never
reached through a symbolic link.

Every path here is a git path: its bytes as UTF-8 text, undecodable bytes escaped
(``surrogateescape``), as forkpatch reads them from git and from patches. Each
component is opened by those bytes, whatever the locale's file system encoding, and
from the directory above it (``O_NOFOLLOW``, ``dir_fd``): a link or a file on the way
is refused with the way out, so nothing is read, written or removed outside the tree
however it was prepared.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from forkpatch import fsutil
from forkpatch.errors import PathSafetyError

if TYPE_CHECKING:
    import tarfile


def _open_dir_chain(root: Path, rel: str, *, create: bool) -> tuple[int, bytes]:
    """Open the directory holding ``rel`` under ``root`` without following any symlink.

    ``rel`` is a path as git names it (its bytes as UTF-8 text, undecodable bytes
    escaped): each component is named by those bytes, whatever the locale's file
    system encoding (under Latin-1, ``ï`` would otherwise be another file's name).
    Returns ``(dir_fd, last_component)``, that component's bytes; the caller closes
    ``dir_fd``. Every component between ``root`` and the last one must be a real
    directory: a symbolic link (to anywhere) is refused, so nothing is ever written or
    removed outside ``root`` however the tree was prepared.
    """
    fsutil.check_relpath(rel, where=str(root))
    parts = rel.encode("utf-8", "surrogateescape").split(b"/")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i, comp in enumerate(parts[:-1]):
            try:
                nfd = os.open(comp, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(comp, 0o777, dir_fd=fd)
                nfd = os.open(comp, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                prefix = "/".join(rel.split("/")[: i + 1])
                is_link = stat.S_ISLNK(os.lstat(comp, dir_fd=fd).st_mode)
                what = "a symbolic link" if is_link else "not a directory"
                raise PathSafetyError(
                    f"{root / prefix} is {what}: refusing to write {rel} through it",
                    tip=f"remove or rename {prefix} in {root}, then run the command again",
                ) from None
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd, parts[-1]


def write_in_tree(
    root: Path, rel: str, data: bytes, *, mode: int = 0o644, symlink: bool = False
) -> None:
    """Create or replace ``root/rel`` with ``data`` (a file, or a symlink to ``data``);
    ``rel`` as git names it (see :func:`_open_dir_chain`).

    ``mode`` is the file's git mode (0644 or 0755), less the umask, as git checks out.

    Never follows a symbolic link at any component: parents must be real
    directories (created when missing); an existing symlink at ``rel`` is
    replaced by the new file, not written through. The write is atomic (a
    temporary name in the same directory, then a rename).
    """
    fd, name = _open_dir_chain(root, rel, create=True)
    try:
        tmp = b".%s.%d.%s%s" % (
            name,
            os.getpid(),
            os.urandom(4).hex().encode(),
            fsutil.TMP_SUFFIX.encode(),
        )
        if symlink:
            os.symlink(data, tmp, dir_fd=fd)
        else:
            wfd = os.open(
                tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=fd
            )
            try:
                with fsutil.naming(root / rel):
                    view = memoryview(data)
                    while view:
                        view = view[os.write(wfd, view) :]
                os.fchmod(wfd, mode & ~fsutil.umask())
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=fd)
                raise
            finally:
                os.close(wfd)
        try:
            os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=fd)
            raise
    finally:
        os.close(fd)


def read_in_tree(root: Path, rel: str, *, limit: int | None = None) -> tuple[int, bytes] | None:
    """``root/rel`` as git would stage it (``rel`` as git names it), never following a
    symbolic link on the way: (its ``st_mode``, its bytes: a file's content, a link's
    target, nothing for anything else), or None when it is not there. A directory on the
    way that is a link or a file raises :class:`forkpatch.errors.PathSafetyError`; a file
    over ``limit`` bytes raises ValueError (nothing of it is read)."""
    try:
        fd, name = _open_dir_chain(root, rel, create=False)
    except FileNotFoundError:
        return None
    try:
        try:
            st = os.lstat(name, dir_fd=fd)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(st.st_mode):
            return st.st_mode, os.readlink(name, dir_fd=fd)
        if not stat.S_ISREG(st.st_mode):
            return st.st_mode, b""
        rfd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=fd)
        try:
            st = os.fstat(rfd)
            if limit is not None and st.st_size > limit:
                raise ValueError(f"{root / rel} is over {limit} bytes")
            mode = st.st_mode
            chunks = []
            while chunk := os.read(rfd, 1 << 20):
                chunks.append(chunk)
        finally:
            os.close(rfd)
        return mode, b"".join(chunks)
    finally:
        os.close(fd)


def remove_in_tree(root: Path, rel: str) -> bool:
    """Remove the file or symlink ``root/rel`` (``rel`` as git names it; never following
    a symlink); True if removed."""
    try:
        fd, name = _open_dir_chain(root, rel, create=False)
    except FileNotFoundError:
        return False
    try:
        os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        return False
    finally:
        os.close(fd)
    return True


def extract_tar(tf: tarfile.TarFile, dest: Path, *, data_filter: bool | None = None) -> None:
    """Unpack ``tf`` into ``dest`` as tarfile's ``data`` filter does: files, folders and
    links that stay inside ``dest`` (an absolute name is taken as relative to it); a
    ``..``, a link out of ``dest``, a device or a pipe refused (ValueError, naming the
    member); no set-user-id or world-writable mode kept. The filter where this Python's tarfile has it (3.10.12,
    3.11.4 and later); the same checks here on the earlier patch releases (Debian 12's
    3.11.2). ``data_filter``: which of the two (tests)."""
    import tarfile

    if data_filter is None:
        data_filter = hasattr(tarfile, "data_filter")
    if data_filter:
        tf.extractall(dest, filter="data")  # type: ignore[call-arg,unused-ignore]
        return
    root = os.path.realpath(dest)
    members = []
    for m in tf.getmembers():
        m.name = m.name.lstrip("/")  # as the filter does: an absolute name lands inside
        name = m.name.rstrip("/")
        if not name or ".." in name.split("/"):
            raise ValueError(f"the archive's member {m.name!r} is outside the tree")
        if m.issym() or m.islnk():
            base = os.path.dirname(name) if m.issym() else ""
            target = os.path.normpath(os.path.join(root, base, m.linkname))
            if m.linkname.startswith("/") or os.path.commonpath([root, target]) != root:
                raise ValueError(f"the archive's link {m.name!r} points outside the tree")
        elif not (m.isfile() or m.isdir()):
            raise ValueError(f"the archive's member {m.name!r} is not a file or a folder")
        m.mode &= 0o755 if m.isdir() or m.mode & 0o100 else 0o644
        if m.isfile():
            m.mode |= 0o600
        m.uid = m.gid = 0
        m.uname = m.gname = ""
        members.append(m)
    tf.extractall(dest, members=members)
