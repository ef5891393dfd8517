"""Smoke environments kept between runs (FORKPATCH_SMOKE_ENV_CACHE), by wheel and interpreter.

A smoke environment of ``--deps system`` or ``--deps none`` holds nothing but the
wheels (their dependencies are the interpreter's, seen live, or absent), so the same
wheels through the same interpreter make the same environment: it is kept under
``<cache>/<key>/venv``, the key the sha256 of the wheels' sha256s (their requirements
are inside them), the deps mode and the interpreter (its real path, size and mtime).
``--deps index`` is never kept: what pip resolves from an index changes with time.

A kept environment is used again only as it was made: right after the install the
sha256 of every file (and every link's target) is written beside it; before reuse its
``__pycache__`` directories are removed (bytecode cannot be checked against a wheel)
and every file is compared with that list. Anything changed, added or missing, and the
environment is made afresh. One run at a time holds an entry (a lock beside it); a run
that finds it held makes a fresh environment of its own. The newest :data:`KEEP`
entries stay; older ones are removed when a new one is made.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

from forkpatch import log, settings
from forkpatch.fsutil import atomic_write

CACHE_VAR = "FORKPATCH_SMOKE_ENV_CACHE"
CACHED_DEPS = ("system", "none")
#: How many environments stay in the cache.
KEEP = 4
MANIFEST = "manifest.json"
_FORMAT = 1


class CacheEntry:
    """One kept environment, locked by this run until :meth:`release`."""

    def __init__(self, path: Path, lock_fd: int) -> None:
        self.path = path
        self.venv = path / "venv"
        self._lock_fd = lock_fd

    def valid(self) -> str | None:
        """None when the environment is as it was made; else why it is not."""
        manifest = self.path / MANIFEST
        if not manifest.is_file() or not self.venv.is_dir():
            return "not made yet"
        try:
            want = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return f"{manifest} does not read"
        for cache in list(self.venv.rglob("__pycache__")):
            shutil.rmtree(cache, ignore_errors=True)
        got = tree_digest(self.venv)
        if got != want.get("files"):
            changed = sorted(set(got.items()) ^ set(dict(want.get("files") or {}).items()))
            return f"changed since it was made ({len(changed)} difference(s), e.g. {changed[0][0]})"
        return None

    def clear(self) -> None:
        (self.path / MANIFEST).unlink(missing_ok=True)
        shutil.rmtree(self.venv, ignore_errors=True)

    def seal(self) -> None:
        """Record the environment as made (after the install)."""
        for cache in list(self.venv.rglob("__pycache__")):
            shutil.rmtree(cache, ignore_errors=True)
        data = {"format": _FORMAT, "made": time.time(), "files": tree_digest(self.venv)}
        atomic_write(
            self.path / MANIFEST, json.dumps(data, indent=0, sort_keys=True).encode("utf-8")
        )

    def release(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._lock_fd)


def tree_digest(root: Path) -> dict[str, str]:
    """Relative path -> sha256 of each file under ``root`` (``link:TARGET`` for a link),
    ``__pycache__`` directories left out."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in [
            *filenames,
            *(d for d in dirnames if os.path.islink(os.path.join(dirpath, d))),
        ]:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            if os.path.islink(full):
                out[rel] = "link:" + os.readlink(full)
                continue
            h = hashlib.sha256()
            with open(full, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    h.update(chunk)
            out[rel] = h.hexdigest()
    return out


def cache_key(wheel_sha256s: Sequence[str], deps: str, base_python: str) -> str:
    real = os.path.realpath(base_python)
    st = os.stat(real)
    ident = {
        "format": _FORMAT,
        "wheels": sorted(wheel_sha256s),
        "deps": deps,
        "python": [real, st.st_size, st.st_mtime_ns, os.path.abspath(base_python)],
    }
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode("utf-8")).hexdigest()[:32]


def open_entry(wheel_sha256s: Sequence[str], deps: str, base_python: str) -> CacheEntry | None:
    """This run's entry of the cache, locked; None when there is no cache (unset, or
    ``--deps index``) or another run holds the entry (this run then makes its own)."""
    where = settings.text(CACHE_VAR)
    if not where or deps not in CACHED_DEPS:
        return None
    root = Path(os.path.expanduser(where))
    try:
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        entry = root / cache_key(wheel_sha256s, deps, base_python)
        entry.mkdir(exist_ok=True, mode=0o700)
        fd = os.open(entry / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        log.warn(f"{CACHE_VAR}: cannot use {root} ({exc}); a fresh smoke environment is made")
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        log.info(f"    the kept smoke environment {entry} is in use: a fresh one is made")
        return None
    _evict(root, keep_also=entry)
    return CacheEntry(entry, fd)


def _evict(root: Path, *, keep_also: Path) -> None:
    entries = []
    for child in root.iterdir():
        manifest = child / MANIFEST
        if child != keep_also and manifest.is_file():
            entries.append((manifest.stat().st_mtime, child))
    for _mtime, child in sorted(entries, reverse=True)[KEEP - 1 :]:
        try:
            fd = os.open(child / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            shutil.rmtree(child / "venv", ignore_errors=True)
            (child / MANIFEST).unlink(missing_ok=True)
        except OSError:
            pass  # in use by another run: it stays this time
        finally:
            os.close(fd)
