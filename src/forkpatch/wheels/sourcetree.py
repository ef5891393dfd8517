"""A fork source tree as the container build takes it: a directory or git tree
entries, read file by file (:func:`source_reader`) or written as one tar stream
(:func:`write_source_tar`) for ``put_archive``."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO

#: A file of a source tree handed over without a work tree: (path, mode, bytes).
#: ``mode`` is a git/stat mode (0o100644, 0o100755, 0o120000 = symlink whose
#: target is the bytes).
TreeEntry = tuple[str, int, bytes]

#: Not copied into the container: VCS data and build leftovers whose absolute
#: paths would poison the build (a stale CMake cache, egg-info).
_EXCLUDE_ANYWHERE = frozenset({".git", "__pycache__"})
_EXCLUDE_AT_ROOT = frozenset({"build", "dist", ".forkpatch", ".eggs", ".venv"})


def source_reader(source: Path | Sequence[TreeEntry]) -> Callable[[str], bytes | None]:
    """A reader of one file of ``source`` by its relative path (None: no such regular file)."""
    if isinstance(source, Path):

        def read_path(name: str) -> bytes | None:
            try:
                return (source / name).read_bytes()
            except OSError:
                return None

        return read_path
    index = {path: data for path, mode, data in source if stat.S_ISREG(mode)}
    return index.get


def write_source_tar(source: Path | Iterable[TreeEntry], fh: IO[bytes], prefix: str = "") -> int:
    """Write ``source`` (a directory, or tree entries) as a tar stream; return the file count.

    Owners are root, so the build sees the same tree whoever runs forkpatch.
    ``prefix`` (``"deps/cutlass"``) puts every member under that directory.
    """
    count = 0
    prefix = prefix.strip("/")
    with tarfile.open(fileobj=fh, mode="w", format=tarfile.PAX_FORMAT) as tar:
        if prefix:
            for i in range(1, prefix.count("/") + 2):
                info = tarfile.TarInfo("/".join(prefix.split("/")[:i]))
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tar.addfile(info)
        if isinstance(source, Path):
            for rel, path in _walk(source):
                if prefix:
                    rel = f"{prefix}/{rel}"
                info = tar.gettarinfo(str(path), arcname=rel)
                info.uid = info.gid = 0
                info.uname = info.gname = "root"
                if info.isreg():
                    with open(path, "rb") as fobj:
                        tar.addfile(info, fobj)
                else:
                    tar.addfile(info)
                count += 1
        else:
            for rel, mode, data in source:
                info = tarfile.TarInfo(f"{prefix}/{rel}" if prefix else rel)
                info.mtime = 0
                if stat.S_ISLNK(mode):
                    info.type = tarfile.SYMTYPE
                    info.linkname = data.decode("utf-8", "surrogateescape")
                    info.mode = 0o777
                    tar.addfile(info)
                else:
                    info.mode = 0o755 if mode & 0o111 else 0o644
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                count += 1
    return count


def _walk(root: Path) -> Iterator[tuple[str, Path]]:
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        at_root = here == root
        dirnames[:] = sorted(
            d
            for d in dirnames
            if d not in _EXCLUDE_ANYWHERE
            and not (at_root and (d in _EXCLUDE_AT_ROOT or d.endswith(".egg-info")))
        )
        for d in dirnames:
            # Directories too (empty ones survive); a symlinked one stays a link.
            yield str((here / d).relative_to(root)), here / d
        for name in sorted(filenames):
            if name in _EXCLUDE_ANYWHERE:  # a submodule's .git file
                continue
            yield str((here / name).relative_to(root)), here / name
