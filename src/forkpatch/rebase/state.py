"""Where a rebase stands: one frozen :class:`RebaseState`, and its :class:`Journal`.

The journal lives in ``.forkpatch/rebase/``:

* ``state.json``: the :class:`RebaseState`, written atomically after every step: the
  :class:`~forkpatch.rebase.plan.Plan` so far (the base, the target, every patch's
  outcome, the head built on the new base), the
  :class:`~forkpatch.rebase.plan.RebaseOptions`, where the rebase stands (phase,
  the patch it is stopped at, the editing stack, the saved files) and the
  classifier's :class:`~forkpatch.rebase.plan.ClassifierMemo`. It is the commit
  point of the rebase: while it exists, patches/ and series.yaml belong to the
  rebase. Version 3; version 2 (the same, with the plan's, the options' and the
  memo's fields flat in the state) is still read, and the next write is version 3.
* ``original.json``: byte copies of series.yaml and every file in patches/ as
  they were before the rebase, for ``--abort`` and the report.

Both are state files of :mod:`forkpatch.fsutil` (kind, version and a sha256 of
their data), and nothing in them is trusted before it validates: every path is a
plain relative path inside the project (series.yaml or under patches/, no
``..``, no symbolic link on the way), every commit is a full object id, every
patch name is one of the saved series' names in order, and state.json names
the checksum of the original.json it belongs to. Anything else is refused with
the file's name, before a single file is touched.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from forkpatch.engine import Item
from forkpatch.errors import StateError
from forkpatch.fsutil import (
    atomic_write,
    check_inside,
    commit_files,
    dump_state,
    parse_state_versions,
    read_regular,
)
from forkpatch.kinds import OUTCOME_STATUSES, REBASE_PHASES, RELATIONS, RebasePhase
from forkpatch.patchfile import PatchFile, parse_patch
from forkpatch.project import COMMIT_JOURNAL, REBASE_JOURNAL, Project
from forkpatch.rebase.plan import (
    ClassifierMemo,
    Forecast,
    Items,
    Outcome,
    Plan,
    RebaseOptions,
    Setup,
    Target,
)
from forkpatch.results import FileConflict
from forkpatch.series import NAME_RE, PATCHES_DIR, SERIES_FILE, BaseRef, Series, parse_series
from forkpatch.stackstate import StackPosition
from forkpatch.typedreader import TypedReader

JOURNAL_DIR = REBASE_JOURNAL.split("/")[0]
JOURNAL_FILE = REBASE_JOURNAL.split("/", 1)[1]
ORIGINAL_FILE = "original.json"
STOP_FILE = "worktree-stop"  # which stop the conflict work tree holds (see Journal.mark_stop)
KIND = "rebase"
ORIGINAL_KIND = "rebase-original"
#: state.json's version: 3 keeps the plan, the options and the classifier's memo as they
#: are; 2 (still read) had their fields copied flat into the state.
VERSION = 3
READ_VERSIONS = (2, VERSION)
ORIGINAL_VERSION = 2  # original.json's: the same in both
#: A detail line of an outcome: git's own message, kept as long as it was.
_DETAIL_LIMIT = 1 << 20
_OID = re.compile(r"\A[0-9a-f]{40}\Z")


@dataclass(frozen=True)
class RebaseState:
    """Everything a resumed rebase needs, validated on load (see the module docstring):
    the plan so far, the options it is made with, where the rebase stands, and what the
    classifier found once."""

    plan: Plan  # its head: the last commit built on the new base
    options: RebaseOptions  # report_dir None: the command's own
    memo: ClassifierMemo
    phase: RebasePhase  # conflict: stopped at ``conflict``; writing: every patch has its outcome
    conflict: str | None = None  # the patch it is stopped at (the plan's first conflict)
    stack: StackPosition | None = None
    original: tuple[str, ...] = ()  # project-relative paths saved in original.json
    original_sha256: str = ""

    @classmethod
    def of(
        cls, plan: Plan, options: RebaseOptions, memo: ClassifierMemo, stack: StackPosition | None
    ) -> RebaseState:
        """A rebase's first state: stopped at the plan's first conflict, or writing."""
        return cls(plan, replace(options, report_dir=None), memo, "writing", stack=stack).with_(
            plan=plan
        )

    @property
    def conflict_index(self) -> int:
        return next(i for i, o in enumerate(self.plan.outcomes) if o.name == self.conflict)

    def with_(self, *, plan: Plan | None = None, memo: ClassifierMemo | None = None) -> RebaseState:
        """The state with a new plan (where the rebase stands follows it: stopped at its
        first conflict, or writing) and/or a new memo."""
        plan = plan or self.plan
        first = plan.first_conflict
        return replace(
            self,
            plan=plan,
            memo=memo or self.memo,
            phase="writing" if first is None else "conflict",
            conflict=None if first is None else first.name,
        )

    def to_data(self) -> dict[str, object]:
        plan, base, target, memo = self.plan, self.plan.setup.base, self.plan.target, self.memo
        return {
            "phase": self.phase,
            "conflict": self.conflict,
            "stack": None
            if self.stack is None
            else {
                "head": self.stack.head,
                "base": self.stack.base,
                "applied": list(self.stack.applied),
            },
            "original": list(self.original),
            "original_sha256": self.original_sha256,
            "plan": {
                "base": {"tag": base.tag, "commit": base.commit, "branch": base.branch},
                "target": {
                    "name": target.name,
                    "commit": target.commit,
                    "resolved": target.resolved,
                    "tag": target.base.tag,
                    "branch": target.base.branch,
                },
                "relation": plan.relation,
                "outcomes": [o.to_json() for o in plan.outcomes],
                "head": plan.head,
            },
            "options": {
                "onto": self.options.onto,
                "three_way": self.options.three_way,
                "fuzz": self.options.fuzz,
            },
            "memo": {
                "date": memo.date,
                "upstream": None if memo.upstream is None else [list(u) for u in memo.upstream],
                "renames": None if memo.renames is None else [list(r) for r in memo.renames],
                "images": [list(i) for i in memo.images],
                "references": None
                if memo.references is None
                else [list(r) for r in memo.references],
            },
        }


# --------------------------------------------------------------------------- validation


class _Reader(TypedReader):
    """The journal's data, typed (:class:`TypedReader`), read into the rebase's state."""

    def __init__(self, path: Path) -> None:
        super().__init__(
            str(path),
            tip=f"this journal was not written by this forkpatch for this project; check "
            f"patches/ and series.yaml (`git status`), then move {path.parent} aside",
        )
        self.path = path

    def outcome(self, value: object, where: str) -> Outcome:
        d = self.mapping(value, where)
        name = self.text(d, "name", where)
        if not NAME_RE.match(name):
            raise self.fail(where, f"{name!r} is not a patch name")
        status = self.word(d, "status", OUTCOME_STATUSES, where)
        files = tuple(self.relpath(p, f"{where}.files") for p in self.items(d, "files", where))
        conflicts = []
        for j, c in enumerate(self.items(d, "conflicts", where) if "conflicts" in d else []):
            cw = f"{where}.conflicts[{j}]"
            cd = self.mapping(c, cw)
            hunks = tuple(
                h
                for h in self.items(cd, "hunks", cw)
                if isinstance(h, int) and not isinstance(h, bool)
            )
            if len(hunks) != len(self.items(cd, "hunks", cw)):
                raise self.fail(cw, "'hunks' must be numbers")
            line = cd.get("line")
            if line is not None and (not isinstance(line, int) or isinstance(line, bool)):
                raise self.fail(cw, "'line' must be a number")
            conflicts.append(
                FileConflict(
                    self.relpath(cd.get("path"), f"{cw}.path"),
                    self.text(cd, "reason", cw),
                    hunks,
                    line,
                )
            )
        moved = []
        raw_moved = self.mapping(d.get("moved", {}), f"{where}.moved")
        for src, dst in raw_moved.items():
            moved.append((self.relpath(src, f"{where}.moved"), self.relpath(dst, f"{where}.moved")))
        commit = self.oid(d, "commit", where) if d.get("commit") is not None else None
        forecast = None
        if d.get("forecast") is not None:
            fw = f"{where}.forecast"
            fd = self.mapping(d["forecast"], fw)
            forecast = Forecast(
                after=self.text(fd, "after", fw),
                depends_on=self.strings(fd, "depends_on", fw),
                if_merged=None
                if fd.get("if_merged") is None
                else self.word(fd, "if_merged", OUTCOME_STATUSES, fw),
            )
        return Outcome(
            name=name,
            status=status,
            files=files,
            evidence=self.maybe_text(d, "evidence", where),
            detail=self.strings(d, "detail", where, optional=True, limit=_DETAIL_LIMIT),
            conflicts=tuple(conflicts),
            commit=commit,
            moved=tuple(moved),
            forecast=forecast,
            replaced_by=self.maybe_text(d, "replaced_by", where),
        )

    def outcomes(self, d: Mapping[str, object], where: str) -> tuple[Outcome, ...]:
        return tuple(
            self.outcome(o, f"{where}[{i}]") for i, o in enumerate(self.items(d, "outcomes", where))
        )

    def state(self, version: int, d: Mapping[str, object]) -> RebaseState:
        """The state in ``version``'s shape (see :data:`READ_VERSIONS`)."""
        if version == 2:
            options, plan, memo = self.options(d, ""), self.plan_v2(d), self.memo(d, "")
        else:
            options = self.options(self.mapping(d.get("options"), "options"), "options.")
            plan = self.plan(self.mapping(d.get("plan"), "plan"))
            memo = self.memo(self.mapping(d.get("memo"), "memo"), "memo.")
        phase = self.word(d, "phase", REBASE_PHASES, "phase")
        conflict = self.maybe_text(d, "conflict", "conflict")
        if phase == "conflict" and not any(
            o.name == conflict and o.status == "conflict" for o in plan.outcomes
        ):
            raise self.fail("conflict", f"{conflict!r} is not a conflicting patch of the rebase")
        # Where the rebase stands follows from its plan (RebaseState.with_): stopped at the
        # first conflicting patch, or writing once none conflicts.
        first = plan.first_conflict
        if (phase, conflict) != (("writing", None) if first is None else ("conflict", first.name)):
            raise self.fail(
                "phase", f"{phase} at {conflict!r} does not follow from its patches' outcomes"
            )
        stack = None
        if d.get("stack") is not None:
            sd = self.mapping(d["stack"], "stack")
            stack = StackPosition(
                self.oid(sd, "head", "stack"),
                self.oid(sd, "base", "stack"),
                self.strings(sd, "applied", "stack"),
            )
        original = []
        for i, rel in enumerate(self.items(d, "original", "original")):
            original.append(self.saved_path(rel, f"original[{i}]"))
        return RebaseState(
            plan=plan,
            options=options,
            memo=memo,
            phase=phase,
            conflict=conflict,
            stack=stack,
            original=tuple(original),
            original_sha256=self.text(d, "original_sha256", "original_sha256"),
        )

    def plan(self, d: Mapping[str, object]) -> Plan:
        bd = self.mapping(d.get("base"), "plan.base")
        base = BaseRef(
            self.text(bd, "tag", "plan.base"),
            self.oid(bd, "commit", "plan.base"),
            self.text(bd, "branch", "plan.base"),
        )
        td = self.mapping(d.get("target"), "plan.target")
        commit = self.oid(td, "commit", "plan.target")
        target = Target(
            self.text(td, "name", "plan.target"),
            commit,
            self.text(td, "resolved", "plan.target"),
            BaseRef(
                self.text(td, "tag", "plan.target"), commit, self.text(td, "branch", "plan.target")
            ),
        )
        relation = self.word(d, "relation", RELATIONS, "plan.relation")
        return Plan(
            Setup(base, target, relation),
            self.outcomes(d, "plan.outcomes"),
            self.oid(d, "head", "plan.head"),
        )

    def plan_v2(self, d: Mapping[str, object]) -> Plan:
        """Version 2's fields of the plan, flat in the state."""
        onto = self.text(d, "onto", "onto")
        onto_commit = self.oid(d, "onto_commit", "onto_commit")
        onto_tag = self.maybe_text(d, "onto_tag", "onto_tag")
        if onto_tag is None:  # an older journal: its name was recorded as the tag
            tag = "" if onto_commit.startswith(onto.lower()) else onto
            record = BaseRef(tag, onto_commit)
        else:
            record = BaseRef(
                onto_tag, onto_commit, self.maybe_text(d, "onto_branch", "onto_branch") or ""
            )
        label = self.text(d, "base", "base")
        base_commit = self.oid(d, "base_commit", "base_commit")
        # The base was kept by its label: its tag, else its commit's first 12 digits.
        base = BaseRef("" if label == base_commit[:12] else label, base_commit)
        relation = self.word(d, "relation", RELATIONS, "relation")
        return Plan(
            Setup(base, Target(onto, onto_commit, record=record), relation),
            self.outcomes(d, "outcomes"),
            self.oid(d, "head", "head"),
        )

    def options(self, d: Mapping[str, object], at: str) -> RebaseOptions:
        """The options (``at``: where they are, "" for version 2's flat fields; version 2
        kept no --onto of its own: the target's name stands for it)."""
        fuzz = self.number(d, "fuzz", f"{at}fuzz")
        if not 0 <= fuzz <= 3:
            raise self.fail(f"{at}fuzz", f"{fuzz} is out of range")
        three_way = self.field(d, "three_way", bool, f"{at}three_way")
        onto = self.text(d, "onto", f"{at}onto")
        return RebaseOptions(onto=onto, three_way=bool(three_way), fuzz=fuzz)

    def memo(self, d: Mapping[str, object], at: str) -> ClassifierMemo:
        """The classifier's memo (``at``: where it is, "" for version 2's flat fields)."""
        upstream = None
        if d.get("upstream") is not None:
            upstream = []
            for i, u in enumerate(self.items(d, "upstream", f"{at}upstream")):
                where = f"{at}upstream[{i}]"
                if not (isinstance(u, list) and len(u) == 3 and all(isinstance(x, str) for x in u)):
                    raise self.fail(where, "expected [name, commit, subject]")
                if not _OID.match(u[1]):
                    raise self.fail(where, f"{u[1]!r} is not a commit id")
                upstream.append((u[0], u[1], u[2]))
        renames = None
        if d.get("renames") is not None:
            renames = []
            for i, r in enumerate(self.items(d, "renames", f"{at}renames")):
                where = f"{at}renames[{i}]"
                if not (isinstance(r, list) and len(r) == 2):
                    raise self.fail(where, "expected [old path, new path]")
                renames.append((self.relpath(r[0], where), self.relpath(r[1], where)))
        images = []
        for i, img in enumerate(self.items(d, "images", f"{at}images")):
            where = f"{at}images[{i}]"
            if not (isinstance(img, list) and len(img) == 4):
                raise self.fail(where, "expected [patch, path, blob, blob]")
            if not isinstance(img[0], str) or not NAME_RE.match(img[0]):
                raise self.fail(where, f"{img[0]!r} is not a patch name")
            for oid in img[2:]:
                if oid is not None and not (isinstance(oid, str) and _OID.match(oid)):
                    raise self.fail(where, f"{oid!r} is not an object id")
            images.append((img[0], self.relpath(img[1], where), img[2], img[3]))
        date = self.text(d, "date", f"{at}date")
        if not re.fullmatch(r"@\d{1,12} [+-]\d{4}", date):
            raise self.fail(f"{at}date", f"{date!r} is not a commit date")
        return ClassifierMemo(
            date=date,
            upstream=None if upstream is None else tuple(upstream),
            renames=None if renames is None else tuple(renames),
            images=tuple(images),
            references=self.references(d, at),
        )

    def references(
        self, d: Mapping[str, object], at: str
    ) -> tuple[tuple[str, str | None, str | None], ...] | None:
        if d.get("references") is None:
            return None
        out: list[tuple[str, str | None, str | None]] = []
        for i, r in enumerate(self.items(d, "references", f"{at}references")):
            where = f"{at}references[{i}]"
            if not (isinstance(r, list) and len(r) == 3 and isinstance(r[0], str) and r[0]):
                raise self.fail(where, "expected [reference, commit, subject]")
            if r[1] is None and r[2] is None:
                out.append((r[0], None, None))
            elif isinstance(r[1], str) and _OID.match(r[1]) and isinstance(r[2], str):
                out.append((r[0], r[1], r[2]))
            else:
                raise self.fail(where, "expected a commit id and its subject, or two nulls")
        return tuple(out)

    def saved_path(self, value: object, where: str) -> str:
        """A path the journal saved: series.yaml or a file under patches/."""
        rel = self.relpath(value, where)
        if rel != SERIES_FILE and not rel.startswith(f"{PATCHES_DIR}/"):
            raise self.fail(where, f"{rel!r} is neither {SERIES_FILE} nor under {PATCHES_DIR}/")
        return rel


# --------------------------------------------------------------------------- the journal


@dataclass
class Journal:
    """``.forkpatch/rebase/``: where a rebase stands, and the bytes to restore."""

    project: Project
    _files: dict[str, str] | None = field(default=None, repr=False)  # rel -> base64
    _decoded_cache: dict[str, bytes] = field(default_factory=dict, repr=False)
    _series: Series | None = field(default=None, repr=False)
    _state: RebaseState | None = field(default=None, repr=False)
    _items: Sequence[Item] | None = field(default=None, repr=False)

    @property
    def dir(self) -> Path:
        return self.project.state_dir / JOURNAL_DIR

    @property
    def path(self) -> Path:
        return self.dir / JOURNAL_FILE

    @property
    def bundle_path(self) -> Path:
        return self.dir / ORIGINAL_FILE

    def exists(self) -> bool:
        return self.path.is_file() or self.path.is_symlink()

    def _read(self, path: Path, kind: str) -> tuple[int, dict[str, object]]:
        if path.is_symlink() or self.dir.is_symlink():
            raise _Reader(path).fail("file", "is a symbolic link")
        try:
            raw = read_regular(path, follow=False)
        except FileNotFoundError:
            raise StateError(
                f"{path} is missing: the rebase journal is incomplete",
                tip=f"check patches/ and series.yaml (`git status`), then move {self.dir} aside",
            ) from None
        return parse_state_versions(raw, path=path, kind=kind, versions=READ_VERSIONS)

    def load(self) -> RebaseState:
        """The validated state; also checks the saved originals it names.

        original.json is trusted through state.json: its sha256 is sealed in the
        state, so it is hashed, not re-validated field by field; its files are
        decoded when used, and its series.yaml must name the state's patches.
        """
        if not self.exists():
            raise StateError(
                "no rebase is in progress", tip="start one with `forkpatch rebase --onto TAG`"
            )
        state = _Reader(self.path).state(*self._read(self.path, KIND))
        self._check_paths(state.original)
        self._state = state
        self._load_bundle(state)
        return state

    def _check_paths(self, rels: Sequence[str]) -> None:
        """Each saved path is inside the project with no symlink on the way (checked once per
        directory: they are all series.yaml or files under patches/)."""
        where = f"{self.path}: original"
        dirs = {rel.rpartition("/")[0] for rel in rels}
        for d in sorted(dirs):
            check_inside(self.project.root, f"{d}/x" if d else "x", where=where)

    def _load_bundle(self, state: RebaseState) -> dict[str, str]:
        if self._files is None:
            try:
                raw = read_regular(self.bundle_path, follow=False)
            except FileNotFoundError:
                raw = b""
            if hashlib.sha256(raw).hexdigest() != state.original_sha256:
                raise _Reader(self.path).fail(
                    "original_sha256", f"does not match {self.bundle_path} (another rebase's copy?)"
                )
            try:
                doc = json.loads(raw)
                files = doc["data"]["files"]
                ok = doc["kind"] == ORIGINAL_KIND and doc["version"] == ORIGINAL_VERSION
            except (ValueError, KeyError, TypeError):
                ok, files = False, None
            reader = _Reader(self.bundle_path)
            if not ok or not isinstance(files, dict):
                raise reader.fail("files", "is not a rebase's saved copy of the project")
            if sorted(files) != sorted(state.original):
                raise _Reader(self.path).fail(
                    "original", f"does not list the files of {self.bundle_path.name}"
                )
            self._files = files
        return self._files

    def _decoded(self, rel: str) -> bytes:
        assert self._files is not None, "load() or start() first"
        if rel not in self._decoded_cache:
            try:
                self._decoded_cache[rel] = base64.b64decode(str(self._files[rel]), validate=True)
            except (binascii.Error, ValueError, KeyError):
                raise _Reader(self.bundle_path).fail(f"files[{rel!r}]", "is not base64") from None
        return self._decoded_cache[rel]

    def save(self, state: RebaseState) -> None:
        atomic_write(self.path, dump_state(KIND, VERSION, state.to_data()))

    def start(self, state: RebaseState) -> RebaseState:
        """Save series.yaml and patches/ aside, then write state.json (last: it is the commit).

        The copies go into one file (``original.json``), written atomically: one
        fsync instead of two per patch file.
        """
        if self.dir.is_symlink():
            self.dir.unlink()
        elif self.dir.exists():
            shutil.rmtree(self.dir)  # a start killed before state.json: nothing to keep
        root = self.project.root
        files = [self.project.series_path]
        if self.project.patches_dir.is_dir() and not self.project.patches_dir.is_symlink():
            files += sorted(
                p for p in self.project.patches_dir.rglob("*") if p.is_file() and not p.is_symlink()
            )
        bundle = {p.relative_to(root).as_posix(): read_regular(p) for p in files}
        self._files = {k: base64.b64encode(v).decode("ascii") for k, v in bundle.items()}
        raw = dump_state(ORIGINAL_KIND, ORIGINAL_VERSION, {"files": self._files})
        atomic_write(self.bundle_path, raw)
        self._decoded_cache = bundle
        self._series = self.project.series  # parsed from the same bytes
        state = replace(
            state, original=tuple(bundle), original_sha256=hashlib.sha256(raw).hexdigest()
        )
        self.save(state)
        self._state = state
        return state

    def original_bytes(self, rel: str) -> bytes:
        return self._decoded(rel)

    def original_series(self) -> Series:
        if self._series is None:
            series = parse_series(
                self.original_bytes(SERIES_FILE).decode("utf-8"), path=SERIES_FILE
            )
            names = [e.name for e in series.patches]
            if self._state is not None and [o.name for o in self._state.plan.outcomes] != names:
                raise _Reader(self.path).fail(
                    "outcomes", f"do not name the saved series' patches {names}"
                )
            self._series = series
        return self._series

    def original_patch(self, file: str | None) -> PatchFile | None:
        if file is None:
            return None
        rel = f"{PATCHES_DIR}/{file}"
        return parse_patch(self.original_bytes(rel), source=rel)

    def original_items(self) -> Sequence[Item]:
        """The saved series' patches, each parsed when first used."""
        if self._items is None:
            self._items = Items(self.original_series().patches, self.original_patch)
        return self._items

    def mark_stop(self, state: RebaseState) -> None:
        """Record that the conflict work tree now holds ``state``'s stop (written last)."""
        atomic_write(self.dir / STOP_FILE, f"{state.conflict} {state.plan.head}\n".encode())

    def holds_stop(self, state: RebaseState) -> bool:
        """Whether the conflict work tree was completely written for ``state``'s stop."""
        path = self.dir / STOP_FILE
        try:
            return (
                not path.is_symlink()
                and path.read_bytes() == f"{state.conflict} {state.plan.head}\n".encode()
            )
        except OSError:
            return False

    def write_project(self, files: Mapping[str, bytes | None]) -> list[str]:
        """Write project files (relative path -> bytes, None deletes) as one unit: only
        series.yaml and files under patches/, never through a symbolic link."""
        root = self.project.root
        changes: dict[Path, bytes | Path | None] = {}
        for rel in files:
            _Reader(self.path).saved_path(rel, "write")
        self._check_paths(list(files))
        for rel, data in files.items():
            changes[root / rel] = data
        self.project.state_dir.mkdir(parents=True, exist_ok=True)
        changed = commit_files(changes, journal=self.project.state_dir / COMMIT_JOURNAL)
        return [p.relative_to(root).as_posix() for p in changed]

    def restore(self, state: RebaseState) -> list[str]:
        """Put every original file back byte for byte; returns the paths that changed."""
        changed = self.write_project({rel: self.original_bytes(rel) for rel in state.original})
        self.project.reload()
        return changed

    def changed_since(self, state: RebaseState) -> list[str]:
        """Saved files whose bytes differ now (rewritten or removed), in the journal's order."""
        self._check_paths(state.original)
        out = []
        for rel in state.original:
            path = self.project.root / rel
            if not path.is_file() or path.read_bytes() != self.original_bytes(rel):
                out.append(rel)
        return out

    def clear(self) -> None:
        if self.dir.is_symlink():
            self.dir.unlink()
        else:
            shutil.rmtree(self.dir, ignore_errors=True)
