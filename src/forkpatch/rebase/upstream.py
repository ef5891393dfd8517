"""Evidence that a patch is already upstream, found before applying it.

Two kinds, both cheap and both reported with the upstream commit they name:

* :class:`UpstreamIndex`: an upstream commit in base..onto with the patch's own
  ``git patch-id`` (``git rebase`` skips such cherry-picks the same way), not
  reverted since; or the same change under another id, found from the added and
  removed lines (whitespace at their ends aside) of the commits in base..onto that
  touch only the patch's files: one with the patch's subject (a squashed pull
  request's `` (#123)`` aside) and author (when the patch is a mail) and exactly its
  lines (a rebased or squashed pull request, restyled later or not), or several
  whose lines together are exactly the patch's (a change merged as several
  commits). A commit with exactly its lines under another subject, or with its
  subject and author but other lines, is only probable: the conflict names it.
* :class:`ReferenceChecker`: the patch says which upstream commit it came from
  (``Upstream-Status: Backport [...id=<sha>]``, DEP-3 ``Origin: upstream, <sha>``,
  ``(cherry picked from commit <sha>)``, a mail's ``From <sha>`` line, series.yaml's
  ``upstream-commits``: :func:`forkpatch.patchfile.upstream_refs`) and that
  commit is in the target's history and makes the same change: it touches the
  patch's files and adds and removes the same lines (the context may differ: a
  backport is often adapted), or the patch reverse-applies to the files as that
  commit left them. When the change differs, a conflicting patch still names the
  commit as its probable replacement.

The content checks of the engine itself (content already present, a clean
reverse-apply on the new base) come on top, in :mod:`forkpatch.engine`.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from forkpatch.applier import HunkFailed, apply_file_patch, reverse
from forkpatch.engine import Item
from forkpatch.errors import ForkpatchError
from forkpatch.git import DIFF_OPTIONS, Git
from forkpatch.patchfile import PatchFile, git_header_name, parse_patch, upstream_refs
from forkpatch.patchheader import HeaderLayout
from forkpatch.series import PatchEntry

if TYPE_CHECKING:
    from forkpatch.forkrepo import ForkRepo


class UpstreamIndex:
    """``git patch-id --stable`` of the commits in base..onto that could carry a patch.

    A patch-id covers the file names, so only an upstream commit that touches
    nothing but the patch's files can have the patch's id (or its reverse's).
    One cheap ``git log --name-status`` (no content diffs) finds those candidates;
    only they are diffed and hashed, with the patches that have any, in two more
    git processes at most, whatever the number of patches. Loaded on first use.
    """

    def __init__(self, git: Git, base: str, onto: str, items: Sequence[Item]) -> None:
        self.git, self.base, self.onto, self.items = git, base, onto, items
        #: What earlier calls learnt of the range's commits and of the patches (set by
        #: the caller that has a project; None: every answer asked of git).
        self.cache: PatchIdCache | None = None
        self._upstream: dict[str, tuple[int, str]] | None = None  # pid -> (age, commit)
        self._subjects: dict[str, str] = {}
        self._series: dict[str, tuple[str, str | None]] = {}  # name -> (pid, reverse pid)
        self._known: dict[str, tuple[str, str] | None] | None = None
        # name -> (commit, evidence) of a change found under another id; and of the
        # probable ones, (commit, why) for a conflict to name.
        self._alike: dict[str, tuple[str, str]] = {}
        self._probable: dict[str, tuple[str, str]] = {}

    def preload(self, matches: dict[str, tuple[str, str] | None]) -> None:
        """Answers computed earlier for every patch (a resumed rebase): nothing is loaded.
        Each is (commit, evidence) as :meth:`matches` gave it."""
        self._known = dict(matches)

    def matches(self) -> dict[str, tuple[str, str]]:
        """Every patch with a match: name -> (commit, evidence); loads the index."""
        out = {}
        for item in self.items:
            name = item.entry.name
            evidence = self.evidence(name)
            found = self.match(name)
            if found is None and name in self._alike:
                found = self._alike[name]
            if found is not None and evidence is not None:
                out[name] = (found[0], evidence)
        return out

    def _touched(self) -> list[tuple[str, frozenset[str]]]:
        """(commit, paths it touches) for base..onto, newest first (the cache's when
        an earlier call listed the range)."""
        if self.cache is not None:
            got = self.cache.range(self.base, self.onto)
            if got is not None:
                return got
        listed = self._list_touched()
        if self.cache is not None:
            self.cache.put_range(self.base, self.onto, listed)
        return listed

    def _list_touched(self) -> list[tuple[str, frozenset[str]]]:
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
        chunks: list[tuple[str, bytes]] = []
        for i, item in enumerate(self.items):
            if item.patch is None or not item.patch.diff:
                continue
            mine = set(item.patch.paths)
            cands = {c for c, paths in touched if paths and paths <= mine}
            if not cands:
                continue
            wanted |= cands
            for rev, diff in ((False, item.patch.diff), (True, _reverse_diff(item.patch))):
                if diff is None:
                    continue
                oid = f"{2 * i + rev + 1:040x}"
                fake[oid] = (item.entry.name, rev)
                chunks.append(
                    (
                        oid,
                        f"commit {oid}\n".encode()
                        + diff
                        + (b"" if diff.endswith(b"\n") else b"\n"),
                    )
                )
        if not wanted:
            self._save()
            return
        order = sorted(wanted, key=age_of.__getitem__)
        cache = self.cache
        known = cache.commits(order) if cache is not None else {}
        missing = [c for c in order if c not in known]
        fresh: dict[str, bytes] = {}
        if missing:
            listed = self.git.run(
                "log",
                "--no-walk=unsorted",
                "--no-merges",
                "--format=commit %H%nsubject %s%nauthor %ae",
                *DIFF_OPTIONS,
                *missing,
            ).stdout
            fresh = dict(_commit_chunks(listed))
        # The same bytes as one `git log -p` of every candidate, newest first.
        log_p = b"".join(known[c][1] if c in known else fresh.get(c, b"") for c in order)
        current = ""
        authors: dict[str, str] = {}
        for line in log_p.split(b"\n"):
            if line.startswith(b"commit ") and len(line) == 47:
                current = line[7:].decode()
            elif line.startswith(b"subject ") and current:
                self._subjects.setdefault(current, line[8:].decode("utf-8", "replace"))
            elif line.startswith(b"author ") and current:
                authors.setdefault(current, line[7:].decode("utf-8", "replace").lower())
        self._find_alike(log_p, authors, age_of)
        # One patch-id run for both: the upstream commits, then the patches (and their
        # reverses) under ids no commit has; what the cache knows is not asked again.
        pids: dict[str, str] = {c: known[c][0] for c in order if c in known}
        asked = [
            (oid, chunk) for oid, chunk in chunks if cache is None or cache.patch(chunk) is None
        ]
        for oid, chunk in chunks:
            got = cache.patch(chunk) if cache is not None else None
            if got is not None:
                pids[oid] = got
        stream = b"".join(fresh.get(c, b"") for c in missing)
        stream += (b"" if not stream or stream.endswith(b"\n") else b"\n") + b"".join(
            chunk for _oid, chunk in asked
        )
        computed = dict((oid, pid) for pid, oid in self._patch_ids(stream))
        pids.update(computed)
        if cache is not None:
            for c in missing:
                cache.put_commit(c, computed.get(c, ""), fresh.get(c, b""))
            for oid, chunk in asked:
                cache.put_patch(chunk, computed.get(oid, ""))
        found: dict[str, dict[bool, str]] = {}
        for oid in [*order, *(oid for oid, _chunk in chunks)]:
            pid = pids.get(oid, "")
            if not pid:
                continue
            if oid in fake:
                name, rev = fake[oid]
                found.setdefault(name, {})[rev] = pid
                continue
            # The newest commit (smallest age) wins for a patch-id seen more than once.
            age = age_of.get(oid, len(age_of))
            if pid not in self._upstream or age < self._upstream[pid][0]:
                self._upstream[pid] = (age, oid)
        for name, both in found.items():
            if False in both:
                self._series[name] = (both[False], both.get(True))
        self._save()

    def _save(self) -> None:
        if self.cache is not None:
            self.cache.save()

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
        if self._known is not None:
            return self._known.get(name)
        self._load()
        assert self._upstream is not None
        pids = self._series.get(name)
        if pids is None or pids[0] not in self._upstream:
            return None
        age, commit = self._upstream[pids[0]]
        if pids[1] is not None and pids[1] in self._upstream and self._upstream[pids[1]][0] < age:
            return None  # upstream took it, then reverted it
        return commit, self._subjects.get(commit, "")

    def evidence(self, name: str) -> str | None:
        if self._known is not None:
            known = self._known.get(name)
            if known is None:
                return None
            commit, text = known
            # A journal of an older forkpatch saved the subject of a patch-id match.
            return text if "upstream commit" in text else _by_patch_id(commit, text)
        found = self.match(name)
        if found is not None:
            return _by_patch_id(*found)
        return self._alike[name][1] if name in self._alike else None

    def probable(self, name: str) -> str | None:
        """The upstream commit that probably carries the patch's change (the same
        subject and author with other lines, or its lines under another subject)."""
        if self._known is None:
            self._load()
        got = self._probable.get(name)
        return None if got is None else f"{got[0][:12]} {got[1]}"

    def _find_alike(self, log_p: bytes, authors: dict[str, str], age: dict[str, int]) -> None:
        """The patches whose change upstream made under another id (see the module doc):
        one parse of the candidates' diffs, compared line for line with each patch's."""
        # git's own output: its changed lines are counted without a parse as a patch.
        lines = {
            commit: _nonempty(lines_of_git_diff(diff)) for commit, diff in _commit_diffs(log_p)
        }
        by_age = sorted(lines, key=lambda c: age.get(c, len(age)), reverse=True)  # oldest first
        subject_keys = {c: _subject_key(self._subjects.get(c, "")) for c in by_age}
        for item in self.items:
            if item.patch is None or not item.patch.files:
                continue
            mine = _nonempty(lines_of_patch(item.patch))
            if not mine:
                continue
            name = item.entry.name
            subject = _subject_key(item.entry.summary)
            author = _mail_author(item.patch.header)
            anonymous = _anonymous(item.patch.header)
            subsets = []
            for commit in by_age:
                theirs = lines[commit]
                said = self._subjects.get(commit, "")
                same_subject = subject_keys[commit] == subject and (
                    author is None or authors.get(commit) == author
                )
                who = " and author" if author is not None else ""
                if theirs == mine and (same_subject or anonymous):
                    sure = (
                        f"upstream commit {commit[:12]} '{said}' has the patch's subject{who} "
                        "and exactly its added and removed lines (the same change under "
                        "another id)"
                        if same_subject
                        else f"upstream commit {commit[:12]} '{said}' makes exactly the "
                        "patch's added and removed lines, and the patch has no subject, "
                        "author or commit of its own to tell them apart (the same change)"
                    )
                    self._alike[name] = (commit, sure)
                    break
                if theirs == mine:
                    why = f"'{said}' (exactly the patch's added and removed lines, another subject)"
                    self._probable.setdefault(name, (commit, why))
                elif same_subject:
                    self._probable.setdefault(
                        name, (commit, f"'{said}' (the patch's subject{who}, other lines)")
                    )
                if theirs and _within(theirs, mine):
                    subsets.append(commit)
            if name in self._alike:
                undo = {
                    p: Counter({(_UNDO[k], t): c for (k, t), c in n.items()})
                    for p, n in mine.items()
                }
                took = by_age.index(self._alike[name][0])
                if any(lines[c] == undo for c in by_age[took + 1 :]):
                    del self._alike[name]  # upstream took it, then reverted it
                continue
            if len(subsets) < 2:
                continue
            total: dict[str, Counter[tuple[str, bytes]]] = {}
            for commit in subsets:
                for path, n in lines[commit].items():
                    total.setdefault(path, Counter()).update(n)
            if total == mine:
                named = ", ".join(f"{c[:12]} '{self._subjects.get(c, '')}'" for c in subsets)
                sure = (
                    f"upstream commits {named} together make exactly its added and removed "
                    "lines (the change merged as several commits)"
                )
                self._alike[name] = (subsets[-1], sure)


#: How a conflict names the commit a patch says it is the backport of.
DECLARED = "declared backport of"


def replacement(replaced_by: str, onto: str) -> str:
    """The line a conflict shows for the upstream commit that probably replaces it."""
    if replaced_by.startswith(DECLARED):
        return replaced_by
    return f"upstream commit {replaced_by} is in {onto}: it probably replaces this patch"


def _by_patch_id(commit: str, subject: str) -> str:
    return f"patch-id matches upstream commit {commit[:12]} '{subject}'"


_COMMIT_LINE = re.compile(rb"^commit ([0-9a-f]{40})$", re.MULTILINE)


def _commit_diffs(log_p: bytes) -> Iterator[tuple[str, bytes]]:
    """(commit, its header and diff) of each commit of a ``git log -p`` stream."""
    marks = list(_COMMIT_LINE.finditer(log_p))
    for m, nxt in zip(marks, [*marks[1:], None], strict=True):
        yield m.group(1).decode(), log_p[m.end() + 1 : nxt.start() if nxt else len(log_p)]


def _commit_chunks(log_p: bytes) -> Iterator[tuple[str, bytes]]:
    """(commit, its whole part of a ``git log -p`` stream, its ``commit`` line included):
    the parts put back together in order are the stream."""
    marks = list(_COMMIT_LINE.finditer(log_p))
    for m, nxt in zip(marks, [*marks[1:], None], strict=True):
        yield m.group(1).decode(), log_p[m.start() : nxt.start() if nxt else len(log_p)]


# --------------------------------------------------------------------------- the cache

#: The patch-id cache, under the project's state directory.
PATCH_ID_CACHE = "cache/patch-ids.json"
_CACHE_KIND = "patch-id-cache"
_CACHE_VERSION = 1
#: Bounds: the file's size (past it the oldest entries go first), the ranges kept, and
#: the largest commit part kept (a larger one is asked of git each time).
CACHE_LIMIT = 4 * 1024 * 1024
CACHE_RANGES = 8
CACHE_CHUNK_LIMIT = 256 * 1024
_HEX40 = re.compile(r"[0-9a-f]{40}\Z")
_HEX64 = re.compile(r"[0-9a-f]{64}\Z")


def _pid(value: object) -> str:
    if not isinstance(value, str) or not (value == "" or _HEX40.match(value)):
        raise ValueError("patch-id")
    return value


class PatchIdCache:
    """What the upstream index learnt, kept across calls and rebases as git keeps its
    own caches: facts about objects that never change, keyed by their ids.

    * a range ``base..onto``: its commits (newest first) and the paths each touches
      (keyed too by the store's shallow boundary, which decides what git lists);
    * an upstream commit: its ``git patch-id --stable`` (or none) and its part of the
      ``git log -p`` stream the index reads (subject, author, diff), as git printed it;
    * a patch's diff (by its sha256): its patch-id.

    The file (``.forkpatch/cache/patch-ids.json``) is a sealed state file
    (:func:`forkpatch.fsutil.dump_state`), checked field by field on load and ignored
    whole when anything in it does not check (then rewritten); written atomically, only
    when something was learnt, and bounded (:data:`CACHE_LIMIT`). An answer read from it
    is the answer git gave for the same ids; nothing else is kept."""

    def __init__(self, path: Path, git: Git) -> None:
        self.path, self.git = path, git
        self._ranges: dict[str, list[tuple[str, frozenset[str]]]] = {}
        self._commits: dict[str, tuple[str, bytes]] = {}
        self._patches: dict[str, str] = {}
        self._dirty = False
        self._shallow: str | None = None
        self._read()

    def _read(self) -> None:
        from forkpatch.fsutil import load_state

        try:
            data = load_state(self.path, kind=_CACHE_KIND, version=_CACHE_VERSION)
            if data is None:
                return
            ranges = {}
            for key, listed in dict(data["ranges"]).items():  # type: ignore[call-overload]
                if not isinstance(key, str) or not isinstance(listed, list):
                    raise ValueError("ranges")
                ranges[key] = [(_commit_id(c), _paths(p)) for c, p in listed]
            commits = {}
            for commit, (pid, chunk) in dict(data["commits"]).items():  # type: ignore[call-overload]
                if not isinstance(chunk, str) or not chunk.startswith(f"commit {commit}\n"):
                    raise ValueError("commits")
                commits[_commit_id(commit)] = (_pid(pid), chunk.encode("latin-1"))
            patches = {}
            for digest, pid in dict(data["patches"]).items():  # type: ignore[call-overload]
                if not isinstance(digest, str) or not _HEX64.match(digest):
                    raise ValueError("patches")
                patches[digest] = _pid(pid)
        except (ForkpatchError, OSError, KeyError, TypeError, ValueError, UnicodeError):
            return  # damaged or foreign: ignored, and replaced by the next save
        self._ranges, self._commits, self._patches = ranges, commits, patches

    def _range_key(self, base: str, onto: str) -> str:
        if self._shallow is None:
            try:
                with open(self.git.git_dir / "shallow", "rb") as fh:
                    self._shallow = hashlib.sha256(fh.read()).hexdigest()[:16]
            except FileNotFoundError:
                self._shallow = "-"
        return f"{self._shallow}:{base}..{onto}"

    def range(self, base: str, onto: str) -> list[tuple[str, frozenset[str]]] | None:
        return self._ranges.get(self._range_key(base, onto))

    def put_range(self, base: str, onto: str, listed: list[tuple[str, frozenset[str]]]) -> None:
        self._ranges[self._range_key(base, onto)] = listed
        self._dirty = True

    def commits(self, commits: Sequence[str]) -> dict[str, tuple[str, bytes]]:
        """commit -> (patch-id or "", its part of ``git log -p``), for those known."""
        return {c: self._commits[c] for c in commits if c in self._commits}

    def put_commit(self, commit: str, pid: str, chunk: bytes) -> None:
        if chunk.startswith(f"commit {commit}\n".encode()) and len(chunk) <= CACHE_CHUNK_LIMIT:
            self._commits[commit] = (pid, chunk)
            self._dirty = True

    def patch(self, chunk: bytes) -> str | None:
        """The patch-id of a patch's diff (its ``commit`` line aside), if known."""
        return self._patches.get(_digest(chunk))

    def put_patch(self, chunk: bytes, pid: str) -> None:
        self._patches[_digest(chunk)] = pid
        self._dirty = True

    def save(self) -> None:
        """Write what was learnt (nothing when nothing was); a cache that cannot be
        written (a read-only project) is left as it is."""
        if not self._dirty:
            return
        from forkpatch.fsutil import atomic_write, dump_state

        ranges = dict(list(self._ranges.items())[-CACHE_RANGES:])
        commits, patches = dict(self._commits), dict(self._patches)
        while True:
            data = {
                "ranges": {k: [[c, sorted(p)] for c, p in v] for k, v in ranges.items()},
                "commits": {
                    c: [pid, chunk.decode("latin-1")] for c, (pid, chunk) in commits.items()
                },
                "patches": patches,
            }
            raw = dump_state(_CACHE_KIND, _CACHE_VERSION, data)
            if len(raw) <= CACHE_LIMIT or not (ranges or commits or patches):
                break
            # The oldest half of each goes (dicts keep the order entries came in).
            ranges = dict(list(ranges.items())[len(ranges) // 2 :])
            commits = dict(list(commits.items())[len(commits) // 2 :])
            patches = dict(list(patches.items())[len(patches) // 2 :])
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(self.path, raw)
        except (OSError, ForkpatchError):
            return
        self._dirty = False


def _digest(chunk: bytes) -> str:
    """A patch's diff as the cache keys it: without its stand-in ``commit`` line."""
    body = chunk.split(b"\n", 1)[1] if chunk.startswith(b"commit ") else chunk
    return hashlib.sha256(body).hexdigest()


def _commit_id(value: object) -> str:
    if not isinstance(value, str) or not _HEX40.match(value):
        raise ValueError("commit")
    return value


def _paths(value: object) -> frozenset[str]:
    if not isinstance(value, list) or not all(isinstance(p, str) and p for p in value):
        raise ValueError("paths")
    return frozenset(value)


def _within(
    theirs: dict[str, Counter[tuple[str, bytes]]], mine: dict[str, Counter[tuple[str, bytes]]]
) -> bool:
    """Whether every changed line of ``theirs`` is one of ``mine``, on the same path and
    at most as often."""
    if not theirs.keys() <= mine.keys():
        return False
    for path, counts in theirs.items():
        own = mine[path]
        if any(own[line] < n for line, n in counts.items()):
            return False
    return True


def _nonempty(
    lines: dict[str, Counter[tuple[str, bytes]]],
) -> dict[str, Counter[tuple[str, bytes]]]:
    return {path: n for path, n in lines.items() if n}


_UNDO = {"+": "-", "-": "+"}
_PR_NUMBER = re.compile(r"\s*\(#\d+\)$")


def _subject_key(subject: str) -> str:
    """A subject compared with another: spacing and case aside, without the ``(#123)``
    a squashed pull request's title gets."""
    return " ".join(_PR_NUMBER.sub("", subject.strip()).split()).casefold()


_MAIL_FROM = re.compile(r"^From:[^\n]*<([^>\n]+)>", re.MULTILINE)


def _mail_author(header: str) -> str | None:
    """The address of a mail's ``From:`` header, lower case; None for a patch that is
    no mail."""
    m = _MAIL_FROM.search(header)
    return m.group(1).strip().lower() if m else None


def _anonymous(header: str) -> bool:
    """A patch that is only a diff (``diff -u``, a quilt patch without a description):
    no subject, author or commit id of its own, so nothing its lines could be told
    apart from an upstream commit's by."""
    layout = HeaderLayout.parse(header)
    return not layout.mail and not layout.description.strip() and not upstream_refs(header)


def _reverse_diff(patch: PatchFile) -> bytes | None:
    """The text of the patch that undoes ``patch`` (for a revert's patch-id)."""
    try:
        return b"".join(reverse(fp).raw for fp in patch.files)
    except Exception:
        return None


# --------------------------------------------------------------------------- references

# How a line that names an upstream commit says so (for the evidence's wording).
_NAMED_BY = re.compile(
    r"^[ \t]*(?:(Upstream-Status|Origin|Applied-Upstream)[ \t]*:|(From) [0-9a-f]{40} |.*"
    r"\((cherry[ -]picked from) commit|.*\b(commit) [0-9a-f]{40} upstream|.*\[ *([Uu]pstream commit))",
    re.IGNORECASE,
)


def _named_by(text: str, oid: str) -> str:
    """Which line names ``oid`` (``Origin``, ``cherry picked from``, ...); a mail's
    ``From`` line only when nothing else does (OE's mails carry both)."""
    found = []
    for line in text.splitlines():
        if oid[:7] in line.lower():
            m = _NAMED_BY.match(line)
            if m:
                found.append(next(g for g in m.groups() if g))
    return next((f for f in found if f != "From"), found[0] if found else "upstream-commits")


def entry_references(entry: PatchEntry) -> list[str]:
    """The upstream commits a series entry names (``upstream-commits``, ``origin``,
    ``upstream``), without reading its patch file."""
    text = "\n".join((f"Origin: {entry.origin}", *entry.upstream.split("; ")))
    listed = [c.lower() for c in entry.upstream_commits]
    return list(dict.fromkeys([*listed, *upstream_refs(text)]))


def references(item: Item) -> list[tuple[str, str]]:
    """The upstream commits ``item`` names as its origin, and how each is named: in its
    patch file's header or its series entry (``upstream-commits``, ``origin``,
    ``upstream``), as :func:`forkpatch.patchfile.upstream_refs` finds them."""
    if item.patch is None:
        return []
    header, e = item.patch.header, item.entry
    entry = "\n".join((f"Origin: {e.origin}", *e.upstream.split("; ")))
    listed = [c.lower() for c in e.upstream_commits]
    ids = dict.fromkeys([*upstream_refs(header), *listed, *upstream_refs(entry)])
    return [(oid, _named_by(header + "\n" + entry, oid)) for oid in ids]


def _changed_lines(fp_lines: Sequence[tuple[str, bytes]]) -> Counter[tuple[str, bytes]]:
    return Counter((kind, text.strip()) for kind, text in fp_lines if text.strip())


def lines_of_patch(patch: PatchFile) -> dict[str, Counter[tuple[str, bytes]]]:
    """Path -> how often each added and removed line (stripped, blank ones left out)
    comes in the patch's hunks; a file's path is its name after the patch."""
    out: dict[str, Counter[tuple[str, bytes]]] = {}
    for fp in patch.files:
        lines = [(ln.kind, ln.text) for h in fp.hunks for ln in h.lines if ln.kind in "+-"]
        out.setdefault(fp.path, Counter()).update(_changed_lines(lines))
    return out


def lines_of_git_diff(diff: bytes) -> dict[str, Counter[tuple[str, bytes]]]:
    """:func:`lines_of_patch` of the patch git prints for a commit (``git log -p`` or
    ``diff-tree -p`` under forkpatch's own configuration: ``a/`` and ``b/`` names, C
    quoting), counted in one pass over its lines instead of a parse: a file's hunks
    start at its first ``@@`` line and run to the next ``diff --git`` line (no hunk
    line starts so); its name is the ``+++`` one, or the ``---`` one for a deletion.
    Sections without hunks (binary, a mode change, a pure rename) count no lines, as
    in a parse."""
    out: dict[str, Counter[tuple[str, bytes]]] = {}
    counts: Counter[tuple[str, bytes]] | None = None
    old: str | None = None
    in_hunks = False
    for line in diff.split(b"\n"):
        if line.startswith(b"diff --git "):
            counts, old, in_hunks = None, None, False
        elif in_hunks:
            kind = line[:1]
            if kind == b"+" or kind == b"-":
                text = line[1:].strip()
                if text:
                    counts[("+" if kind == b"+" else "-", text)] += 1  # type: ignore[index]
        elif line.startswith(b"--- "):
            old = git_header_name(line[4:])
        elif line.startswith(b"+++ "):
            path = git_header_name(line[4:]) or old
            counts = out.setdefault(path, Counter()) if path is not None else None
        elif line.startswith(b"@@") and counts is not None:
            in_hunks = True
    return out


class ReferenceChecker:
    """Checks the upstream commits patches name against the target (see the module doc)."""

    def __init__(self, git: Git, target_name: str, target_commit: str) -> None:
        self.git, self.target_name, self.target_commit = git, target_name, target_commit
        self.fork: ForkRepo | None = None  # for the shallow-clone check, when known
        self._commits: dict[str, tuple[str, str] | None] = {}  # ref -> (commit, subject)

    def known(self) -> tuple[tuple[str, str | None, str | None], ...]:
        """Every reference resolved so far: (reference, commit, subject), commit and
        subject None for one that is not in the target's history (for a resumed rebase)."""
        return tuple(
            (ref, *(got if got is not None else (None, None))) for ref, got in self._commits.items()
        )

    def preload(self, known: Sequence[tuple[str, str | None, str | None]]) -> None:
        """References resolved by an earlier step of the rebase: not resolved again."""
        for ref, commit, subject in known:
            self._commits[ref] = (commit, subject) if commit and subject is not None else None

    def prefetch(self, entries: Sequence[PatchEntry]) -> None:
        """Resolve every reference the series entries name at once (one git process,
        however many patches name a commit): which exist, which are in the target's
        history, and their subjects. A series imported from ``git format-patch`` mails
        names a commit in every entry (the ``From <id>`` line, kept in
        ``upstream-commits``), so one or two processes per patch would make the walk
        grow with the series. References only a patch file's header names are resolved
        when that patch is classified (its file is not read here)."""
        refs = [r for e in entries for r in entry_references(e) if r not in self._commits]
        refs = list(dict.fromkeys(refs))
        if not refs:
            return
        # Which name commits, and their subjects: read in process (no git process).
        commits = self.git.objects.commits(refs)
        found = {ref: oid for ref, (oid, _subject) in commits.items()}
        subjects = dict(commits.values())
        outside: set[str] = set()
        if found:
            oids = sorted(set(found.values()))
            # Commits reachable from the references but not from the target: a reference
            # that is listed is not in the target's history. (git's walk: libgit2's
            # stops elsewhere at a shallow store's boundary.)
            walked = self.git.run(
                "rev-list", *oids, "--not", self.target_commit, check=False
            ).stdout
            outside = set(walked.decode().split())
        for ref in refs:
            got = found.get(ref)
            inside = got is not None and got not in outside and got in subjects
            self._commits[ref] = (got, subjects[got]) if inside and got else None

    def _resolve(self, ref: str) -> tuple[str, str] | None:
        """(full id, subject) of a referenced commit that is in the target's history."""
        if ref not in self._commits:
            got = self.git.objects.commits([ref]).get(ref)
            if got is not None and not self.git.is_ancestor(got[0], self.target_commit):
                got = None
            self._commits[ref] = got
        return self._commits[ref]

    def _referenced(self, item: Item) -> Iterator[tuple[str, str, str]]:
        """(commit, subject, how) for each reference of ``item`` found in the target."""
        if item.patch is None or not item.patch.files:
            return
        for ref, how in references(item):
            got = self._resolve(ref)
            if got is not None:
                yield got[0], got[1], how

    def evidence(self, item: Item) -> str | None:
        """The evidence that a commit the patch names carries its change, or None."""
        for commit, subject, how in self._referenced(item):
            assert item.patch is not None
            why = self._same_change(item.patch, commit)
            if why:
                return (
                    f"upstream commit {commit[:12]} '{subject}' (named by the patch's {how} "
                    f"line) is in {self.target_name} and {why}"
                )
        return None

    def probable(self, item: Item) -> str | None:
        """The first commit the patch names that is in the target: its probable replacement
        (for a patch that conflicts; :meth:`declared` says whether it is more)."""
        for commit, subject, how in self._referenced(item):
            return (
                f"{DECLARED} {commit[:12]} '{subject}' (named by the patch's {how} line), "
                f"which {self.target_name} contains: most likely `forkpatch rebase --skip`"
            )
        return None

    def declared(self, item: Item) -> str | None:
        """The evidence for a patch that no longer applies and says it is the backport
        of a commit the target contains (:func:`references`), when that commit touches
        exactly the patch's files: the target has the change the patch was taken from,
        adapted or not. None otherwise (a commit that touches other files than the
        patch, or not all of them, is only named in the conflict: :meth:`probable`)."""
        assert item.patch is not None
        mine = set(item.patch.paths)
        for commit, subject, how in self._referenced(item):
            if self._files_of(commit) == mine:
                return (
                    f"declared backport: upstream commit {commit[:12]} '{subject}' (named by "
                    f"the patch's {how} line) is in {self.target_name} and touches exactly "
                    "the patch's files; the patch no longer applies there"
                )
        return None

    def _files_of(self, commit: str) -> set[str]:
        if self.fork is not None:
            self.fork.require_history(commit, f"{commit}^", why="checking an upstream reference")
        raw = self.git.run(
            "diff-tree",
            "-r",
            "--no-renames",
            "--root",
            "--no-commit-id",
            "--name-only",
            "-z",
            commit,
            check=False,
        ).stdout
        return {p.decode("utf-8", "surrogateescape") for p in raw.split(b"\0") if p}

    def _same_change(self, patch: PatchFile, commit: str) -> str | None:
        if self.fork is not None:
            self.fork.require_history(commit, f"{commit}^", why="checking an upstream reference")
        paths = list(patch.paths)
        raw = self.git.run(
            "diff-tree",
            *DIFF_OPTIONS,
            "--root",
            "--no-commit-id",
            commit,
            "--",
            *paths,
            check=False,
        )
        if raw.returncode != 0 or not raw.stdout.strip():
            return None
        theirs = parse_patch(raw.stdout, source=f"upstream commit {commit[:12]}")
        their_paths = {fp.path for fp in theirs.files}
        if not {fp.path for fp in patch.files} <= their_paths:
            return None
        mine, upstream = lines_of_patch(patch), lines_of_patch(theirs)
        if _within(_nonempty(mine), upstream):
            return "makes the same change (same files, same added and removed lines)"
        if self._reverse_applies(patch, commit):
            return "holds the change (the patch reverse-applies to the files as it left them)"
        return None

    def _reverse_applies(self, patch: PatchFile, commit: str) -> bool:
        for fp in patch.files:
            if fp.is_binary or fp.new_path is None:
                return False
            got = self.git.run("cat-file", "blob", f"{commit}:{fp.new_path}", check=False)
            if got.returncode != 0:
                return False
            try:
                apply_file_patch(got.stdout, reverse(fp), max_fuzz=0)
            except HunkFailed:
                return False
        return True
