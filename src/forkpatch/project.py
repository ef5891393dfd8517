"""The project: series.yaml, patches/, and forkpatch's private state in .forkpatch/."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forkpatch import log
from forkpatch.engine import Item
from forkpatch.errors import LockError, SeriesError, StateError
from forkpatch.forkrepo import STORE_DIR, ForkRepo
from forkpatch.fsutil import (
    _TMP_NAME,
    atomic_write,
    commit_files,
    project_lock,
    recover_files,
    sweep_temps,
)
from forkpatch.patchfile import PatchFile, format_patch, parse_patch
from forkpatch.series import (
    PATCHES_DIR,
    SERIES_FILE,
    PatchEntry,
    Series,
    dump_series,
    load_series,
    parse_series,
    save_series,
)

STATE_FILE = "state.json"
# The journal of a multi-file write (fsutil.commit_files) in progress.
COMMIT_JOURNAL = "commit.json"


def find_root(start: Path) -> Path:
    """The nearest directory at or above ``start`` holding series.yaml."""
    start = start.resolve()
    for d in (start, *start.parents):
        if (d / SERIES_FILE).is_file():
            return d
    raise SeriesError(
        f"no {SERIES_FILE} in {start} or any parent directory",
        tip="run `forkpatch init --fork-url URL --base TAG` to start a series, or pass -C DIR",
    )


@dataclass
class Project:
    root: Path
    fork_override: str | None = None
    _series: Series | None = field(default=None, repr=False)
    _fork: ForkRepo | None = field(default=None, repr=False)

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
            # the last results by text: exact, unlike an mtime/size key).
            self._series = load_series(self.series_path)
        return self._series

    def reload(self) -> Series:
        self._series = None
        return self.series

    def fork(self) -> ForkRepo:
        if self._fork is None:
            self._fork = ForkRepo.open(self.root, self.series.fork.url, self.fork_override)
        return self._fork

    # ----------------------------------------------------------------- patches

    def patch_path(self, entry: PatchEntry) -> Path:
        assert entry.file is not None
        return self.patches_dir / entry.file

    def rel(self, path: Path) -> str:
        try:
            return str(path.relative_to(self.root))
        except ValueError:
            return str(path)

    def load_patch(self, entry: PatchEntry) -> PatchFile | None:
        if entry.file is None:
            return None
        path = self.patch_path(entry)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise SeriesError(
                f"{SERIES_FILE}:{entry.line}: patch '{entry.name}' names {self.rel(path)}, "
                "which does not exist",
                tip=f"restore the file, or remove the entry with `forkpatch delete {entry.name}`",
            ) from None
        return parse_patch(data, source=self.rel(path))

    def items(self, entries: list[PatchEntry] | tuple[PatchEntry, ...] | None = None) -> list[Item]:
        chosen = self.series.patches if entries is None else entries
        return [Item(entry=e, patch=self.load_patch(e)) for e in chosen]

    def orphans(self) -> list[str]:
        """Files in patches/ that series.yaml does not list."""
        if not self.patches_dir.is_dir():
            return []
        listed = {p.file for p in self.series.patches if p.file}
        out = []
        for path in sorted(self.patches_dir.rglob("*")):
            if path.is_file() and not path.name.startswith("."):
                rel = path.relative_to(self.patches_dir).as_posix()
                if rel not in listed:
                    out.append(rel)
        return out

    def write_patch(self, entry: PatchEntry, header: str, diff: bytes) -> bool:
        """Write a patch file atomically; False when its bytes did not change."""
        return atomic_write(self.patch_path(entry), format_patch(header, diff))

    def save_series(self, series: Series) -> bool:
        changed = save_series(series, self.series_path)
        self._series = series
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
        changes: dict[Path, bytes | Path | None] = {}
        for entry, content in (patches or {}).items():
            path = self.patch_path(entry)
            if content is None or isinstance(content, bytes):
                changes[path] = content
            else:
                changes[path] = format_patch(*content)
        if series is not None:
            text = dump_series(series)
            parse_series(text, path=str(self.series_path))
            changes[self.series_path] = text.encode("utf-8")
        changes.update(extra or {})
        self.state_dir.mkdir(parents=True, exist_ok=True)
        changed = commit_files(changes, journal=self.state_dir / COMMIT_JOURNAL)
        if series is not None:
            self._series = series
        return [self.rel(p) for p in changed]

    def recover(self) -> list[str]:
        """Finish a multi-file write that a killed forkpatch left half done, and remove its
        temporary files. Must hold the lock. Returns the paths completed."""
        done = recover_files(self.state_dir / COMMIT_JOURNAL)
        if done:
            self._series = None
            log.warn(
                "finished writing "
                + ", ".join(self.rel(Path(p)) for p in done)
                + " (an earlier forkpatch was interrupted after deciding to write them)"
            )
        for d, recursive in (
            (self.root, False),
            (self.patches_dir, True),
            (self.root / "dist", False),
        ):
            sweep_temps(d, recursive=recursive)
        return done

    def recover_if_needed(self) -> None:
        """For read-only commands: finish an interrupted write when nobody holds the lock."""
        if not (self.state_dir / COMMIT_JOURNAL).exists() and not any(
            _TMP_NAME.match(p.name)
            for d in (self.root, self.patches_dir, self.root / "dist")
            if d.is_dir()
            for p in d.iterdir()
        ):
            return
        try:
            with project_lock(self.state_dir / "lock", command="recover"):
                self.recover()
        except LockError:
            pass  # the holder will (or is about to) finish it

    # ----------------------------------------------------------------- state

    @contextlib.contextmanager
    def locked(self, command: str) -> Iterator[None]:
        with project_lock(self.state_dir / "lock", command=command):
            self.recover()
            # While a rebase is in progress patches/ belongs to it: only `rebase`
            # (--continue / --skip / --abort) may change the project.
            from forkpatch.rebase import refuse_during_rebase

            refuse_during_rebase(self, command)
            yield

    def read_state(self, name: str = STATE_FILE) -> dict[str, Any] | None:
        path = self.state_dir / name
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except json.JSONDecodeError as exc:
            raise StateError(
                f"{self.rel(path)} is corrupt ({exc})",
                tip=f"delete {self.rel(path)} to forget the operation",
            ) from None

    def write_state(self, data: dict[str, Any] | None, name: str = STATE_FILE) -> None:
        path = self.state_dir / name
        if data is None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            return
        atomic_write(path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode())


def open_project(directory: Path | None = None, fork_override: str | None = None) -> Project:
    project = Project(root=find_root(directory or Path.cwd()), fork_override=fork_override)
    project.recover_if_needed()
    return project
