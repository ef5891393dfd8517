"""Write a patch file for a commit, keeping the file's own bytes wherever they still hold.

A patch file is a header, a diff and maybe a tail (see :mod:`forkpatch.patchheader`
and the README's "What import normalises"). When forkpatch writes a patch back
(export, refresh, rebase, import of a patch that applied with an offset) it
starts from the bytes the file has now and the commit the patch became:

* **the diff** is kept byte for byte when it still describes the commit, i.e.
  applying it exactly (no offset, no fuzz) to the commit's parent gives the
  commit's files and modes. This is checked, not guessed: a quilt diff with
  ``Index:`` lines and ``.orig`` names, a ``diff -u`` without ``diff --git``,
  ``index`` lines, another diff algorithm or context size all stay as they are.
  Otherwise each file section is checked alone: sections that still hold are
  kept; the others are rewritten from git's diff in the section's own style (a
  plain section keeps its ``Index:``/``---``/``+++`` lines; a git section its
  ``index`` line, with the new blob ids abbreviated to the old length); new
  files come as git sections, in git's form.
* **the header** is kept, except for what the commit changed: the description
  (the text a commit message carries) is replaced in place, a mail's
  ``Subject:`` follows the summary, and a diffstat block is regenerated (git's
  ``--stat=72 --summary``, as ``format-patch`` writes it) when the diff was
  rewritten and the counts it shows changed: a diffstat never goes stale.
* **the tail** (format-patch's ``-- `` signature and anything after it) is kept.

A file that forkpatch writes from scratch gets the canonical form
(:func:`forkpatch.patchfile.format_patch`).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from types import TracebackType

from forkpatch.applier import HunkFailed, apply_file_patch
from forkpatch.engine import Item, SeriesApplier, TreeFiles, canonical_diff
from forkpatch.errors import GitError, PatchApplyError, PatchParseError
from forkpatch.git import DIFF_OPTIONS, Begun, Git, ObjectReader, blob_id
from forkpatch.patchfile import (
    FilePatch,
    PatchFile,
    format_patch,
    parse_patch,
    split_lines,
    split_mails,
)
from forkpatch.patchheader import HeaderLayout, may_carry_stat
from forkpatch.series import PatchEntry

__all__ = ["PatchTexts", "Rendered", "git_index_lines", "split_tail"]


@dataclass(frozen=True)
class Rendered:
    """A patch file's new bytes, and what had to change."""

    data: bytes
    diff_changed: bool  # the diff no longer described the commit and was rewritten
    header_changed: bool
    #: The diff was kept although its hunks now start at other lines (``keep_offsets``).
    offsets_kept: bool = False


def _bare(line: bytes) -> bytes:
    return line.rstrip(b"\n").rstrip(b"\r")


@dataclass(frozen=True)
class _Section:
    """One file section of a patch file: its lines up to the first hunk, the hunks,
    and the text after them (up to the next section)."""

    fp: FilePatch
    head: bytes
    hunks: bytes
    junk: bytes

    @property
    def raw(self) -> bytes:
        return self.head + self.hunks + self.junk

    @property
    def is_git(self) -> bool:
        return self.head.startswith(b"diff --git ")


def _split_section(fp: FilePatch) -> _Section:
    lines = split_lines(fp.raw)
    if not fp.hunks or fp.is_binary:
        for i, ln in enumerate(lines):
            if _bare(ln) == b"-- ":
                return _Section(fp, b"".join(lines[:i]), b"", b"".join(lines[i:]))
        return _Section(fp, fp.raw, b"", b"")
    first = next(i for i, ln in enumerate(lines) if ln.startswith(b"@@"))
    j = first
    for hunk in fp.hunks:
        j += 1  # the @@ line
        old_seen = new_seen = 0
        while old_seen < hunk.old_len or new_seen < hunk.new_len:
            ln = lines[j]
            kind = ln[:1]
            if kind == b"\\":
                j += 1
                continue
            if kind == b" " or ln in (b"\n", b"\r\n"):
                old_seen += 1
                new_seen += 1
            elif kind == b"-":
                old_seen += 1
            else:
                new_seen += 1
            j += 1
        if j < len(lines) and lines[j].startswith(b"\\"):
            j += 1
    return _Section(fp, b"".join(lines[:first]), b"".join(lines[first:j]), b"".join(lines[j:]))


def split_tail(junk: bytes) -> tuple[bytes, bytes]:
    """Text after the last hunk -> (text before a ``-- `` signature line, the rest)."""
    pos = 0
    for ln in split_lines(junk):
        if _bare(ln) == b"-- ":
            return junk[:pos], junk[pos:]
        pos += len(ln)
    return junk, b""


def _sections(patch: PatchFile) -> tuple[list[_Section], bytes]:
    """The file sections of a parsed patch file, and its tail."""
    sections = [_split_section(fp) for fp in patch.files]
    if not sections:
        return [], b""
    last = sections[-1]
    junk, tail = split_tail(last.junk)
    sections[-1] = _Section(last.fp, last.head, last.hunks, junk)
    return sections, tail


# A diffstat as git writes one into a format-patch mail.
_STAT_ARGS = ("--stat=72", "--summary", "-M", "--no-color")
_GIT_SECTION = re.compile(rb"^diff --git ", re.MULTILINE)
_PLAIN_SECTION = re.compile(rb"^--- [^\n]*\n\+\+\+ ", re.MULTILINE)


def _quick_split(old: bytes, canonical: bytes) -> tuple[bytes, bytes] | None:
    """(header, diff with its tail) of a file whose diff is ``canonical`` once its text
    ``index`` lines are dropped, as a git-made patch (format-patch, git diff) usually is;
    None otherwise. Sound however the split is found: the comparison is the proof (and
    a plain section before the first git one makes it parse the file properly)."""
    if not canonical:
        return None
    m = _GIT_SECTION.search(old)
    if m is None or _PLAIN_SECTION.search(old, 0, m.start()):
        return None
    start = m.start()
    ends = [len(old)]
    sig = old.rfind(b"\n-- \n", start)
    if sig != -1:
        ends.append(sig + 1)
    for end in ends:
        body = old[start:end]
        if body == canonical or canonical_diff(body) == canonical:
            return old[:start], old[start:]
    return None


class PatchTexts:
    """Renders patch files for commits of one repository.

    Used as a context manager it keeps one object reader for all its renders;
    otherwise each :meth:`render` closes the reader it opened.
    """

    def __init__(self, git: Git) -> None:
        self.git = git
        self._reader: ObjectReader | None = None
        self._held = False
        # (parent, commit) pairs announced by prefetch(); what they may need is read
        # for all of them at once, on first use.
        self._pending: list[tuple[str, str]] = []
        self._raw: dict[tuple[str, str], list[tuple[str, str, str, str, str]]] = {}
        self._stats: dict[tuple[str, str], str] = {}
        self._begun_stats: list[tuple[list[tuple[str, str]], Begun]] = []
        self._parsed: dict[tuple[str, bytes], PatchFile] = {}

    def __enter__(self) -> PatchTexts:
        self._held = True
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._held = False
        self.close()

    def close(self) -> None:
        for _keys, begun in self._begun_stats:
            begun.drop()
        self._begun_stats.clear()
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    @property
    def reader(self) -> ObjectReader:
        if self._reader is None:
            self._reader = self.git.reader()
        return self._reader

    # ------------------------------------------------------------------ public

    def prefetch(self, pairs: Iterable[tuple[str | None, str]]) -> None:
        """Announce the ``(parent, commit)`` pairs about to be rendered (parent None: the
        commit's first parent). Whatever of git a render needs beyond the diff (a diffstat;
        the raw changes are read in process) is then read, when the first render needs
        it, for every announced pair with one git process (:meth:`begin_stats`), not one
        or two per patch: a rebase that refreshes 300 patch files in their own
        form starts a handful of git processes instead of ~900."""
        for parent, commit in pairs:
            key = (parent or f"{commit}^", commit)
            if key not in self._raw:
                self._pending.append(key)

    def know_stat(self, parent: str, commit: str, stat: str) -> None:
        """The diffstat of ``parent``..``commit`` as :meth:`Git.diff_and_stat` gave it
        with the diff (a render asks git for it no more)."""
        self._stats[(parent, commit)] = stat

    def begin_stats(self, pairs: Iterable[tuple[str | None, str]]) -> None:
        """The diffstats of the ``(parent, commit)`` pairs (parent None: the commit's
        first parent) asked of git now, with one process that runs beside the renders;
        a render that needs one of them waits for it."""
        keys = [
            k
            for k in dict.fromkeys((parent or f"{commit}^", commit) for parent, commit in pairs)
            if k not in self._stats
        ]
        if keys:
            self._begun_stats.append((keys, self._begin_batch(_STAT_ARGS, keys)))

    def parse_while(self, files: Iterable[tuple[bytes, str]], busy: Callable[[], bool]) -> None:
        """Parse the patch files ``(data, source)`` that renders will read, one after
        another for as long as ``busy()`` says the caller would otherwise wait (on git,
        say): a render then takes the parse made here."""
        for data, source in files:
            if not busy():
                return
            # A file that does not parse is met again by its render, which says so.
            if (source, data) not in self._parsed:
                with contextlib.suppress(PatchParseError):
                    self._parsed[(source, data)] = parse_patch(data, source=source)

    def _parse(self, data: bytes, source: str) -> PatchFile:
        patch = self._parsed.pop((source, data), None)
        return patch if patch is not None else parse_patch(data, source=source)

    def _begin_batch(self, args: Sequence[str], keys: Sequence[tuple[str, str]]) -> Begun:
        lines = [
            commit if parent == f"{commit}^" else f"{commit} {parent}" for parent, commit in keys
        ]
        return self.git.begin(
            "diff-tree", "--stdin", "--always", *args, input=("\n".join(lines) + "\n").encode()
        )

    @staticmethod
    def _split_batch(
        args: Sequence[str], keys: Sequence[tuple[str, str]], out: bytes
    ) -> list[bytes]:
        """The output of ``git diff-tree --stdin --always ARGS`` for ``keys`` split into
        each pair's (its header line, the commit id, taken off), in order."""
        sep = b"\0" if "-z" in args else b"\n"
        chunks: list[bytes] = []
        pos = 0
        for i, (_parent, commit) in enumerate(keys):
            head = commit.encode() + sep
            if not out.startswith(head, pos):
                raise GitError(f"git diff-tree --stdin: unexpected output for {commit}")
            pos += len(head)
            if i + 1 < len(keys):
                nxt = out.find(sep + keys[i + 1][1].encode() + sep, pos - len(sep))
                end = len(out) if nxt < 0 else nxt + len(sep)
            else:
                end = len(out)
            chunks.append(out[pos:end])
            pos = end
        return chunks

    def render(
        self,
        old: bytes | None,
        *,
        commit: str,
        parent: str | None = None,
        raw_diff: bytes | None = None,
        description: str | None = None,
        summary: str | None = None,
        source: str = "patch",
        keep_offsets: bool = False,
    ) -> Rendered:
        """The bytes the patch file should have for ``commit`` (a patch on ``parent``,
        default its first parent), given the bytes ``old`` it has now.

        ``raw_diff`` is ``git diff-tree`` output with full ``index`` lines
        (:data:`forkpatch.git.DIFF_OPTIONS`), computed when not given.
        ``description``/``summary`` are the commit message's (None: keep the file's).
        ``keep_offsets``: a diff whose hunks apply only at other lines (an edit of a
        patch below moved them) is kept too when, so applied, it still gives exactly
        the commit's files (``Rendered.offsets_kept``): the stack's refresh and export
        leave such files alone unless asked (``--offsets``).
        """
        try:
            return self._render(
                old,
                commit=commit,
                parent=parent,
                raw_diff=raw_diff,
                description=description,
                summary=summary,
                source=source,
                keep_offsets=keep_offsets,
            )
        finally:
            if not self._held:
                self.close()

    def _render(
        self,
        old: bytes | None,
        *,
        commit: str,
        parent: str | None,
        raw_diff: bytes | None,
        description: str | None,
        summary: str | None,
        source: str,
        keep_offsets: bool = False,
    ) -> Rendered:
        parent = parent or f"{commit}^"
        if raw_diff is None:
            raw_diff = self.git.diff_trees(parent, commit)
        canonical = canonical_diff(raw_diff)
        if not old:
            return Rendered(format_patch(description or "", canonical), bool(canonical), True)
        quick = _quick_split(old, canonical)
        if quick is not None:
            # A git diff that is the commit's own (index lines aside): no parse needed.
            header_bytes, diff = quick
            return self._finish(
                header_bytes, diff, description=description, summary=summary, has_diff=True
            )
        try:
            patch = self._parse(old, source)
        except PatchParseError:
            return Rendered(format_patch(description or "", canonical), True, True)
        header_bytes = old[: len(old) - len(patch.diff)]
        sections, tail = _sections(patch)
        body = b"".join(s.raw for s in sections)

        diff_changed = offsets_kept = False
        if body == canonical:
            diff = body + tail
        elif not patch.files or not canonical:
            diff, diff_changed = canonical, True
        elif (
            not keep_offsets
            and all(sec.is_git for sec in sections)
            and canonical_diff(body) == body
        ):
            # forkpatch's own form (git sections, no index lines), made from another
            # commit: the commit's canonical diff is what the checks and _rewrite below
            # would end with, without reading any tree.
            diff, diff_changed = canonical + tail, True
        elif self._same_effect(patch.files, parent, commit):
            diff = body + tail
        elif keep_offsets and self._same_effect(patch.files, parent, commit, allow_offset=True):
            diff, offsets_kept = body + tail, True
        else:
            mails = split_mails(old)
            if len(mails) > 1:
                return self._render_mails(
                    mails,
                    commit=commit,
                    parent=parent,
                    description=description,
                    summary=summary,
                    source=source,
                )
            diff = self._rewrite(sections, raw_diff, parent, commit) + tail
            diff_changed = True

        rendered = self._finish(
            header_bytes,
            diff,
            description=description,
            summary=summary,
            has_diff=bool(patch.files and canonical),
            canonical=canonical,
            changed_by=(parent, commit) if diff_changed else None,
        )
        return replace(rendered, offsets_kept=offsets_kept) if offsets_kept else rendered

    def _render_mails(
        self,
        mails: list[bytes],
        *,
        commit: str,
        parent: str,
        description: str | None,
        summary: str | None,
        source: str,
    ) -> Rendered:
        """A file of several format-patch mails (applied as one patch) whose diff no
        longer describes ``commit``: every mail but the last is applied in turn (and
        rewritten, in its own style, where it applies only at an offset); the last one
        takes the rest of the change. The first mail carries the description and
        summary; each keeps its headers, and its diffstat follows its own diff."""
        parts: list[bytes] = []
        tip = parent
        changed = header_changed = False
        for k, mail in enumerate(mails):
            where = f"{source} (mail {k + 1} of {len(mails)})"
            target = commit
            if k < len(mails) - 1:
                patch = parse_patch(mail, source=where)
                entry = PatchEntry(name="mail", summary="mail", file="mail.patch")
                got = SeriesApplier(self.git, tip).run([Item(entry, patch)], write=True)
                if got.results[0].status == "conflict" or got.head is None:
                    raise PatchApplyError(
                        f"{where} does not apply on its own any more, so the change cannot "
                        "be written into it",
                        tip="split the file into one patch per mail (`forkpatch import` of "
                        "the file outside --quilt does that), then refresh",
                    )
                target = got.head
            first = k == 0
            part = self.render(
                mail,
                commit=target,
                parent=tip,
                description=description if first else None,
                summary=summary if first else None,
                source=where,
            )
            parts.append(part.data)
            changed |= part.diff_changed
            header_changed |= part.header_changed
            tip = target
        return Rendered(b"".join(parts), changed, header_changed)

    def _finish(
        self,
        header_bytes: bytes,
        diff: bytes,
        *,
        description: str | None,
        summary: str | None,
        has_diff: bool,
        canonical: bytes = b"",
        changed_by: tuple[str, str] | None = None,
    ) -> Rendered:
        """The header with the commit's description, summary and (when the diff was
        rewritten for the commit ``changed_by`` = (parent, commit)) diffstat, then ``diff``."""
        layout = HeaderLayout.parse(header_bytes.decode("utf-8", "surrogateescape"))
        text = layout.text
        if description is not None:
            text = layout.with_description(description)
        if summary is not None:
            text = HeaderLayout.parse(text).with_subject(summary)
        if changed_by is not None:
            again = HeaderLayout.parse(text)
            if again.stat_span is not None:
                block = again.text[slice(*again.stat_span)]
                counts = stat_counts(block)
                # git is asked for the stat's text only when the counts it would show
                # are not known, from the diff, to be the block's own.
                if diff_stat_counts(canonical) != counts:
                    stat = self._diffstat(*changed_by)
                    if counts != stat_counts(stat):
                        text = again.with_stat(_as_diffstat(stat) if _by_diffstat(block) else stat)
        header = text.encode("utf-8", "surrogateescape")
        header_changed = header != header_bytes
        if not has_diff:
            data = format_patch(text, canonical)  # no diff before or after: canonical joint
        else:
            data = header + diff
        return Rendered(data, changed_by is not None, header_changed)

    # ------------------------------------------------------------------ effect

    def entries_at(self, rev: str, paths: set[str]) -> dict[str, tuple[str, str]]:
        """path -> (mode, blob id) in ``rev`` for those of ``paths`` that are files (links,
        submodules) there, as ``git ls-tree -r --full-tree REV -- PATHS`` lists them: read
        in process, a directory at a time (none where ``rev`` names no tree)."""
        if not paths:
            return {}
        try:
            files = TreeFiles(self.git, rev)
        except GitError:
            return {}
        found = {path: files.get(path) for path in paths}
        return {path: entry for path, entry in found.items() if entry is not None}

    def _effect_holds(
        self,
        files: tuple[FilePatch, ...] | list[FilePatch],
        paths: set[str],
        pre: dict[str, tuple[str, str]],
        post: dict[str, tuple[str, str]],
        allow_offset: bool = False,
    ) -> bool:
        """Whether applying ``files`` exactly (or, with ``allow_offset``, at other lines
        but no fuzz) to the ``pre`` files gives the ``post`` ones (modes included) on
        every path of ``paths``."""
        state: dict[str, tuple[str, bytes] | None] = {}

        def current(path: str) -> tuple[str, bytes] | None:
            if path in state:
                return state[path]
            entry = pre.get(path)
            if entry is None:
                return None
            if entry[0] == "160000":
                raise HunkFailed(0, 0, "submodule")
            data = self.reader.blob(entry[1])
            if data is None:
                raise HunkFailed(0, 0, "missing blob")
            return entry[0], data

        try:
            for fp in files:
                before = current(fp.old_path) if fp.old_path is not None else None
                if fp.old_path is None and fp.new_path and current(fp.new_path) is not None:
                    return False  # it creates a file that is there: it does not apply
                if fp.is_binary:
                    if fp.new_path is None or fp.new_oid is None:
                        return False
                    want = post.get(fp.new_path)
                    if want is None or not want[1].startswith(fp.new_oid):
                        return False
                    data = self.reader.blob(want[1])
                    if data is None:
                        return False
                    result: bytes | None = data
                else:
                    res = apply_file_patch(
                        before[1] if before else None, fp, max_fuzz=0, allow_offset=allow_offset
                    )
                    result = res.content
                if fp.new_path is None:
                    if fp.old_path is not None:
                        state[fp.old_path] = None
                    continue
                if fp.old_path is not None and fp.old_path != fp.new_path and not fp.is_copy:
                    state[fp.old_path] = None
                mode = fp.mode_after(before[0] if before else None)
                state[fp.new_path] = (mode, result or b"")
        except HunkFailed:
            return False
        if not set(state) >= paths:
            return False
        for path in paths:
            got = state[path]
            want = post.get(path)
            if got is None and want is None:
                continue
            if got is None or want is None:
                return False
            if got[0] != want[0] or blob_id(got[1], len(want[1])) != want[1]:
                return False
        return True

    @staticmethod
    def _touched(files: tuple[FilePatch, ...] | list[FilePatch]) -> set[str]:
        return {p for fp in files for p in (fp.old_path, fp.new_path) if p is not None}

    def _same_effect(
        self,
        files: tuple[FilePatch, ...],
        parent: str,
        commit: str,
        *,
        allow_offset: bool = False,
    ) -> bool:
        """Whether the old diff, applied exactly to ``parent``, gives ``commit``."""
        pre, post, changed = self._changes(parent, commit)
        paths = self._touched(files) | changed
        if not paths <= changed:
            # The old diff touches a file the commit leaves alone (it cannot hold, but
            # that is for the check to say): read those files too.
            pre.update(self.entries_at(parent, paths - changed))
            post.update(self.entries_at(commit, paths - changed))
        return self._effect_holds(files, paths, pre, post, allow_offset)

    def _changes(
        self, parent: str, commit: str
    ) -> tuple[dict[str, tuple[str, str]], dict[str, tuple[str, str]], set[str]]:
        """(mode, blob id) before and after of every path ``commit`` changes, and the
        paths, read in process (a rename is a deletion and a creation here)."""
        key = (parent, commit)
        out = self._raw.get(key)
        if out is None:  # in process: the fields of `git diff-tree -r --raw --no-renames`
            out = self._raw[key] = self.git.objects.raw_changes(parent, commit)
        pre: dict[str, tuple[str, str]] = {}
        post: dict[str, tuple[str, str]] = {}
        for old_mode, new_mode, old_oid, new_oid, path in out:
            if old_mode != "000000":
                pre[path] = (old_mode, old_oid)
            if new_mode != "000000":
                post[path] = (new_mode, new_oid)
        return pre, post, set(pre) | set(post)

    # ------------------------------------------------------------------ rewriting

    def _rewrite(
        self, sections: list[_Section], raw_diff: bytes, parent: str, commit: str
    ) -> bytes:
        """The diff for ``commit``, each file in its old section's style where it had one,
        and in the file's style (context width, plain headers) where it had none."""
        width = _context_width(sections)
        if width != 3:  # hunks as wide as the file's (a hand-made -U1, quilt's -U5)
            raw_diff = self.git.run("diff-tree", *DIFF_OPTIONS, f"-U{width}", parent, commit).stdout
        canon_new = parse_patch(canonical_diff(raw_diff), source=commit)
        full_index = git_index_lines(raw_diff)
        if len(full_index) != len(canon_new.files):  # not git's own diff: parse it
            raw_files = parse_patch(raw_diff, source=commit).files
            full_index = [_index_line(_split_section(f).head) for f in raw_files]
        pre, post, changed = self._changes(parent, commit)
        paths = self._touched([s.fp for s in sections]) | changed
        if not paths <= changed:
            pre.update(self.entries_at(parent, paths - changed))
            post.update(self.entries_at(commit, paths - changed))
        by_key = {(s.fp.old_path, s.fp.new_path): i for i, s in enumerate(sections)}
        out: list[tuple[int, bytes]] = []
        matched = 0
        for n, (index_line, cfp) in enumerate(zip(full_index, canon_new.files, strict=True)):
            i = by_key.get((cfp.old_path, cfp.new_path))
            if i is None:
                out.append((len(sections) + n, _new_section(sections, cfp)))
                continue
            matched += 1
            old = sections[i]
            if self._effect_holds([old.fp], self._touched([old.fp, cfp]), pre, post):
                out.append((i, old.raw))
            else:
                out.append((i, _restyle(old, index_line, cfp)))
        if matched == len(sections) == len(out):
            out.sort(key=lambda item: item[0])  # the same files: keep the file's order
        return b"".join(raw for _i, raw in out)

    def _diffstat(self, parent: str, commit: str) -> str:
        key = (parent, commit)
        if key not in self._stats and key in self._pending:
            # The first stat of an announced pair asks for every announced one at once.
            self.begin_stats(self._pending)
            self._pending.clear()
        batch = next((b for b in self._begun_stats if key in b[0]), None)
        if key not in self._stats and batch is not None:
            self._begun_stats.remove(batch)
            keys, begun = batch
            out = self._split_batch(_STAT_ARGS, keys, begun.result().stdout)
            for k, chunk in zip(keys, out, strict=True):
                self._stats[k] = chunk.decode("utf-8", "surrogateescape")
        if key not in self._stats:
            proc = self.git.run("diff-tree", *_STAT_ARGS, parent, commit)
            self._stats[key] = proc.stdout.decode("utf-8", "surrogateescape")
        return self._stats[key]


def _index_line(head: bytes) -> bytes | None:
    """The ``index`` line of a section's head (None: it has none)."""
    return next((ln for ln in split_lines(head) if ln.startswith(b"index ")), None)


def git_index_lines(raw_diff: bytes) -> list[bytes | None]:
    """The ``index`` line of each file section of git's diff (``diff-tree`` output),
    in order, without parsing the hunks: a section starts at each ``diff --git`` line
    (a hunk line never does) and its index line comes before the first ``--- ``."""
    if not raw_diff:
        return []
    out: list[bytes | None] = []
    for n, sec in enumerate(raw_diff.split(b"\ndiff --git ")):
        if n == 0 and not sec.startswith(b"diff --git "):
            return []  # not git's diff: let the caller parse it
        head = sec.partition(b"\n--- ")[0].partition(b"\nGIT binary patch\n")[0]
        out.append(_index_line(head + b"\n"))
    return out


def _restyle(old: _Section, full: bytes | None, cfp: FilePatch) -> bytes:
    """git's section for a file (``cfp`` canonical; ``full``: its index line with full
    ids) in ``old``'s style."""
    new = _split_section(cfp)
    if cfp.is_binary or not cfp.hunks:
        return cfp.raw + old.junk
    hunks = new.hunks
    if not old.is_git:
        names = [h.section for h in old.fp.hunks if h.section]
        # diff -u without -p: no function names after the @@ either; with -p, GNU diff
        # (quilt's refresh) cuts them at 40 characters where git goes to 80.
        keep = None if not names else _GNU_FUNC_WIDTH if max(map(len, names)) <= 40 else -1
        if keep != -1:
            hunks = b"".join(
                _cut_section_text(ln, keep) if ln.startswith(b"@@") else ln
                for ln in split_lines(hunks)
            )
    if not old.is_git:
        plain_ok = (
            not cfp.is_rename
            and not cfp.is_copy
            and (cfp.old_path is None) == (old.fp.old_path is None)
            and (cfp.new_path is None) == (old.fp.new_path is None)
            and not (cfp.old_mode and cfp.new_mode and cfp.old_mode != cfp.new_mode)
            and (cfp.old_path is not None or cfp.new_mode in (None, "100644"))
        )
        if plain_ok:
            return old.head + hunks + old.junk
        return new.head + hunks + old.junk
    head = new.head
    old_index = next(
        (ln for ln in split_lines(old.head) if ln.startswith(b"index ") and b".." in ln), None
    )
    if old_index is not None:
        width = len(old_index.split(b" ")[1].split(b"..")[0])
        if full is not None:
            ids, _, rest = full[len(b"index ") :].partition(b" ")
            a, _, b = ids.rstrip(b"\n").partition(b"..")
            line = b"index " + a[:width] + b".." + b[:width]
            line += (b" " + rest) if rest else b"\n"
            head = _insert_index(head, line)
    return head + hunks + old.junk


_STAT_COUNT = re.compile(r"^ (.*?) +\| +(\d+|Bin)", re.M)
_STAT_TOTALS = re.compile(
    r"^ (\d+) files? changed(?:, (\d+) insertions?)?(?:, (\d+) deletions?)?", re.M
)


_STAT_FILE = re.compile(r"^ (.*?) +\| +(\d+) ([-+]*)$")
_DIFFSTAT_FILE = re.compile(r"^ .*? \|[ \d]{4}\d [-+]*$")


def _by_diffstat(block: str) -> bool:
    """A stat block the ``diffstat`` tool wrote (quilt's ``refresh --diffstat``): its
    counts in a field five wide (git's is as wide as the largest count)."""
    files = [ln for ln in block.splitlines() if " | " in ln or "|" in ln]
    return bool(files) and all(_DIFFSTAT_FILE.match(ln) for ln in files)


def _as_diffstat(stat: str) -> str:
    """git's ``--stat`` text as ``diffstat`` writes it: counts in a field five wide, no
    ``--summary`` lines (mode changes, creations); git's own when it shows a binary
    file, which diffstat writes otherwise."""
    lines = stat.splitlines()
    files = [_STAT_FILE.match(ln) for ln in lines if "|" in ln]
    if any(m is None for m in files):
        return stat
    width = max((len(m.group(1)) for m in files if m), default=0)
    out = [f" {m.group(1):<{width}} |{int(m.group(2)):5d} {m.group(3)}" for m in files if m]
    out += [ln for ln in lines if _STAT_TOTALS.match(ln)]
    return "\n".join(out) + "\n"


StatCounts = tuple[list[tuple[str, str]], list[tuple[str, ...]]]


def stat_counts(stat: str) -> StatCounts:
    """What a diffstat says (files and counts, totals), whatever tool aligned it: a
    block that still says the same is kept as it is."""
    return _STAT_COUNT.findall(stat), _STAT_TOTALS.findall(stat)


# A name git's --stat=72 shows as it is: printable ASCII that git does not quote, no
# longer than 40 (the name gets at least 45 columns at that width, whatever the counts).
_PLAIN_STAT_NAME = re.compile(rb"[!#-\[\]-~](?:[ !#-\[\]-~]{0,38}[!#-\[\]-~])?")
_UNSURE_HEAD = (b"\nrename from ", b"\ncopy from ", b"\nGIT binary patch", b"\nBinary files ")


def diff_stat_counts(canonical: bytes) -> StatCounts | None:
    """What git's ``--stat=72`` of a commit would say (:func:`stat_counts` of it),
    counted from the commit's diff in git's form (``diff-tree -p -M``); None where the
    diff alone cannot tell how git shows it (a rename or copy, a binary file, a name
    git quotes or shortens), and for no diff."""
    if not canonical.startswith(b"diff --git "):
        return None
    files: list[tuple[str, str]] = []
    insertions = deletions = 0
    for section in canonical[len(b"diff --git ") :].split(b"\ndiff --git "):
        first, _, rest = section.partition(b"\n")
        head, at, hunks = rest.partition(b"\n@@")
        if rest.startswith(b"@@"):
            head, at, hunks = b"", b"@@", rest[2:]
        if any(mark in b"\n" + head for mark in _UNSURE_HEAD):
            return None
        half = (len(first) - len(b"a/ b/")) // 2
        name = first[2 : 2 + half]
        if first != b"a/" + name + b" b/" + name or not _PLAIN_STAT_NAME.fullmatch(name):
            return None
        added = removed = 0
        if at:
            for line in hunks.split(b"\n"):
                if line.startswith(b"+"):
                    added += 1
                elif line.startswith(b"-"):
                    removed += 1
        files.append((name.decode("ascii"), str(added + removed)))
        insertions += added
        deletions += removed
    # git's totals line leaves a zero count out unless both are zero; _STAT_TOTALS reads
    # the deletions only where no insertions come before them.
    if insertions or not deletions:
        return files, [(str(len(files)), str(insertions), "")]
    return files, [(str(len(files)), "", str(deletions))]


def stat_may_change(old: bytes, raw_diff: bytes) -> bool:
    """Whether a render of the file ``old`` for the commit diff ``raw_diff`` may ask git
    for a diffstat: the file shows one above its diff, and the diff does not show the
    same counts (a hint for :meth:`PatchTexts.prefetch`: a render asks for what it
    needs either way)."""
    head = old.partition(b"\ndiff --git ")[0]
    if not may_carry_stat(head):
        return False
    counts = stat_counts(head.decode("utf-8", "surrogateescape"))
    return diff_stat_counts(canonical_diff(raw_diff)) != counts


_GNU_FUNC_WIDTH = 40  # GNU diff -p's function names are cut at 40 characters


def _cut_section_text(line: bytes, keep: int | None) -> bytes:
    """A hunk's ``@@`` line with its function name cut at ``keep`` characters (None:
    dropped)."""
    end = line.find(b" @@", 2)
    if end == -1:
        return line
    eol = b"\r\n" if line.endswith(b"\r\n") else b"\n"
    text = line[end + 3 :].rstrip(b"\r\n")
    if keep is None or not text.startswith(b" "):
        return line[: end + 3] + eol
    name = text[1:].decode("utf-8", "surrogateescape")[:keep].encode("utf-8", "surrogateescape")
    return line[: end + 3] + b" " + name + eol


def _context_width(sections: Sequence[_Section]) -> int:
    """The context lines the file's hunks have before their first change, where the
    start of the file does not cut them (git's and diff's 3 when no hunk shows it)."""
    widest = 0
    for sec in sections:
        for hunk in sec.fp.hunks:
            lead = next((i for i, ln in enumerate(hunk.lines) if ln.kind != " "), 0)
            if hunk.old_start > lead + 1:
                widest = max(widest, lead)
    return widest or 3


def _new_section(sections: Sequence[_Section], cfp: FilePatch) -> bytes:
    """git's section for a file the old patch did not touch, in the file's own header
    form when every section it has is plain (quilt's ``Index:``/``====`` lines, its
    ``---``/``+++`` prefixes and timestamps, from its first section): a file changed
    in place, created or deleted (``/dev/null`` on its side, with the epoch where
    the file has timestamps, as quilt writes it); a renamed or binary file, or a
    mode other than 100644, stays in git's form, which says what plain headers
    cannot."""
    plain = [s for s in sections if not s.is_git and s.fp.old_path and s.fp.new_path]
    if (
        not plain
        or any(s.is_git for s in sections)
        or cfp.is_binary
        or cfp.is_rename
        or cfp.is_copy
        or (cfp.old_mode and cfp.new_mode and cfp.old_mode != cfp.new_mode)
        or (cfp.old_path is None and cfp.new_mode not in (None, "100644"))
        or (cfp.new_path is None and cfp.old_mode not in (None, "100644"))
        or not cfp.hunks
    ):
        return cfp.raw
    model = plain[0]
    old_name = model.fp.path.encode("utf-8", "surrogateescape")
    new_name = cfp.path.encode("utf-8", "surrogateescape")
    head = b""
    for ln in split_lines(model.head):
        side = ln[:4]
        if (side == b"--- " and cfp.old_path is None) or (side == b"+++ " and cfp.new_path is None):
            stamp = b"\t1970-01-01 00:00:00.000000000 +0000" if b"\t" in ln else b""
            head += side + b"/dev/null" + stamp + (b"\r\n" if ln.endswith(b"\r\n") else b"\n")
            continue
        if old_name not in ln:
            head += ln
            continue
        # The model's name where it stands (after a prefix such as pkg.orig/ or a/),
        # its timestamp and the rest of the line kept.
        at = ln.rfind(old_name)
        head += ln[:at] + new_name + ln[at + len(old_name) :]
    names = [_bare(ln) for ln in split_lines(head) if ln.startswith((b"--- ", b"+++ "))]
    if len(names) != 2:
        return cfp.raw
    section = _split_section(cfp)
    hunks = section.hunks
    if not any(h.section for h in model.fp.hunks):
        hunks = b"".join(
            _cut_section_text(ln, None) if ln.startswith(b"@@") else ln for ln in split_lines(hunks)
        )
    return head + hunks


def _insert_index(head: bytes, index_line: bytes) -> bytes:
    """Put an ``index`` line where git does: before the ``---`` line of a git section."""
    lines = split_lines(head)
    for i, ln in enumerate(lines):
        if ln.startswith(b"--- "):
            return b"".join(lines[:i]) + index_line + b"".join(lines[i:])
    return head + index_line
