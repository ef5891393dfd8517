"""The classification of a series on a new base: one :class:`~forkpatch.rebase.plan.Outcome`
per patch, in a :class:`~forkpatch.rebase.plan.Plan`.

Everything here happens in memory: :class:`Classifier` applies
the series on the new base with :class:`forkpatch.engine.SeriesApplier` (exact,
then a 3-way merge against the patch's own images on the old base), recognises
patches that are already upstream (:mod:`forkpatch.rebase.upstream`) and, past
a conflict, goes on forecasting the rest of the series. :func:`classify` and
:func:`check` are the public entry points. Only the rebase asks the classifier to
write commits (objects in the private store; no ref moves, no files); a rebase
resumed after a stop makes its classifier again from its journal
(:meth:`Classifier.resume`: the plan so far, the options, the memo).

The forecast: a conflict does not end the classification. The patches
above it are classified on the tree *without* the conflicting patch (as if it
were skipped) and, for those that share files with it, also on the tree *with*
it, conflict markers and all (as if it were merged and the markers kept). A
patch that touches none of the files of the conflicting patches below it (nor of
patches that do) is *independent*: its outcome cannot depend on how they are
resolved.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

from forkpatch import log
from forkpatch.engine import Item, SeriesApplier, TreeFiles, TreeState
from forkpatch.git import FileChange, ObjectReader, commit_date
from forkpatch.kinds import DROPPED_STATUSES
from forkpatch.patchfile import PatchFile
from forkpatch.rebase.plan import (
    ClassifierMemo,
    Forecast,
    Outcome,
    Plan,
    RebaseOptions,
    Setup,
    Target,
    entries_of,
    names_of,
    paths_of,
    relation_note,
    relation_of,
)
from forkpatch.rebase.upstream import ReferenceChecker, UpstreamIndex
from forkpatch.results import PatchResult
from forkpatch.trailer import commit_message

if TYPE_CHECKING:
    from forkpatch.forkrepo import ForkRepo
    from forkpatch.project import Project

#: How many added files git's merges compare a moved file with (merge.renameLimit).
_MERGE_RENAME_LIMIT = 7000


# --------------------------------------------------------------------------- merge bases


#: A patch's pre/post images on the old base: path -> (before, after).
Images = dict[str, tuple[bytes | None, bytes | None]]


class MergeBases(dict[str, Images]):
    """Each patch's pre/post images on the old base, computed on first use.

    The 3-way merge base is only needed when a hunk does not apply, so a series
    that applies cleanly never pays for a run on the old base. When one patch
    needs it, only the patches that can change its files are replayed: walking
    back from it, every patch touching a file of interest (whose other files then
    become of interest too, for renames and patches that fail as a whole). When
    those replays add up to more than the series, the rest is done in one full pass.
    Which files a patch touches comes from ``known_paths`` when given (a resumed
    rebase has them from its first run), so that finding the replays parses nothing.
    """

    def __init__(self, classifier: Classifier) -> None:
        super().__init__()
        self._owner = classifier
        self._git, self._base = classifier.git, classifier.base_commit
        self._items = classifier.items
        self.used = False  # something was computed (see broken)
        self._full = False
        self._tried: set[str] = set()
        self._index = {name: i for i, name in enumerate(names_of(self._items))}
        self._replayed = 0
        self._files: TreeFiles | None = None  # the old base's tree, read as needed
        self.known_paths: dict[str, set[str]] = {}
        self.known_images: dict[str, dict[str, tuple[str | None, str | None]]] = {}
        self.broken: list[str] = []  # patches that do not apply to their own base

    def put(self, name: str, images: dict[str, tuple[bytes | None, bytes | None]]) -> None:
        """Set ``name``'s images without computing anything."""
        dict.__setitem__(self, name, images)

    def names(self) -> list[str]:
        """The patches whose images were computed (or loaded) so far."""
        return list(dict.keys(self))

    def computed(self, name: str) -> dict[str, tuple[bytes | None, bytes | None]] | None:
        """``name``'s images if they were computed (computes nothing)."""
        got = dict.get(self, name)
        return got if isinstance(got, dict) else None

    def store(self, names: Iterable[str]) -> dict[str, dict[str, tuple[str | None, str | None]]]:
        """Write the computed images of ``names`` into the store as blobs (one fast-import);
        returns name -> path -> (old blob id, new blob id), for :attr:`known_images`."""
        wanted = {n: imgs for n in names if (imgs := self.computed(n))}
        if not wanted:
            return {}
        fi = self._git.fast_import()
        marks = {
            (n, path): tuple(None if data is None else fi.blob(data) for data in pair)
            for n, imgs in wanted.items()
            for path, pair in imgs.items()
        }
        ids = fi.finish()
        out: dict[str, dict[str, tuple[str | None, str | None]]] = {}
        for (n, path), (old, new) in marks.items():
            out.setdefault(n, {})[path] = (
                None if old is None else ids[old],
                None if new is None else ids[new],
            )
        return out

    def _record(self, items: Sequence[Item]) -> None:
        """Apply ``items`` on the old base, in order, without stopping at a conflict,
        reusing the base's tree as read so far and the classifier's object reader."""
        self.used = True
        if self._files is None:
            self._files = TreeFiles(self._git, self._base)
        applier = SeriesApplier(self._git, self._base)
        with self._owner.reading() as reader:
            state = TreeState(self._git, reader, self._base, files=self._files)
            state.prefetch(items)
            for item in items:
                r, _changes = applier.apply_patch(state, item)
                if r.images and not dict.__contains__(self, r.name):
                    dict.__setitem__(self, r.name, r.images)
                if r.status == "conflict" and r.name not in self.broken:
                    self.broken.append(r.name)

    def _fill(self, key: object) -> None:
        if self._full or dict.__contains__(self, key) or key in self._tried:
            return
        if isinstance(key, str) and key in self.known_images:
            # Images an earlier run stored as blobs: read them, replay nothing.
            with self._owner.reading() as reader:
                images = {
                    path: (
                        None if old is None else reader.blob(old),
                        None if new is None else reader.blob(new),
                    )
                    for path, (old, new) in self.known_images[key].items()
                }
            dict.__setitem__(self, key, images)
            return
        index = self._index.get(key) if isinstance(key, str) else None
        if index is None or self._replayed > len(self._items):
            self._full = True
            self._record(self._items)
            return
        self._tried.add(str(key))
        by_index = {i: n for n, i in self._index.items()}
        wanted = self._paths_at(index, by_index)
        chosen = [index]
        for i in range(index - 1, -1, -1):
            paths = self._paths_at(i, by_index)
            if paths & wanted:
                wanted |= paths
                chosen.append(i)
        chosen.reverse()
        self._replayed += len(chosen)
        self._record([self._items[i] for i in chosen])

    def _paths_at(self, index: int, by_index: Mapping[int, str]) -> set[str]:
        known = self.known_paths.get(by_index[index])
        return known if known is not None else paths_of(self._items[index])

    def __bool__(self) -> bool:
        return True  # SeriesApplier keeps ``merge_bases or {}``: never look empty

    def get(self, key: str, default: Images | None = None) -> Images | None:  # type: ignore[override]
        # dict.get's overloads narrowed to what SeriesApplier asks: a patch's images.
        self._fill(key)
        return dict.get(self, key, default)

    def __getitem__(self, key: str) -> Images:
        self._fill(key)
        return dict.__getitem__(self, key)

    def __contains__(self, key: object) -> bool:
        self._fill(key)
        return dict.__contains__(self, key)


# --------------------------------------------------------------------------- the classifier


@dataclass
class Walk:
    """What :meth:`Classifier.walk` found: outcomes in order, the head written below the
    first conflict, the first conflict's index in the walked items (None: none) and
    that patch brought in as far as it goes (:meth:`Classifier.conflict_changes`)."""

    outcomes: list[Outcome] = field(default_factory=list)
    head: str = ""
    conflict: int | None = None
    stop: tuple[list[FileChange], list[str]] | None = None


@dataclass(frozen=True)
class _Hypotheses:
    """The two trees of the forecast above a conflict: without the conflicting patches
    (``skipped``) and with them merged, markers kept (``marked``), plus which files the
    conflicts reach and through which conflicting patches."""

    skipped: TreeState
    marked: TreeState
    first: str
    reach: dict[str, set[str]] = field(default_factory=dict)  # path -> conflicting patches

    def depends(self, item: Item) -> tuple[str, ...]:
        names: set[str] = set()
        for p in paths_of(item):
            names |= self.reach.get(p, set())
        return tuple(sorted(names))

    def spread(self, item: Item, names: Iterable[str]) -> None:
        for p in paths_of(item):
            self.reach.setdefault(p, set()).update(names)


class Resumable(Protocol):
    """Where a resumed classification starts from: a rebase's journal state."""

    @property
    def plan(self) -> Plan: ...

    @property
    def options(self) -> RebaseOptions: ...

    @property
    def memo(self) -> ClassifierMemo: ...


class Classifier:
    """Applies (the rest of) a series on the new base, classifying each patch.

    One ``git cat-file --batch`` serves the whole classifier while a walk runs
    (the merge-base replays on the old base included).
    """

    def __init__(
        self, fork: ForkRepo, setup: Setup, items: Sequence[Item], options: RebaseOptions
    ) -> None:
        git = fork.store
        self.git = git
        self.target = setup.target
        self.base_commit = setup.base.commit
        self.items = items
        self.three_way, self.fuzz = options.three_way, options.fuzz
        self.merge_bases = MergeBases(self)
        self.upstream = UpstreamIndex(git, self.base_commit, self.target.commit, items)
        self.references = ReferenceChecker(git, self.target.name, self.target.commit)
        self.references.fork = fork  # for the shallow-clone check before walking its history
        self._renames: dict[str, str] | None = None
        self._added: dict[str, bool] | None = None  # path -> added (True) or deleted
        self._searched: set[str] = set()
        self._applier: SeriesApplier | None = None
        self._reader: ObjectReader | None = None
        self._date: str | None = None

    @classmethod
    def resume(cls, fork: ForkRepo, items: Sequence[Item], saved: Resumable) -> Classifier:
        """The classifier of a rebase resumed from its journal, with what its first run
        computed already (:class:`~forkpatch.rebase.plan.ClassifierMemo`): the commits'
        date, the patch-id matches, the files upstream moved, the merge bases stored, the
        references resolved, and the files each patch touches (from the plan's outcomes:
        finding the merge-base replays parses no patch). Nothing of that is computed
        again, and the patches are parsed only when used."""
        plan, memo = saved.plan, saved.memo
        classifier = cls(fork, plan.setup, items, saved.options)
        classifier._date = memo.date
        bases = classifier.merge_bases
        bases.known_paths = {o.name: set(o.files) for o in plan.outcomes}
        for name, path, old, new in memo.images:
            bases.known_images.setdefault(name, {})[path] = (old, new)
        if memo.upstream is not None:
            matches: dict[str, tuple[str, str] | None] = dict.fromkeys(names_of(items))
            matches.update({n: (c, s) for n, c, s in memo.upstream})
            classifier.upstream.preload(matches)
        if memo.renames is not None:
            classifier._renames = dict(memo.renames)
        if memo.references is not None:
            classifier.references.preload(memo.references)
        return classifier

    def memo(self, *, images: bool) -> ClassifierMemo:
        """What this classifier found, for the journal; with ``images`` the merge bases
        computed so far are written into the store as blobs (for the stops to come)."""
        stored = self.merge_bases.store(self.merge_bases.names()) if images else {}
        return ClassifierMemo(
            date=self.date,
            upstream=tuple((n, c, e) for n, (c, e) in self.upstream.matches().items()),
            renames=None if self._renames is None else tuple(self._renames.items()),
            images=tuple(
                (name, path, old, new)
                for name, paths in stored.items()
                for path, (old, new) in paths.items()
            ),
            references=self.references.known(),
        )

    @property
    def date(self) -> str:
        """The date of the commits made on the target (the target's own: reproducible ids)."""
        if self._date is None:
            # Through the open object reader when there is one: no process of its own.
            self._date = commit_date(self.git, self.target.commit, self._reader)
        return self._date

    @contextlib.contextmanager
    def reading(self) -> Iterator[ObjectReader]:
        """The classifier's object reader: the open one, or one for this block."""
        if self._reader is not None:
            yield self._reader
            return
        with self.git.reader() as reader:
            self._reader = reader
            try:
                yield reader
            finally:
                self._reader = None

    @property
    def applier(self) -> SeriesApplier:
        if self._applier is None:
            self._applier = SeriesApplier(
                self.git,
                self.target.commit,
                max_fuzz=self.fuzz,
                three_way=self.three_way,
                detect_upstream=True,
                merge_bases=self.merge_bases,
                labels=(self.target.name, "patch"),
            )
        return self._applier

    # -- files upstream moved

    def renames(self) -> dict[str, str]:
        if self._renames is None:
            self._renames = {}
            if self.base_commit != self.target.commit:
                raw = self.git.run(
                    "diff-tree",
                    "-r",
                    "-M",
                    "--name-status",
                    "-z",
                    self.base_commit,
                    self.target.commit,
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

    def _search_rename(self, src: str) -> None:
        """Where upstream moved ``src``, when the whole-tree rename detection gave up.

        ``git diff -M`` skips inexact renames past ``diff.renameLimit`` (1,000 files):
        between distant releases (or two lines of history) a moved file is then a
        deletion and an addition. git's merges look further (merge-ort: the files
        with the same name first, then up to ``merge.renameLimit``, 7,000), so
        ``rebase`` and ``am -3`` follow the file. So does this: the files added
        between the base and the target with ``src``'s name, else all of them (up to
        that limit), are compared with ``src`` alone. Found or not, the answer is
        kept (a resumed rebase reads it from its journal)."""
        renames = self.renames()
        if self._added is None:
            raw = self.git.run(
                "diff-tree",
                "-r",
                "--no-renames",
                "--diff-filter=AD",
                "--name-status",
                "-z",
                self.base_commit,
                self.target.commit,
            ).stdout.split(b"\0")
            pairs = zip(raw[0::2], raw[1::2], strict=False)
            self._added = {}
            for status, path in pairs:
                name = path.decode("utf-8", "surrogateescape")
                self._added[name] = status == b"A"
        if self._added.get(src) is not False or src in self._searched:
            return  # not deleted between the two (or already asked)
        self._searched.add(src)
        added = [p for p, is_new in self._added.items() if is_new and p not in renames.values()]
        base = src.rsplit("/", 1)[-1]
        same_name = [p for p in added if p.rsplit("/", 1)[-1] == base]
        for candidates in (same_name, added if len(added) <= _MERGE_RENAME_LIMIT else []):
            if not candidates:
                continue
            raw = self.git.run(
                "diff-tree",
                "-r",
                "-M",
                "-l0",
                "--diff-filter=R",
                "--name-status",
                "-z",
                self.base_commit,
                self.target.commit,
                "--",
                src,
                *candidates,
            ).stdout.split(b"\0")
            if len(raw) >= 3 and raw[0].startswith(b"R"):
                renames[src] = raw[2].decode("utf-8", "surrogateescape")
                return

    def follow_renames(self, state: TreeState, item: Item) -> tuple[Item, dict[str, str]]:
        """Point a patch's file sections at the names upstream moved their files to."""
        patch = item.patch
        if patch is None:
            return item, {}
        # Existence only: said without reading any blob.
        missing = [
            fp for fp in patch.files if fp.old_path is not None and not state.has(fp.old_path)
        ]
        if not missing:
            return item, {}
        renames = self.renames()
        for fp in missing:
            if fp.old_path not in renames:
                self._search_rename(fp.old_path or "")
        moved: dict[str, str] = {}
        files = []
        for fp in patch.files:
            src = fp.old_path
            if fp in missing and src in renames and state.has(renames[src]):
                dst = renames[src]
                moved[src] = dst
                new_path = dst if fp.new_path == src else fp.new_path
                files.append(replace(fp, old_path=dst, new_path=new_path))
            else:
                files.append(fp)
        if not moved:
            return item, {}
        images = dict(self.merge_bases.get(item.entry.name) or {})
        for src, dst in moved.items():
            if src in images:
                images[dst] = images[src]
        self.merge_bases.put(item.entry.name, images)
        return Item(item.entry, replace(patch, files=tuple(files))), moved

    # -- one patch

    def classify(
        self, state: TreeState, item: Item
    ) -> tuple[PatchResult, list[FileChange], dict[str, str]]:
        """One patch on ``state``: (result, its file changes, files followed to a new name).

        A patch whose patch-id matches an upstream commit in base..onto (not reverted
        since), or whose own upstream reference names a commit of the target that
        makes the same change, is upstreamed without being applied, like ``git
        rebase`` skips cherry-picks; otherwise the engine applies it (exact, then
        3-way) and itself recognises content already present or a clean reverse-apply.
        """
        patch = item.patch
        if patch is not None and patch.files:
            evidence = self.upstream.evidence(item.entry.name) or self.references.evidence(item)
            if evidence is not None:
                return _upstreamed(item.entry.name, patch, evidence), [], {}
        item, moved = self.follow_renames(state, item)
        result, changes = self.applier.apply_patch(state, item)
        if result.status == "conflict" and patch is not None and patch.files:
            declared = self.references.declared(Item(item.entry, patch))
            if declared is not None:
                return _upstreamed(item.entry.name, patch, declared), [], {}
        if moved:
            followed = tuple(
                f"{src}: upstream moved it to {dst}; the patch follows it"
                for src, dst in moved.items()
            )
            result = replace(result, detail=(*result.detail, *followed))
        return result, changes, moved

    def outcome(self, state: TreeState, item: Item) -> tuple[Outcome, list[FileChange]]:
        result, changes, moved = self.classify(state, item)
        outcome = Outcome.of(result, moved)
        if outcome.status == "conflict":
            replaced = self.references.probable(item) or self.upstream.probable(item.entry.name)
            if replaced is not None:
                outcome = replace(outcome, replaced_by=replaced)
        return outcome, changes

    def conflict_changes(self, state: TreeState, item: Item) -> tuple[list[FileChange], list[str]]:
        """The conflicting patch brought in as far as it goes: the files that apply (or
        merge) as changes, the files whose 3-way merge conflicts with their markers.

        Returns (changes, paths that have no result at all: no merge base, or the file
        is gone). Nothing is written; ``state`` is unchanged.
        """
        assert item.patch is not None
        item, _moved = self.follow_renames(state, item)
        assert item.patch is not None
        three_way = SeriesApplier(
            self.git,
            self.target.commit,
            max_fuzz=self.fuzz,
            three_way=True,
            merge_bases=self.merge_bases,
            labels=(self.target.name, "patch"),
        )
        scratch = state.copy()
        changes: list[FileChange] = []
        rejected: list[str] = []
        for fp in item.patch.files:
            single = Item(item.entry, replace(item.patch, files=(fp,)))
            result, applied = three_way.apply_patch(scratch, single)
            if result.status != "conflict":
                changes.extend(applied)
                continue
            for c in result.conflicts:
                if c.merged is None:
                    rejected.append(c.path)
                    continue
                got = scratch.get(c.path)
                mode = got[0] if got is not None and got[0] != "120000" else "100644"
                scratch.set(c.path, mode, c.merged)
                changes.append(FileChange(c.path, mode=mode, data=c.merged))
        return changes, rejected

    # -- a run

    def walk(self, start: int, parent: str, *, write: bool, forecast: bool = True) -> Walk:
        """Classify ``items[start:]`` in order on ``parent``; with ``write`` one commit each
        (objects only) up to the first conflict. Past it, the rest is forecast, or (without
        ``forecast``) not classified at all: the walk ends there."""
        walk = Walk(head=parent)
        marks: list[tuple[int, str]] = []
        total = len(self.items)
        self.references.prefetch(entries_of(self.items)[start:])
        with self.reading() as reader:
            state = TreeState(self.git, reader, parent)
            fi = self.git.fast_import(keep_pack=True) if write else None
            date = self.date if write else ""
            tip = parent
            hypo: _Hypotheses | None = None
            fetched, window = start, 8
            for n in range(start, total):
                if n >= fetched:
                    # Blobs in growing batches: a walk that stops early reads little.
                    state.prefetch(self.items[fetched : fetched + window])
                    fetched, window = fetched + window, min(window * 2, 512)
                item = self.items[n]
                if hypo is not None:
                    outcome = self._forecast(hypo, item)
                else:
                    outcome, changes = self.outcome(state, item)
                    if outcome.status == "conflict":
                        walk.conflict = n - start
                        walk.stop = self.conflict_changes(state, item)
                        if forecast:
                            hypo = self._split(state, item, walk.stop[0])
                    elif (
                        fi is not None
                        and item.patch is not None
                        and outcome.status not in DROPPED_STATUSES
                    ):
                        message = commit_message(item.entry, item.patch.header)
                        tip = fi.commit(parent=tip, changes=changes, message=message, date=date)
                        marks.append((len(walk.outcomes), tip))
                walk.outcomes.append(outcome)
                _progress(n + 1, total, outcome)
                if walk.conflict is not None and not forecast:
                    break
            if fi is not None:
                ids = fi.finish()
                for i, mark in marks:
                    walk.outcomes[i] = replace(walk.outcomes[i], commit=ids[mark])
                if marks:
                    walk.head = ids[marks[-1][1]]
        return walk

    def _split(self, state: TreeState, item: Item, changes: list[FileChange]) -> _Hypotheses:
        """Start the forecast at the conflicting ``item``: ``state`` goes on without it."""
        marked = state.copy()
        _apply_changes(marked, changes)
        hypo = _Hypotheses(skipped=state, marked=marked, first=item.entry.name)
        hypo.spread(item, [item.entry.name])
        return hypo

    def _bring_in(self, state: TreeState, item: Item) -> None:
        changes, _rejected = self.conflict_changes(state, item)
        _apply_changes(state, changes)

    def _forecast(self, hypo: _Hypotheses, item: Item) -> Outcome:
        depends = hypo.depends(item)
        outcome, changes = self.outcome(hypo.skipped, item)
        if not depends:
            # Its files are the same in both trees: so is its result.
            _apply_changes(hypo.marked, changes)
            if outcome.status == "conflict":
                self._bring_in(hypo.marked, item)
                hypo.spread(item, [item.entry.name])
            return replace(outcome, forecast=Forecast(after=hypo.first))
        merged, merged_changes = self.outcome(hypo.marked, item)
        _apply_changes(hypo.marked, merged_changes)
        names = set(depends)
        if merged.status == "conflict":
            self._bring_in(hypo.marked, item)
        if outcome.status == "conflict" or merged.status == "conflict":
            names.add(item.entry.name)
        hypo.spread(item, names)
        return replace(
            outcome,
            forecast=Forecast(after=hypo.first, depends_on=depends, if_merged=merged.status),
        )


def _apply_changes(state: TreeState, changes: Iterable[FileChange]) -> None:
    for ch in changes:
        if ch.is_delete:
            state.delete(ch.path)
        else:
            state.set(ch.path, ch.mode or "100644", ch.data or b"")


def _progress(n: int, total: int, outcome: Outcome) -> None:
    extra = ""
    if outcome.status == "upstreamed" and outcome.evidence:
        extra = f" ({outcome.evidence})"
    elif outcome.status == "conflict" and outcome.conflicts:
        extra = f" ({', '.join(c.path for c in outcome.conflicts)})"
    if outcome.forecast is not None:
        fc = outcome.forecast
        extra += (
            " [forecast: independent]"
            if fc.independent
            else f" [forecast: depends on {', '.join(fc.depends_on)}; {fc.if_merged} if merged]"
        )
    log.info(f"[{n}/{total}] {outcome.name} ... {outcome.status}{extra}")


def warn_broken(classifier: Classifier) -> None:
    if classifier.merge_bases.used and classifier.merge_bases.broken:
        log.warn(
            "these patches do not apply to the series' own base, so they have no 3-way "
            "merge base: " + ", ".join(classifier.merge_bases.broken)
        )


# --------------------------------------------------------------------------- entry points


def _setup(project: Project, target: Target) -> Setup:
    base = project.series.base
    fork = project.fork()
    fork.require_commit(base.commit, f"series.yaml's base ({base.describe()})")
    fork.require_history(target.commit, base.commit, why=f"moving the series onto {target.name}")
    relation = relation_of(fork.store, base.commit, target.commit)
    note = relation_note(relation, base.label, target.name)
    if note:
        log.warn(note)
    return Setup(base, target, relation)


def check_target(project: Project, onto: str) -> Setup:
    """The series' base and ``onto`` (a tag, a branch, a remote branch or a commit id),
    fetched into the store when missing. A target that is not a tag is named once, with
    what it resolved to."""
    from forkpatch.baseversion import base_of_target

    fork = project.fork()
    resolved = fork.resolve_ref(onto)
    record = base_of_target(fork, resolved)
    described = "" if resolved.kind == "tag" else resolved.describe()
    if described:
        tagged = f", tagged {record.tag}" if record.tag else ", which no tag names"
        log.info(f"--onto {onto}: {described}{tagged}")
    # A commit id is named in full: it is what the series is on.
    name = resolved.commit if resolved.kind == "commit" else resolved.name
    return _setup(project, Target(name, resolved.commit, described, record))


def classifier_for(project: Project, setup: Setup, options: RebaseOptions) -> Classifier:
    """The classifier of the project's series for a new start (a resumed rebase makes
    its own from its journal: :meth:`Classifier.resume`)."""
    from forkpatch.rebase.upstream import PATCH_ID_CACHE, PatchIdCache

    classifier = Classifier(project.fork(), setup, project.items(), options)
    classifier.upstream.cache = PatchIdCache(project.state_dir / PATCH_ID_CACHE, classifier.git)
    return classifier


def _plan(setup: Setup, walk: Walk) -> Plan:
    return Plan(setup, tuple(walk.outcomes), walk.head)


def classify(project: Project, target: Target, *, three_way: bool = True, fuzz: int = 0) -> Plan:
    """Classify every patch of the project's series on ``target`` (a tag or any commit of
    the fork, e.g. a branch head), forecasting past conflicts. In memory: nothing is
    written, not even objects."""
    setup = _setup(project, target)
    options = RebaseOptions(onto=target.name, three_way=three_way, fuzz=fuzz)
    classifier = classifier_for(project, setup, options)
    walk = classifier.walk(0, target.commit, write=False)
    warn_broken(classifier)
    return _plan(setup, walk)


def check(project: Project, options: RebaseOptions) -> Plan:
    """``forkpatch check --onto TAG``: how every patch fares on the tag. Changes nothing."""
    setup = check_target(project, options.onto)
    classifier = classifier_for(project, setup, options)
    walk = classifier.walk(0, setup.target.commit, write=False)
    warn_broken(classifier)
    return _plan(setup, walk)


def _upstreamed(name: str, patch: PatchFile, evidence: str) -> PatchResult:
    """The result of a patch the target already carries, on ``evidence``."""
    return PatchResult(
        name=name,
        status="upstreamed",
        files=tuple(patch.paths),
        added=patch.added,
        removed=patch.removed,
        evidence=evidence,
    )
