"""``forkpatch check --onto TAG`` and ``forkpatch rebase --onto TAG`` (with
``--continue`` / ``--skip`` / ``--abort``).

Everything is computed in memory by :class:`forkpatch.engine.SeriesApplier` on
forkpatch's private store: each patch is applied exactly (no fuzz unless
``--fuzz`` asks for it and then it is reported), a hunk that does not apply is
3-way merged against the patch's own pre/post images on the *old* base (which
forkpatch can always rebuild, hence no ``index`` lines in patch files), and a
patch whose change is already in the new base is ``upstreamed``, with the
evidence: ``git patch-id`` of an upstream commit, content already present, or a
clean reverse-apply.

The rebase is a transaction (STYLE points 5 and 6). Before anything in
``patches/`` or series.yaml changes, a journal is written to
``.forkpatch/rebase/``: ``state.json`` (where the rebase stands) and
``original.json`` (byte copies of series.yaml and every file in patches/). Then the
changed patch files are written, series.yaml last but one and the dropped
patch files removed last, each atomically. A process killed at any point
leaves the journal behind; ``--continue`` redoes the (idempotent) writes from
the journal and ``--abort`` puts the original bytes back. A conflict stops the
rebase *before* any write, with a work tree (``.forkpatch/rebase-worktree``)
holding the patches below and the conflicting patch with its markers.

Test hook: ``FORKPATCH_TEST_PAUSE_AFTER=<point>`` makes the process stop itself
(SIGSTOP) at a named point so that a test can SIGKILL it there. Points:
``journal`` (journal written, nothing else), ``write-patch-<n>`` (after the
n-th patch file write), ``write-series`` (after series.yaml).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from forkpatch import log
from forkpatch.engine import (
    Item,
    PatchResult,
    SeriesApplier,
    TreeState,
    commit_message,
    diffs_of_commits,
)
from forkpatch.errors import ConflictError, StateError, UsageError
from forkpatch.forkrepo import require_history
from forkpatch.fsutil import atomic_write, fsync_dir, write_event, write_temp
from forkpatch.git import DIFF_OPTIONS, Git, commit_date
from forkpatch.patchfile import PatchFile, parse_patch
from forkpatch.patchtext import PatchTexts
from forkpatch.project import Project, find_root
from forkpatch.series import PATCHES_DIR, SERIES_FILE, BaseRef, PatchEntry, Series, parse_series

JOURNAL_DIR = "rebase"
JOURNAL_FILE = "state.json"
ORIGINAL_FILE = "original.json"
WORKTREE_DIR = "rebase-worktree"
REPORTS_DIR = "reports"
HEAD_REF = "refs/forkpatch/rebase/head"
PAUSE_ENV = "FORKPATCH_TEST_PAUSE_AFTER"
JOURNAL_VERSION = 1

# Statuses after which a patch keeps a commit on the new base.
APPLIED = ("clean", "offset", "fuzz", "merged", "resolved")
# Statuses that take a patch out of the series.
DROPPED = ("upstreamed", "skipped")


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class RebaseOptions:
    """What the user asked for; built once by the CLI."""

    onto: str
    three_way: bool = True
    fuzz: int = 0
    report_dir: Path | None = None


@dataclass
class Outcome:
    """One patch's fate on the new base."""

    name: str
    status: str  # clean offset fuzz merged upstreamed conflict blocked | resolved skipped
    files: list[str] = field(default_factory=list)
    evidence: str | None = None
    detail: list[str] = field(default_factory=list)
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    commit: str | None = None  # its commit on the new base (applied patches only)
    moved: dict[str, str] = field(default_factory=dict)  # old path -> path upstream moved it to

    @classmethod
    def of(cls, result: PatchResult, moved: Mapping[str, str]) -> Outcome:
        return cls(
            name=result.name,
            status=result.status,
            files=list(result.files),
            evidence=result.evidence,
            detail=list(result.detail),
            conflicts=[
                {"path": c.path, "reason": c.reason, "hunks": c.hunks, "line": c.line}
                for c in result.conflicts
            ],
            commit=result.commit,
            moved=dict(moved),
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "status": self.status, "files": self.files}
        if self.evidence:
            out["evidence"] = self.evidence
        if self.detail:
            out["detail"] = self.detail
        if self.conflicts:
            out["conflicts"] = self.conflicts
        if self.moved:
            out["moved"] = self.moved
        if self.commit:
            out["commit"] = self.commit
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Outcome:
        return cls(
            name=d["name"],
            status=d["status"],
            files=list(d.get("files", [])),
            evidence=d.get("evidence"),
            detail=list(d.get("detail", [])),
            conflicts=list(d.get("conflicts", [])),
            commit=d.get("commit"),
            moved=dict(d.get("moved", {})),
        )

    @property
    def refresh(self) -> bool:
        """Whether the patch file must be regenerated from its new commit.

        A ``clean`` patch applies byte for byte as it is, so its file is kept
        (a no-op rebase changes zero bytes); anything that moved, merged or was
        resolved is rewritten so that it applies exactly next time.
        """
        return self.status in APPLIED and (self.status != "clean" or bool(self.moved))


@dataclass
class Plan:
    """The classification of a whole series on a new base."""

    base: str
    base_commit: str
    onto: str
    onto_commit: str
    relation: str  # same | forward | backwards | diverged
    outcomes: list[Outcome]
    head: str  # the last commit on the new base (onto when nothing applied)
    conflict: PatchResult | None = None  # the first conflict, with merged texts

    @property
    def ok(self) -> bool:
        return all(o.status not in ("conflict", "blocked") for o in self.outcomes)

    @property
    def note(self) -> str | None:
        return relation_note(self.relation, self.base, self.onto)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "onto": self.onto,
            "onto_commit": self.onto_commit,
            "base": self.base,
            "base_commit": self.base_commit,
            "relation": self.relation,
        }
        if self.note:
            out["note"] = self.note
        out["ok"] = self.ok
        out["patches"] = [o.to_json() for o in self.outcomes]
        return out


def relation_note(relation: str, base: str, onto: str) -> str | None:
    if relation == "backwards":
        return f"{onto} is an ancestor of {base}: this rebase goes backwards"
    if relation == "diverged":
        return f"{onto} does not descend from {base}: the series moves to another line of history"
    return None


# --------------------------------------------------------------------------- test hook


def _pause(point: str) -> None:
    """Test hook: stop here (SIGSTOP) when FORKPATCH_TEST_PAUSE_AFTER names ``point``."""
    if os.environ.get(PAUSE_ENV) == point:
        print(f"forkpatch: test pause at {point}", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)


# --------------------------------------------------------------------------- upstream evidence


class _UpstreamIndex:
    """``git patch-id --stable`` of the commits in base..onto that could carry a patch.

    A patch-id covers the file names, so only an upstream commit that touches
    nothing but the patch's files can have the patch's id (or its reverse's).
    One cheap ``git log --name-status`` (no content diffs) finds those candidates;
    only they are diffed and hashed, with the patches that have any, in two more
    git processes at most, whatever the number of patches. Loaded on first use.
    """

    def __init__(self, git: Git, base: str, onto: str, items: Sequence[Item]) -> None:
        self.git, self.base, self.onto, self.items = git, base, onto, items
        self._upstream: dict[str, tuple[int, str]] | None = None  # pid -> (age, commit)
        self._subjects: dict[str, str] = {}
        self._series: dict[str, tuple[str, str | None]] = {}  # name -> (pid, reverse pid)

    def _touched(self) -> list[tuple[str, frozenset[str]]]:
        """(commit, paths it touches) for base..onto, newest first."""
        require_history(self.git, self.base, self.onto, old_name="the base", new_name=self.onto)
        raw = self.git.run(
            "log",
            "--no-merges",
            "--format=commit %H",
            "-M",
            "--name-status",
            "-z",
            f"{self.base}..{self.onto}",
        ).stdout
        out: list[tuple[str, set[str]]] = []
        parts = raw.split(b"\0")
        i = 0
        while i < len(parts):
            tok = parts[i].lstrip(b"\n")
            i += 1
            if not tok:
                continue
            if tok.startswith(b"commit ") and len(tok) == 47:
                out.append((tok[7:].decode(), set()))
                continue
            n = 2 if tok[:1] in (b"R", b"C") else 1
            if out:
                out[-1][1].update(p.decode("utf-8", "surrogateescape") for p in parts[i : i + n])
            i += n
        return [(c, frozenset(paths)) for c, paths in out]

    def _load(self) -> None:
        if self._upstream is not None:
            return
        self._upstream = {}
        if self.base == self.onto:
            return
        touched = self._touched()
        age_of = {commit: age for age, (commit, _paths) in enumerate(touched)}
        wanted: set[str] = set()
        fake: dict[str, tuple[str, bool]] = {}
        chunks = []
        for i, item in enumerate(self.items):
            if item.patch is None or not item.patch.diff:
                continue
            mine = {p for fp in item.patch.files for p in (fp.old_path, fp.new_path) if p}
            cands = {c for c, paths in touched if paths and paths <= mine}
            if not cands:
                continue
            wanted |= cands
            for reverse, diff in ((False, item.patch.diff), (True, _reverse_diff(item.patch))):
                if diff is None:
                    continue
                oid = f"{2 * i + reverse + 1:040x}"
                fake[oid] = (item.entry.name, reverse)
                chunks.append(
                    f"commit {oid}\n".encode() + diff + (b"" if diff.endswith(b"\n") else b"\n")
                )
        if not wanted:
            return
        log_p = self.git.run(
            "log",
            "--no-walk=unsorted",
            "--no-merges",
            "--format=commit %H%nsubject %s",
            *DIFF_OPTIONS,
            *sorted(wanted, key=age_of.__getitem__),
        ).stdout
        current = ""
        for line in log_p.split(b"\n"):
            if line.startswith(b"commit ") and len(line) == 47:
                current = line[7:].decode()
            elif line.startswith(b"subject ") and current:
                self._subjects.setdefault(current, line[8:].decode("utf-8", "replace"))
        # The newest commit (smallest age) wins for a patch-id seen more than once.
        for pid, commit in self._patch_ids(log_p):
            age = age_of.get(commit, len(age_of))
            if pid not in self._upstream or age < self._upstream[pid][0]:
                self._upstream[pid] = (age, commit)
        found: dict[str, dict[bool, str]] = {}
        for pid, oid in self._patch_ids(b"".join(chunks)):
            name, reverse = fake[oid]
            found.setdefault(name, {})[reverse] = pid
        for name, pids in found.items():
            if False in pids:
                self._series[name] = (pids[False], pids.get(True))

    def _patch_ids(self, stream: bytes) -> Iterator[tuple[str, str]]:
        if not stream.strip():
            return
        out = self.git.run("patch-id", "--stable", input=stream).stdout.decode()
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2:
                yield parts[0], parts[1]

    def match(self, name: str) -> tuple[str, str] | None:
        """(commit, subject) of the upstream commit with the same patch-id, if any, and
        not reverted by a newer upstream commit."""
        self._load()
        assert self._upstream is not None
        pids = self._series.get(name)
        if pids is None or pids[0] not in self._upstream:
            return None
        age, commit = self._upstream[pids[0]]
        if pids[1] is not None and pids[1] in self._upstream and self._upstream[pids[1]][0] < age:
            return None  # upstream took it, then reverted it
        return commit, self._subjects.get(commit, "")


def _reverse_diff(patch: PatchFile) -> bytes | None:
    """The text of the patch that undoes ``patch`` (for a revert's patch-id)."""
    from forkpatch.applier import reverse

    try:
        return b"".join(reverse(fp).raw for fp in patch.files)
    except Exception:
        return None


def _paths_of(item: Item) -> set[str]:
    if item.patch is None:
        return set()
    return {p for fp in item.patch.files for p in (fp.old_path, fp.new_path) if p}


class _LazyMergeBases(dict):  # type: ignore[type-arg]
    """Each patch's pre/post images on the old base, computed on first use.

    The 3-way merge base is only needed when a hunk does not apply, so a series
    that applies cleanly never pays for a run on the old base. When one patch
    needs it, only the patches that can change its files are replayed: walking
    back from it, every patch touching a file of interest (whose other files then
    become of interest too, for renames and patches that fail as a whole). When
    those replays add up to more than the series, the rest is done in one full pass.
    """

    def __init__(self, git: Git, base: str, items: Sequence[Item]) -> None:
        super().__init__()
        self._git, self._base, self._items = git, base, items
        self._done = False  # something was computed (see _warn_broken)
        self._full = False
        self._tried: set[str] = set()
        self._index = {it.entry.name: i for i, it in enumerate(items)}
        self._replayed = 0
        self._entries: dict[str, tuple[str, str]] | None = None  # the old base's listing
        self._blobs: dict[str, bytes | None] = {}  # blobs read so far, by id
        self.broken: list[str] = []  # patches that do not apply to their own base

    def _record(self, items: Sequence[Item]) -> None:
        """Apply ``items`` on the old base, in order, without stopping at a conflict
        (like ``SeriesApplier.run(write=False, stop_at_conflict=False)``), reusing the
        base's listing and blobs from one replay to the next."""
        self._done = True
        if self._entries is None:
            self._entries = self._git.ls_tree(self._base)
        applier = SeriesApplier(self._git, self._base)
        with self._git.reader() as reader:
            reader._cache = self._blobs
            state = TreeState(self._git, reader, self._base, entries=self._entries)
            state.prefetch(items)
            for item in items:
                r, _changes = applier.apply_patch(state, item)
                if r.images and not dict.__contains__(self, r.name):
                    dict.__setitem__(self, r.name, r.images)
                if r.status == "conflict" and r.name not in self.broken:
                    self.broken.append(r.name)

    def _fill(self, key: Any = None) -> None:
        if self._full or dict.__contains__(self, key) or key in self._tried:
            return
        index = self._index.get(key) if isinstance(key, str) else None
        if index is None or self._replayed > len(self._items):
            self._full = True
            self._record(self._items)
            return
        self._tried.add(key)
        wanted = _paths_of(self._items[index])
        chosen = [self._items[index]]
        for item in reversed(self._items[:index]):
            paths = _paths_of(item)
            if paths & wanted:
                wanted |= paths
                chosen.append(item)
        chosen.reverse()
        self._replayed += len(chosen)
        self._record(chosen)

    def __bool__(self) -> bool:
        return True  # SeriesApplier keeps ``merge_bases or {}``: never look empty

    def get(self, key: Any, default: Any = None) -> Any:
        self._fill(key)
        return dict.get(self, key, default)

    def __getitem__(self, key: Any) -> Any:
        self._fill(key)
        return dict.__getitem__(self, key)

    def __contains__(self, key: object) -> bool:
        self._fill(key)
        return dict.__contains__(self, key)


# --------------------------------------------------------------------------- the walk


class _Walker:
    """Applies (the rest of) a series on the new base, classifying each patch."""

    def __init__(
        self,
        git: Git,
        *,
        base_commit: str,
        onto: str,
        onto_commit: str,
        items: Sequence[Item],
        options: RebaseOptions,
    ) -> None:
        self.git = git
        self.base_commit = base_commit
        self.onto = onto
        self.onto_commit = onto_commit
        self.options = options
        self.all_items = list(items)
        self.merge_bases = _LazyMergeBases(git, base_commit, items)
        self.upstream = _UpstreamIndex(git, base_commit, onto_commit, items)
        self._renames: dict[str, str] | None = None
        self.applier = SeriesApplier(
            git,
            onto_commit,
            max_fuzz=options.fuzz,
            three_way=options.three_way,
            detect_upstream=True,
            merge_bases=self.merge_bases,
            labels=(onto, "patch"),
        )

    # -- files upstream moved

    def renames(self) -> dict[str, str]:
        if self._renames is None:
            self._renames = {}
            if self.base_commit != self.onto_commit:
                raw = self.git.run(
                    "diff-tree",
                    "-r",
                    "-M",
                    "--name-status",
                    "-z",
                    self.base_commit,
                    self.onto_commit,
                ).stdout
                parts = raw.split(b"\0")
                i = 0
                while i < len(parts):
                    status = parts[i].decode()
                    if status.startswith("R") and i + 2 < len(parts):
                        old = parts[i + 1].decode("utf-8", "surrogateescape")
                        new = parts[i + 2].decode("utf-8", "surrogateescape")
                        self._renames[old] = new
                        i += 3
                    elif status.startswith("C") and i + 2 < len(parts):
                        i += 3
                    else:
                        i += 2
        return self._renames

    def follow_renames(self, state: TreeState, item: Item) -> tuple[Item, dict[str, str]]:
        """Point a patch's file sections at the names upstream moved their files to."""
        patch = item.patch
        if patch is None:
            return item, {}
        # Existence only: ``entries`` says it without reading any blob.
        missing = [
            fp for fp in patch.files if fp.old_path is not None and fp.old_path not in state.entries
        ]
        if not missing:
            return item, {}
        renames = self.renames()
        moved: dict[str, str] = {}
        files = []
        for fp in patch.files:
            src = fp.old_path
            if fp in missing and src in renames and renames[src] in state.entries:
                dst = renames[src]
                moved[src] = dst
                new_path = dst if fp.new_path == src else fp.new_path
                files.append(replace(fp, old_path=dst, new_path=new_path))
            else:
                files.append(fp)
        if not moved:
            return item, {}
        images = dict(self.merge_bases.get(item.entry.name, {}))
        for src, dst in moved.items():
            if src in images:
                images[dst] = images[src]
        dict.__setitem__(self.merge_bases, item.entry.name, images)
        return Item(item.entry, replace(patch, files=tuple(files))), moved

    # -- one patch

    def classify(
        self, state: TreeState, item: Item
    ) -> tuple[PatchResult, list[Any], dict[str, str]]:
        """One patch on ``state``: (result, its file changes, files followed to a new name).

        A patch whose patch-id matches an upstream commit in base..onto (not reverted
        since) is upstreamed without being applied, like ``git rebase`` skips
        cherry-picks; otherwise the engine applies it (exact, then 3-way) and itself
        recognises content already present or a clean reverse-apply.
        """
        patch = item.patch
        if patch is not None and patch.files:
            match = self.upstream.match(item.entry.name)
            if match is not None:
                commit, subject = match
                files = list(
                    dict.fromkeys(p for fp in patch.files for p in (fp.old_path, fp.new_path) if p)
                )
                return (
                    PatchResult(
                        name=item.entry.name,
                        status="upstreamed",
                        files=files,
                        added=patch.added,
                        removed=patch.removed,
                        evidence=f"patch-id matches upstream commit {commit[:12]} '{subject}'",
                    ),
                    [],
                    {},
                )
        item, moved = self.follow_renames(state, item)
        result, changes = self.applier.apply_patch(state, item)
        if moved:
            result.detail.extend(
                f"{src}: upstream moved it to {dst}; the patch follows it"
                for src, dst in moved.items()
            )
        return result, changes, moved

    # -- a run

    def walk(
        self, items: Sequence[Item], *, parent: str, write: bool, number: int, total: int
    ) -> tuple[list[Outcome], str, PatchResult | None]:
        """Classify ``items`` in order on ``parent``; with ``write`` one commit each."""
        outcomes: list[Outcome] = []
        conflict: PatchResult | None = None
        marks: list[tuple[Outcome, str]] = []
        with self.git.reader() as reader:
            state = TreeState(self.git, reader, parent)
            state.prefetch(items)
            fi = self.git.fast_import() if write else None
            date = commit_date(self.git, self.onto_commit) if write else ""
            tip = parent
            for n, item in enumerate(items, number):
                if conflict is not None:
                    outcome = Outcome(
                        item.entry.name,
                        "blocked",
                        detail=[f"not tried: '{conflict.name}' below it conflicted"],
                    )
                    outcomes.append(outcome)
                    _progress(n, total, outcome)
                    continue
                result, changes, moved = self.classify(state, item)
                outcome = Outcome.of(result, moved)
                outcomes.append(outcome)
                if result.status == "conflict":
                    conflict = result
                elif fi is not None and item.patch is not None and result.status not in DROPPED:
                    tip = fi.commit(
                        parent=tip,
                        changes=changes,
                        message=commit_message(item.entry, item.patch.header),
                        date=date,
                    )
                    marks.append((outcome, tip))
                _progress(n, total, outcome)
            head = parent
            if fi is not None:
                ids = fi.finish()
                for outcome, mark in marks:
                    outcome.commit = ids[mark]
                if marks:
                    head = ids[marks[-1][1]]
        return outcomes, head, conflict


def _progress(n: int, total: int, outcome: Outcome) -> None:
    extra = ""
    if outcome.status == "upstreamed" and outcome.evidence:
        extra = f" ({outcome.evidence})"
    elif outcome.status == "conflict" and outcome.conflicts:
        extra = f" ({', '.join(c['path'] for c in outcome.conflicts)})"
    log.info(f"[{n}/{total}] {outcome.name} ... {outcome.status}{extra}")


# --------------------------------------------------------------------------- setup


@dataclass
class _Setup:
    project: Project
    git: Git
    series: Series
    base_commit: str
    onto: str
    onto_commit: str
    relation: str


def _resolve(project: Project, onto: str, series: Series | None = None) -> _Setup:
    series = series or project.series
    fork = project.fork()
    git = fork.store
    base_commit = series.base.commit
    fork.require_commit(base_commit, f"series.yaml's base ({series.base.tag})")
    onto_commit = fork.resolve_tag(onto)
    if onto_commit == base_commit:
        relation = "same"
    elif git.is_ancestor(base_commit, onto_commit):
        relation = "forward"
    elif git.is_ancestor(onto_commit, base_commit):
        relation = "backwards"
    else:
        relation = "diverged"
    return _Setup(project, git, series, base_commit, onto, onto_commit, relation)


def check(project: Project, options: RebaseOptions, *, write: bool = False) -> Plan:
    """Classify every patch of the series on ``options.onto``. Changes nothing in the project.

    With ``write`` the new commits are created in the private store (objects only,
    no ref moves): that is what ``rebase`` builds on.
    """
    setup = _resolve(project, options.onto)
    note = relation_note(setup.relation, setup.series.base.tag, setup.onto)
    if note:
        log.warn(note)
    items = project.items()
    walker = _Walker(
        setup.git,
        base_commit=setup.base_commit,
        onto=setup.onto,
        onto_commit=setup.onto_commit,
        items=items,
        options=options,
    )
    outcomes, head, conflict = walker.walk(
        items, parent=setup.onto_commit, write=write, number=1, total=len(items)
    )
    _warn_broken(walker)
    return Plan(
        base=setup.series.base.tag,
        base_commit=setup.base_commit,
        onto=setup.onto,
        onto_commit=setup.onto_commit,
        relation=setup.relation,
        outcomes=outcomes,
        head=head,
        conflict=conflict,
    )


def _warn_broken(walker: _Walker) -> None:
    if walker.merge_bases._done and walker.merge_bases.broken:
        log.warn(
            "these patches do not apply to the series' own base, so they have no 3-way "
            "merge base: " + ", ".join(walker.merge_bases.broken)
        )


# --------------------------------------------------------------------------- journal


class Journal:
    """``.forkpatch/rebase/``: where a rebase stands, and the bytes to restore."""

    def __init__(self, project: Project) -> None:
        self.project = project
        self.dir = project.state_dir / JOURNAL_DIR
        self.path = self.dir / JOURNAL_FILE
        self._bundle: dict[str, bytes] | None = None
        self._series: Series | None = None

    def exists(self) -> bool:
        return self.path.is_file()

    def load(self) -> dict[str, Any]:
        data = self.project.read_state(f"{JOURNAL_DIR}/{JOURNAL_FILE}")
        if data is None:
            raise StateError(
                "no rebase is in progress", tip="start one with `forkpatch rebase --onto TAG`"
            )
        if data.get("version") != JOURNAL_VERSION:
            raise StateError(
                f"{self.project.rel(self.path)} was written by another forkpatch version",
                tip="finish it with that version, or delete "
                f"{self.project.rel(self.dir)} after restoring patches/ by hand",
            )
        return data

    def save(self, data: dict[str, Any]) -> None:
        self.project.write_state(data, f"{JOURNAL_DIR}/{JOURNAL_FILE}")

    def start(self, data: dict[str, Any]) -> None:
        """Save series.yaml and patches/ aside, then write state.json (last: it is the commit).

        The copies go into one file (``original.json``), written atomically: one
        fsync instead of two per patch file.
        """
        if self.dir.exists():
            shutil.rmtree(self.dir)  # a start killed before state.json: nothing to keep
        files = [self.project.series_path]
        if self.project.patches_dir.is_dir():
            files += sorted(p for p in self.project.patches_dir.rglob("*") if p.is_file())
        bundle = {
            p.relative_to(self.project.root).as_posix(): base64.b64encode(p.read_bytes()).decode(
                "ascii"
            )
            for p in files
        }
        atomic_write(self.bundle, (json.dumps(bundle) + "\n").encode())
        self._bundle = {k: base64.b64decode(v) for k, v in bundle.items()}
        self._series = self.project.series  # parsed from the same bytes
        data["original"] = list(bundle)
        self.save(data)

    @property
    def bundle(self) -> Path:
        return self.dir / ORIGINAL_FILE

    def original_bytes(self, rel: str) -> bytes:
        if self._bundle is None:
            self._bundle = {
                k: base64.b64decode(v) for k, v in json.loads(self.bundle.read_text()).items()
            }
        return self._bundle[rel]

    def original_series(self) -> Series:
        if self._series is None:
            self._series = parse_series(
                self.original_bytes(SERIES_FILE).decode("utf-8"), path=SERIES_FILE
            )
        return self._series

    def original_patch(self, entry: PatchEntry) -> PatchFile | None:
        if entry.file is None:
            return None
        rel = f"{PATCHES_DIR}/{entry.file}"
        return parse_patch(self.original_bytes(rel), source=rel)

    def original_items(self, series: Series) -> list[Item]:
        return [Item(e, self.original_patch(e)) for e in series.patches]

    def restore(self, data: Mapping[str, Any]) -> list[str]:
        """Put every original file back byte for byte; returns the paths that changed."""
        rels = list(data.get("original", []))
        changed = write_files({self.project.root / rel: self.original_bytes(rel) for rel in rels})
        self.project.reload()
        return [p.relative_to(self.project.root).as_posix() for p in changed]

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)
        shutil.rmtree(self.dir, ignore_errors=True)


def write_files(files: Mapping[Path, bytes], *, pause: str | None = None) -> list[Path]:
    """Replace each file whose bytes differ, in order, each by an atomic rename.

    Like :func:`forkpatch.fsutil.atomic_write` for many files at once: the new
    contents are written to temporary files and flushed with one ``os.sync()``
    before the first rename (instead of two fsyncs per file); a killed process
    leaves each file either old or new, never torn. ``pause`` names the test
    hook point ``<pause>-<n>`` after the n-th rename.
    """
    todo: list[tuple[Path, Path]] = []
    try:
        for path, data in files.items():
            tmp = write_temp(path, data, sync=False)
            if tmp is not None:
                todo.append((Path(tmp), path))
        if todo:
            os.sync()
        done = []
        for n, (tmp, path) in enumerate(todo, 1):
            write_event(f"before-rename {path.name}")
            os.replace(tmp, path)
            write_event(f"after-rename {path.name}")
            done.append(path)
            if pause:
                _pause(f"{pause}-{n}")
    finally:
        for tmp, _path in todo:
            tmp.unlink(missing_ok=True)
    for d in {p.parent for _t, p in todo}:
        fsync_dir(d)
    return done


def stopped_json(project: Project) -> dict[str, Any] | None:
    """What `rebase --json` prints when the rebase stops at a conflict: where it
    stopped, the work tree to resolve in, and every patch's outcome so far."""
    try:
        data = Journal(project).load()
    except Exception:
        return None
    return {
        "status": "stopped" if data.get("phase") == "conflict" else data.get("phase"),
        "onto": data.get("onto"),
        "onto_commit": data.get("onto_commit"),
        "base": data.get("base"),
        "base_commit": data.get("base_commit"),
        "conflict": data.get("conflict"),
        "worktree": data.get("worktree"),
        "patches": data.get("outcomes", []),
        "next": [
            "forkpatch rebase --continue",
            "forkpatch rebase --skip",
            "forkpatch rebase --abort",
        ],
    }


def pending_hint(cwd: Path) -> str | None:
    """A line telling the user about a rebase in progress in the project at ``cwd``."""
    try:
        root = find_root(cwd)
    except Exception:
        return None
    path = root / ".forkpatch" / JOURNAL_DIR / JOURNAL_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return (
            f"a rebase journal is in {path}: run `forkpatch rebase --continue` or "
            "`forkpatch rebase --abort`"
        )
    onto = data.get("onto", "?")
    if data.get("phase") == "conflict":
        if not data.get("worktree"):
            return (
                f"a rebase onto {onto} is in progress, stopped at patch "
                f"'{data.get('conflict')}', which conflicts (its work tree was not written "
                "yet): run `forkpatch rebase --continue` to write it, or `forkpatch rebase "
                "--skip` / `forkpatch rebase --abort`"
            )
        return (
            f"a rebase onto {onto} is in progress, stopped at patch "
            f"'{data.get('conflict')}' with conflicts in {data.get('worktree')}: resolve "
            "them and run `forkpatch rebase --continue`, or `forkpatch rebase --skip` to "
            "drop that patch, or `forkpatch rebase --abort` to restore everything"
        )
    return (
        f"a rebase onto {onto} was interrupted while writing patches/ and series.yaml: run "
        "`forkpatch rebase --continue` to finish it, or `forkpatch rebase --abort` to "
        "restore everything as it was"
    )


def refuse_during_rebase(project: Project, command: str) -> None:
    """Mutating commands other than ``rebase`` must wait for the rebase to end."""
    if command == "rebase":
        return
    journal = Journal(project)
    if journal.exists():
        onto = (project.read_state(f"{JOURNAL_DIR}/{JOURNAL_FILE}") or {}).get("onto", "?")
        raise StateError(
            f"`forkpatch {command}` is refused while a rebase onto {onto} is in progress",
            tip="finish it with `forkpatch rebase --continue` "
            "(or --skip), or undo it with `forkpatch rebase --abort`",
        )


# --------------------------------------------------------------------------- rebase


@dataclass
class RebaseResult:
    """What a finished rebase did."""

    plan: Plan
    report: dict[str, Any]
    report_paths: list[Path]
    written: list[str]  # project-relative paths that changed (rewritten or removed)


def rebase(project: Project, options: RebaseOptions) -> RebaseResult:
    """Rebase the series onto ``options.onto`` (see the module docstring)."""
    journal = Journal(project)
    if journal.exists():
        raise StateError(
            pending_hint(project.root) or "a rebase is in progress",
            tip="`forkpatch rebase --continue` or `forkpatch rebase --abort`",
        )
    stack_info = _stack_before(project)
    plan = check(project, options, write=True)
    data: dict[str, Any] = {
        "version": JOURNAL_VERSION,
        "onto": plan.onto,
        "onto_commit": plan.onto_commit,
        "base": plan.base,
        "base_commit": plan.base_commit,
        "relation": plan.relation,
        "three_way": options.three_way,
        "fuzz": options.fuzz,
        "report_dir": str(options.report_dir) if options.report_dir else None,
        "outcomes": [o.to_json() for o in plan.outcomes],
        "head": plan.head,
        "stack": stack_info,
        "phase": "conflict" if plan.conflict else "writing",
        "conflict": plan.conflict.name if plan.conflict else None,
        "worktree": None,
    }
    journal.start(data)
    project.fork().store.update_ref(HEAD_REF, plan.head)
    _pause("journal")
    if plan.conflict is not None:
        _stop_at_conflict(project, journal, data)
    return _finish(project, journal, data)


def _options_of(data: Mapping[str, Any]) -> RebaseOptions:
    return RebaseOptions(
        onto=data["onto"],
        three_way=data["three_way"],
        fuzz=data["fuzz"],
        report_dir=Path(data["report_dir"]) if data.get("report_dir") else None,
    )


def _walker_for(
    project: Project, journal: Journal, data: Mapping[str, Any]
) -> tuple[_Walker, list[Item]]:
    series = journal.original_series()
    items = journal.original_items(series)
    walker = _Walker(
        project.fork().store,
        base_commit=data["base_commit"],
        onto=data["onto"],
        onto_commit=data["onto_commit"],
        items=items,
        options=_options_of(data),
    )
    return walker, items


def continue_(project: Project) -> RebaseResult:
    """Take the resolved work tree (or finish interrupted writes) and go on."""
    journal = Journal(project)
    data = journal.load()
    if data["phase"] == "writing":
        return _finish(project, journal, data)
    name = data["conflict"]
    if not data.get("worktree") or not (Path(data["worktree"]) / ".git").is_file():
        # Killed before the conflict work tree was written: write it now.
        _stop_at_conflict(project, journal, data)
    wt = _worktree_git(project, data)
    markers = _files_with_markers(wt)
    if markers:
        raise ConflictError(
            f"conflict markers remain in {', '.join(markers)} (in {wt.work_tree})",
            tip="resolve them, then run `forkpatch rebase --continue` again",
        )
    walker, items = _walker_for(project, journal, data)
    index = [i.entry.name for i in items].index(name)
    item = items[index]
    wt.run("add", "-A")
    tree = wt.out("write-tree")
    head = data["head"]
    outcome = Outcome.from_json(data["outcomes"][index])
    outcome.conflicts = []
    if tree == wt.tree_of(head):
        outcome.status = "upstreamed"
        outcome.evidence = "resolved by hand to no change: the new base already holds it"
    else:
        header = item.patch.header if item.patch else ""
        head = wt.commit_tree(
            tree,
            [head],
            commit_message(item.entry, header),
            date=commit_date(wt, data["onto_commit"]),
        )
        outcome.status = "resolved"
        outcome.commit = head
        outcome.detail.append("conflict resolved by hand")
    log.info(f"[{index + 1}/{len(items)}] {name} ... {outcome.status}")
    return _go_on(project, journal, data, walker, items, index, outcome, head)


def skip(project: Project) -> RebaseResult:
    """Drop the conflicting patch from the series and go on."""
    journal = Journal(project)
    data = journal.load()
    if data["phase"] != "conflict":
        raise UsageError(
            "the rebase is not stopped at a conflict",
            tip="`forkpatch rebase --continue` finishes it",
        )
    walker, items = _walker_for(project, journal, data)
    index = [i.entry.name for i in items].index(data["conflict"])
    outcome = Outcome.from_json(data["outcomes"][index])
    reasons = "; ".join(c["reason"] for c in outcome.conflicts) or "conflict"
    outcome.status = "skipped"
    outcome.evidence = f"dropped with `forkpatch rebase --skip` (it conflicted: {reasons})"
    outcome.conflicts = []
    log.info(f"[{index + 1}/{len(items)}] {outcome.name} ... skipped")
    return _go_on(project, journal, data, walker, items, index, outcome, data["head"])


def _go_on(
    project: Project,
    journal: Journal,
    data: dict[str, Any],
    walker: _Walker,
    items: list[Item],
    index: int,
    outcome: Outcome,
    head: str,
) -> RebaseResult:
    rest = items[index + 1 :]
    outcomes, new_head, conflict = walker.walk(
        rest, parent=head, write=True, number=index + 2, total=len(items)
    )
    data["outcomes"] = (
        data["outcomes"][:index] + [outcome.to_json()] + [o.to_json() for o in outcomes]
    )
    data["head"] = new_head
    data["conflict"] = conflict.name if conflict else None
    data["phase"] = "conflict" if conflict else "writing"
    journal.save(data)
    project.fork().store.update_ref(HEAD_REF, new_head)
    if conflict is not None:
        _stop_at_conflict(project, journal, data)
    return _finish(project, journal, data)


def abort(project: Project) -> list[str]:
    """Restore series.yaml, patches/ and the stack exactly as before the rebase."""
    journal = Journal(project)
    data = journal.load()
    changed = journal.restore(data)
    _remove_worktree(project)
    stack = data.get("stack")
    if stack:
        _move_stack(project, stack["head"], stack["base"])
    project.fork().store.delete_ref(HEAD_REF)
    journal.clear()
    return changed


# --------------------------------------------------------------------------- conflicts


def _worktree_path(project: Project) -> Path:
    return (project.state_dir / WORKTREE_DIR).resolve()


def _worktree_git(project: Project, data: Mapping[str, Any]) -> Git:
    path = Path(data.get("worktree") or _worktree_path(project))
    if not (path / ".git").is_file():
        raise StateError(
            f"the conflict work tree {path} is missing",
            tip="run `forkpatch rebase --abort` and start again",
        )
    return project.linked_worktree(path)  # never another project's work tree


def _remove_worktree(project: Project) -> None:
    path = _worktree_path(project)
    store = project.fork().store
    if path.exists():
        store.run("worktree", "remove", "--force", str(path), check=False)
        shutil.rmtree(path, ignore_errors=True)
    store.run("worktree", "prune", check=False)


def _files_with_markers(wt: Git) -> list[str]:
    from forkpatch.stack import CONFLICT_MARKER

    names = wt.run("diff", "--name-only", "-z", "HEAD").stdout.split(b"\0")
    names += wt.run("ls-files", "--others", "--exclude-standard", "-z").stdout.split(b"\0")
    out = []
    assert wt.work_tree is not None
    for raw in names:
        if not raw:
            continue
        rel = raw.decode("utf-8", "surrogateescape")
        path = wt.work_tree / rel
        if path.is_file() and CONFLICT_MARKER.search(path.read_bytes()):
            out.append(rel)
    return sorted(set(out))


def _stop_at_conflict(project: Project, journal: Journal, data: dict[str, Any]) -> None:
    """Write the conflict work tree, record it, and raise the ConflictError."""
    walker, items = _walker_for(project, journal, data)
    names = [i.entry.name for i in items]
    index = names.index(data["conflict"])
    item = items[index]
    head = data["head"]
    path = _worktree_path(project)
    store = project.fork().store
    store.run("worktree", "prune", check=False)
    if (path / ".git").is_file():
        wt = _worktree_git(project, {"worktree": str(path)})
        wt.run("checkout", "-q", "-f", "--detach", head)
        wt.run("clean", "-q", "-fdx")
    else:
        if path.exists():
            shutil.rmtree(path)
        store.run("worktree", "add", "-q", "-f", "--detach", str(path), head)
        wt = _worktree_git(project, {"worktree": str(path)})
    rejects = _write_conflict(walker, store, head, item, path, journal)
    data["worktree"] = str(path)
    journal.save(data)
    outcome = Outcome.from_json(data["outcomes"][index])
    lines = [f"patch '{item.entry.name}' does not apply to {data['onto']}:"]
    lines += [f"  - {c['reason']}" for c in outcome.conflicts]
    lines.append(
        f"the work tree {path} holds the patches below it and this patch with "
        "conflict markers"
        + (f"; hunks that could not be merged: {', '.join(rejects)}" if rejects else "")
    )
    lines.append("patches/ and series.yaml are unchanged so far")
    raise ConflictError(
        "\n".join(lines),
        tip=f"resolve the files in {path}, then run `forkpatch rebase --continue`; or "
        "`forkpatch rebase --skip` to drop this patch, `forkpatch rebase --abort` to stop",
    )


def _write_conflict(
    walker: _Walker, store: Git, head: str, item: Item, path: Path, journal: Journal
) -> list[str]:
    """Apply what applies of the conflicting patch; merged files get their markers.

    A file with no 3-way result (no merge base, or the file is gone) gets its
    hunks saved next to the journal for the human to apply by hand.
    """
    assert item.patch is not None
    rejects: list[str] = []
    with store.reader() as reader:
        state = TreeState(store, reader, head)
        item, _moved = walker.follow_renames(state, item)
        assert item.patch is not None
        three_way = SeriesApplier(
            store,
            walker.onto_commit,
            max_fuzz=walker.options.fuzz,
            three_way=True,
            merge_bases=walker.merge_bases,
            labels=(walker.onto, "patch"),
        )
        for fp in item.patch.files:
            single = Item(item.entry, replace(item.patch, files=(fp,)))
            result, changes = three_way.apply_patch(state, single)
            if result.status != "conflict":
                for ch in changes:
                    target = path / ch.path
                    if ch.is_delete:
                        target.unlink(missing_ok=True)
                    else:
                        target.parent.mkdir(parents=True, exist_ok=True)
                        target.write_bytes(ch.data or b"")
                        if ch.mode == "100755":
                            target.chmod(0o755)
                continue
            for c in result.conflicts:
                if c.merged is not None:
                    target = path / c.path
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(c.merged)
                else:
                    rej = journal.dir / "rejects" / f"{c.path}.rej"
                    rej.parent.mkdir(parents=True, exist_ok=True)
                    rej.write_bytes(fp.raw)
                    rejects.append(str(rej))
    return rejects


# --------------------------------------------------------------------------- finishing


def _new_series(journal: Journal, data: Mapping[str, Any], outcomes: Sequence[Outcome]) -> Series:
    series = journal.original_series()
    dropped = {o.name for o in outcomes if o.status in DROPPED}
    return series.with_base(BaseRef(data["onto"], data["onto_commit"])).with_patches(
        p for p in series.patches if p.name not in dropped
    )


def _finish(project: Project, journal: Journal, data: dict[str, Any]) -> RebaseResult:
    """Write the result (idempotent: an interrupted finish is simply run again)."""
    from forkpatch import report as report_mod

    if data["phase"] != "writing":
        data["phase"] = "writing"
        journal.save(data)
    store = project.fork().store
    outcomes = [Outcome.from_json(o) for o in data["outcomes"]]
    series = journal.original_series()
    by_name = {e.name: e for e in series.patches}
    diffs = diffs_of_commits(store, [o.commit for o in outcomes if o.refresh and o.commit])
    old_texts: dict[str, bytes] = {}
    new_texts: dict[str, bytes] = {}
    for o in outcomes:
        entry = by_name[o.name]
        if entry.file is None:
            continue
        old = journal.original_bytes(f"{PATCHES_DIR}/{entry.file}")
        old_texts[o.name] = old
        if o.refresh and o.commit:
            # The file's own form is kept (mail headers, notes, quilt style); a diffstat
            # is regenerated: see forkpatch.patchtext.
            new_texts[o.name] = (
                PatchTexts(store)
                .render(old, commit=o.commit, raw_diff=diffs[o.commit], source=entry.file)
                .data
            )
    write_files(
        {project.patch_path(by_name[name]): text for name, text in new_texts.items()},
        pause="write-patch",
    )
    project.save_series(_new_series(journal, data, outcomes))
    _pause("write-series")
    for o in outcomes:
        entry = by_name[o.name]
        if o.status in DROPPED and entry.file and project.patch_path(entry).exists():
            write_event(f"before-unlink {entry.file}")
            project.patch_path(entry).unlink(missing_ok=True)
            write_event(f"after-unlink {entry.file}")
    plan = Plan(
        base=data["base"],
        base_commit=data["base_commit"],
        onto=data["onto"],
        onto_commit=data["onto_commit"],
        relation=data["relation"],
        outcomes=outcomes,
        head=data["head"],
    )
    # Compared with the journal's copies, so a finish that was interrupted and run
    # again still reports every file the rebase changed.
    changed_files = _changed_since(project, journal, data)
    report = report_mod.build(
        plan,
        series=series,
        old_texts=old_texts,
        new_texts=new_texts,
        changed_files=changed_files,
        options={"three_way": data["three_way"], "fuzz": data["fuzz"]},
    )
    dirs = [project.state_dir / REPORTS_DIR]
    if data.get("report_dir"):
        dirs.append(Path(data["report_dir"]))
    paths = report_mod.write(report, dirs)
    stack = data.get("stack")
    if stack:
        # Rebuilt from the new files (build steps keep their place in the stack).
        from forkpatch.stack import Stack

        project.reload()
        Stack(project).rebuild_on(data["onto_commit"], stack.get("applied", []))
    _remove_worktree(project)
    store.delete_ref(HEAD_REF)
    journal.clear()
    project.reload()
    return RebaseResult(plan=plan, report=report, report_paths=paths, written=changed_files)


def _changed_since(project: Project, journal: Journal, data: Mapping[str, Any]) -> list[str]:
    out = []
    for rel in data.get("original", []):
        path = project.root / rel
        if not path.is_file() or path.read_bytes() != journal.original_bytes(rel):
            out.append(rel)
    return out


# --------------------------------------------------------------------------- the stack


def _stack_before(project: Project) -> dict[str, Any] | None:
    """The editable stack's position, checked to hold no unsaved work."""
    state = project.read_state() or {}
    path = state.get("worktree")
    if not path or not (Path(path) / ".git").exists():
        return None
    from forkpatch.stack import Stack

    stack = Stack(project)
    if state.get("editing"):
        raise StateError(
            f"patch '{state['editing'].get('patch')}' is being edited in {path}",
            tip="run `forkpatch refresh` first",
        )
    wt = stack.wt()
    stack.require_clean(wt, "rebasing")
    applied = stack.applied(wt)
    stack._require_refreshed(wt, applied)
    return {
        "path": path,
        "head": stack.head(wt),
        "base": stack.base_commit(),
        "applied": [a.name for a in applied],
    }


def _move_stack(project: Project, head: str, base: str) -> None:
    from forkpatch.stack import BRANCH, Stack

    state = project.read_state() or {}
    path = state.get("worktree")
    if not path or not (Path(path) / ".git").exists():
        return
    stack = Stack(project)
    wt = stack.wt()
    if stack.head(wt) != head:
        wt.run("checkout", "-q", "-f", "-B", BRANCH, head)
        wt.run("clean", "-q", "-fd")
    if state.get("base") != base:
        state["base"] = base
        project.write_state(state)


__all__ = [
    "Journal",
    "Outcome",
    "Plan",
    "RebaseOptions",
    "RebaseResult",
    "abort",
    "check",
    "continue_",
    "pending_hint",
    "rebase",
    "refuse_during_rebase",
    "skip",
]


# --------------------------------------------------------------------------- demo


def demo_stage(ctx: Any) -> None:
    """`forkpatch demo`: rebase the example series onto v1.3.0 and show the report."""
    from forkpatch import report as report_mod

    project = Project(ctx.project_dir)
    with log.step("forkpatch check --onto v1.3.0 (dry run)"):
        plan = check(project, RebaseOptions(onto="v1.3.0"))
    with log.step("forkpatch rebase --onto v1.3.0"):
        result = rebase(project, RebaseOptions(onto="v1.3.0"))
    log.info(report_mod.markdown(result.report))
    for p in result.report_paths:
        log.info(f"    report: {p}")
    ctx.summary["rebase"] = {
        "onto": result.plan.onto,
        "check": {o.name: o.status for o in plan.outcomes},
        "status": {o.name: o.status for o in result.plan.outcomes},
        "changed_files": result.written,
        "report": [str(p) for p in result.report_paths],
    }
