"""Import patches: git format-patch files, mbox, plain unified diffs, quilt series.

Every file is read the same way, whether it is named on the command line or
listed by a quilt ``series`` file (or any list of patches in order, ``--series``):

* its **header** (everything before the diff) is a mail (mbox ``From`` line,
  ``From:``/``Date:``/``Subject:`` headers, the body) or plain text, possibly with
  DEP-3 fields (see :mod:`forkpatch.patchheader`). The summary is the mail's
  Subject (RFC 2047 decoded, folded lines joined, ``[PATCH n/m]`` tags stripped)
  or DEP-3's ``Description:``/``Subject:`` or the first line; taken whole: only a
  mail that forkpatch itself made (its ``Forkpatch-Patch:`` trailer names the
  patch) is read as ``name: summary``.
* its **metadata** goes to series.yaml: ``Origin:`` -> ``origin``;
  ``Upstream-Status:``, ``Applied-Upstream:``, ``Forwarded:``, ``Bug:`` ->
  ``upstream``; upstream commit ids it names -> ``upstream-commits``
  (:func:`forkpatch.patchfile.upstream_refs`). The file keeps them too.
* its **bytes** are stored as they are, under the file's own name
  (``--rename``: ``<name>.patch``); only a diff that applies with an offset is
  rewritten (in its own style, see :mod:`forkpatch.patchtext`). ``--canonical``
  stores forkpatch's own form instead (description + canonical git diff), as
  for forkpatch's own mails.

The patch name is a slug of the file name (without format-patch's ``0001-``;
of the subject for the mails of an mbox), made unique. Every patch is validated (parsed, paths checked),
applied in memory on top of the series, and nothing is written unless all of
them apply; patch files and series.yaml are written as one unit.
"""

from __future__ import annotations

import email
import email.message
import email.policy
import re
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from forkpatch import log
from forkpatch.engine import Item, SeriesApplier, canonical_diff, diffs_of_commits
from forkpatch.errors import (
    PatchApplyError,
    PatchEncodingError,
    PatchParseError,
    SeriesError,
    UsageError,
)
from forkpatch.fsutil import read_regular
from forkpatch.patchfile import (
    PatchFile,
    crlf_throughout,
    format_patch,
    lf_form,
    parse_patch,
    upstream_refs,
)
from forkpatch.patchheader import HeaderLayout, header_fields
from forkpatch.patchtext import PatchTexts
from forkpatch.project import FileRecord, Project
from forkpatch.series import NAME_RE, PatchEntry, check_series_file_path

__all__ = ["Incoming", "import_patches", "read_patch_file", "read_series_dir", "slugify"]


@dataclass
class Incoming:
    """One patch to import, read but not yet named or written."""

    source: str  # where it came from, for messages
    data: bytes  # the bytes to store (the file, or one message of an mbox)
    patch: PatchFile  # ``data`` parsed (for ``canonical``: the canonical header + diff)
    file: str | None  # its own file name (kept in patches/); None: ``<name>.patch``
    summary: str
    slug: str  # the base of a generated name
    name: str | None = None  # a name it carries (forkpatch trailer) or was given (--name)
    origin: str = ""
    upstream: str = ""
    upstream_commits: tuple[str, ...] = ()
    canonical: bool = False  # store forkpatch's own form (header + canonical diff)
    canonical_header: str = ""
    strip: int | None = None  # the -p level its quilt series line gave (None: from the names)
    keep_file: bool = False  # stored in forkpatch's form, yet under its own file name


_TRAILER = re.compile(r"(?m)^Forkpatch-Patch: *([a-z0-9][a-z0-9._-]{0,79}) *$")
# An mbox separator, strictly: "From <who> <asctime>" (format-patch: the commit id
# and "Mon Sep 17 00:00:00 2001").
_MBOX_SEPARATOR = re.compile(
    rb"^From \S+ +(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep"
    rb"|Oct|Nov|Dec) +\d{1,2} \d\d:\d\d:\d\d(?: [+-]\d{4})? \d{4}\r?$",
    re.MULTILINE,
)
# DEP-3 / OE fields that say where the patch stands upstream, in the order they
# are written into series.yaml's `upstream`.
_UPSTREAM_FIELDS = ("upstream-status", "applied-upstream", "forwarded", "bug")
_SUMMARY_MAX = 200


def slugify(text: str) -> str:
    """A patch name from a subject: lower-case words joined by '-', at most 60 characters."""
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    slug = re.sub(r"^\d{4}-", "", slug) if re.match(r"^\d{4}-", slug) else slug
    slug = slug[:60].rstrip("-")
    return slug or "patch"


def _file_slug(file_name: str) -> str:
    """A patch name from a file name: its stem, lower-case, '.' and '_' kept."""
    stem = re.sub(r"\.(patch|diff)$", "", PurePosixPath(file_name).name, flags=re.IGNORECASE)
    slug = re.sub(r"[^a-z0-9._-]+", "-", stem.lower())
    slug = re.sub(r"^\d{4}-", "", slug)
    slug = re.sub(r"-{2,}", "-", slug).strip("-._")[:60].rstrip("-._")
    return slug or "patch"


# --------------------------------------------------------------------------- reading


def _split_mbox(data: bytes) -> list[bytes]:
    """The messages of an mbox, byte for byte; one item when it is not several mails."""
    if not _MBOX_SEPARATOR.match(data):
        return [data]
    starts = [m.start() for m in _MBOX_SEPARATOR.finditer(data)]
    if len(starts) < 2:
        return [data]
    return [data[a:b] for a, b in zip(starts, [*starts[1:], len(data)], strict=True)]


def _encoded_mail(data: bytes) -> email.message.Message | None:
    """The parsed mail when its body is transfer-encoded (quoted-printable, base64) or
    multipart: then the file's bytes are not the diff and it is decoded instead."""
    head = data[:200]
    if not (_MBOX_SEPARATOR.match(head) or re.match(rb"(From|Subject|Date): ", head)):
        return None
    msg = email.message_from_bytes(data, policy=email.policy.compat32)
    cte = str(msg.get("Content-Transfer-Encoding", "")).strip().lower()
    if msg.is_multipart() or cte in ("quoted-printable", "base64"):
        return msg
    return None


def _decoded(msg: email.message.Message) -> bytes:
    """A transfer-encoded mail as plain bytes: its Subject/From/Date, a blank line, the
    decoded text parts."""
    parts = msg.walk() if msg.is_multipart() else [msg]
    body = b""
    for part in parts:
        if part.is_multipart():
            continue
        payload = part.get_payload(decode=True)
        if isinstance(payload, bytes) and part.get_content_maintype() == "text":
            body += payload if payload.endswith(b"\n") or not payload else payload + b"\n"
    head = b""
    for key in ("From", "Date", "Subject"):
        value = msg.get(key)
        if value is not None:
            head += f"{key}: {' '.join(str(value).split())}\n".encode("utf-8", "replace")
    return head + b"\n" + body


_DIFF_START = re.compile(rb"^(?:diff --git |Index: |--- (?=.*\n\+\+\+ ))", re.MULTILINE)


def _recoded_mail(data: bytes) -> bytes | None:
    """A mail whose header is in its declared charset (say ISO-8859-1), with the header
    recoded to UTF-8 and the diff's bytes untouched; None when it is no such mail."""
    if not (_MBOX_SEPARATOR.match(data[:200]) or re.match(rb"(From|Subject|Date): ", data)):
        return None
    m = _DIFF_START.search(data)
    cut = m.start() if m else len(data)
    msg = email.message_from_bytes(data[:cut], policy=email.policy.compat32)
    charset = msg.get_content_charset() or "latin-1"
    try:
        lead = data[:cut].decode(charset)
    except (LookupError, UnicodeDecodeError):
        lead = data[:cut].decode("latin-1")
    return lead.encode("utf-8") + data[cut:]


def read_patch_file(
    path: Path, *, file: str | None, canonical: bool = False, strip: int | None = None
) -> list[Incoming]:
    """The patches in one file: one, or one per message of an mbox holding several.

    ``file`` is the name to keep in patches/ (None: ``<name>.patch``); an mbox of
    several mails has no name per patch, so its patches get ``<name>.patch``.
    """
    data = read_regular(path)
    messages = _split_mbox(data)
    if len(messages) > 1:
        return [
            _read(
                msg,
                source=f"{path} (message {i})",
                file=None,
                stem=None,
                canonical=canonical,
                strip=strip,
            )
            for i, msg in enumerate(messages, 1)
        ]
    return [
        _read(data, source=str(path), file=file, stem=path.name, canonical=canonical, strip=strip)
    ]


def _read(
    data: bytes,
    *,
    source: str,
    file: str | None,
    stem: str | None,
    canonical: bool,
    strip: int | None = None,
) -> Incoming:
    encoded = _encoded_mail(data)
    if encoded is not None:
        data = _decoded(encoded)
        canonical = True  # the file's own bytes are not a diff: store the decoded form
    try:
        patch = parse_patch(data, source=source, strip=strip)
    except PatchParseError as exc:
        recoded = _recoded_mail(data) if isinstance(exc, PatchEncodingError) else None
        if recoded is None:
            raise
        data, canonical = recoded, True
        patch = parse_patch(data, source=source, strip=strip)
    if not patch.files:
        raise PatchParseError(
            f"{source}: contains no diff (no 'diff --git' or '--- / +++' lines)",
            tip="import a file made by `git diff`, `git format-patch`, `diff -u` or quilt",
        )
    lead = data[: len(data) - len(patch.diff)].decode("utf-8", "surrogateescape")
    layout = HeaderLayout.parse(lead)
    fields = header_fields(lead)
    description = layout.description
    name: str | None = None
    if layout.mail:
        summary = layout.subject
        trailer = _TRAILER.search(description)
        if trailer is not None:
            # A mail forkpatch made from its own commit: "name: summary", the trailer,
            # a fixed author and date. It comes home in forkpatch's own form.
            name = trailer.group(1)
            if summary.startswith(f"{name}: "):
                summary = summary[len(name) + 2 :]
            description = _TRAILER.sub("", description).strip()
            canonical = True
        slug = _file_slug(stem) if stem else slugify(summary)
    else:
        summary = next(
            (
                value.strip()
                for key, value in fields
                if key.lower() in ("description", "subject") and value.strip()
            ),
            "",
        ) or next((ln.strip() for ln in description.splitlines() if ln.strip()), "")
        slug = _file_slug(stem) if stem else slugify(summary)
    summary = " ".join(summary.split())[:_SUMMARY_MAX] or (
        PurePosixPath(stem).stem if stem else "imported patch"
    )
    upstream = "; ".join(
        f"{key}: {value}"
        for wanted in _UPSTREAM_FIELDS
        for key, value in fields
        if key.lower() == wanted or (wanted == "bug" and key.lower().startswith("bug-"))
    )
    origin = next((value for key, value in fields if key.lower() == "origin"), "")
    # A forkpatch mail's From id is a local commit, never an upstream one.
    refs = upstream_refs(lead if name is None else description + "\n" + layout.notes)
    inc = Incoming(
        source=source,
        data=data,
        patch=patch,
        file=file,
        summary=summary,
        slug=slug,
        name=name,
        origin=origin,
        upstream=upstream,
        upstream_commits=tuple(refs),
        strip=strip,
    )
    if canonical:
        inc.canonical = True
        inc.canonical_header = _canonical_header(description, layout)
        inc.patch = _stored_patch(inc, patch)
    return inc


def _stored_patch(inc: Incoming, patch: PatchFile) -> PatchFile:
    """``patch`` (parsed from ``inc.data``) as it will be stored: in forkpatch's own
    form (the canonical header and the diff) when ``inc`` is canonical."""
    if not inc.canonical:
        return patch
    return parse_patch(
        format_patch(inc.canonical_header, patch.diff), source=inc.source, strip=inc.strip
    )


def _strip_crlf(inc: Incoming) -> None:
    """``inc`` with LF line endings: its bytes, and the patch parsed from them."""
    inc.data = lf_form(inc.data)
    inc.patch = _stored_patch(inc, parse_patch(inc.data, source=inc.source, strip=inc.strip))


def _canonical_header(description: str, layout: HeaderLayout) -> str:
    """forkpatch's own header for a patch: the description, then any notes that were
    below ``---`` other than a diffstat (``Upstream-Status:`` there is kept)."""
    notes = layout.notes
    if layout.stat_span is not None and layout.stat_span[0] >= layout.notes_start:
        a, b = (x - layout.notes_start for x in layout.stat_span)
        notes = notes[:a] + notes[b:]
    lines = notes.splitlines()
    if lines and lines[0].rstrip() == "---":
        lines = lines[1:]
    extra = "\n".join(lines).strip()
    return f"{description}\n\n{extra}".strip() if extra else description


def _series_lines(listing: Path | None, directory: Path) -> tuple[str, list[str]]:
    """(name for messages, lines) of a quilt series file, ``listing`` ('-': stdin)."""
    if listing is not None and str(listing) == "-":
        return "<stdin>", sys.stdin.read().splitlines()
    series = listing if listing is not None else directory / "series"
    if not series.is_file():
        raise UsageError(
            f"{directory} has no 'series' file",
            tip="give the order another way: `--series LIST` (one patch per line, as in "
            "quilt's series file; '-' reads stdin), or name the files in order: "
            "`forkpatch import DIR/first.patch DIR/second.patch ...` (names are kept)",
        )
    return str(series), series.read_text(encoding="utf-8", errors="surrogateescape").splitlines()


def read_series_dir(
    directory: Path, *, listing: Path | None = None, canonical: bool = False
) -> list[Incoming]:
    """The patches of a quilt directory in the order its ``series`` file (or ``listing``)
    gives; each keeps its path relative to ``directory`` as its file name."""
    where, lines = _series_lines(listing, directory)
    out = []
    for lineno, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        rel = parts[0]
        pure = PurePosixPath(rel)
        if pure.is_absolute() or ".." in pure.parts:
            raise UsageError(f"{where}:{lineno}: patch '{rel}' is outside {directory}")
        opts = parts[1:]
        if any(o not in ("-p1", "-p0", "-p", "1", "0") for o in opts):
            raise UsageError(f"{where}:{lineno}: unsupported quilt options {' '.join(opts)}")
        path = directory / pure
        if not path.is_file():
            raise UsageError(f"{where}:{lineno}: {path} does not exist")
        kept = "/".join(p for p in pure.parts if p != ".")
        got = read_patch_file(path, file=kept, canonical=canonical)
        if len(got) != 1:
            raise UsageError(
                f"{where}:{lineno}: {path} holds {len(got)} mails; quilt applies a file "
                "as one patch",
                tip="split it into one file per patch (`git mailsplit`), or import the mbox "
                "on its own",
            )
        # quilt's -p level (1 unless the line says -p0). forkpatch's files carry no
        # level: where the names read differently without it (a -p0 file, or -p1 names
        # with one top directory such as dir/x.orig and dir/x), the file is stored in
        # git's form, which `git apply` and `quilt push` read at -p1.
        level = 0 if opts in (["-p0"], ["-p", "0"]) else 1
        if level == 0 or _names(got[0].patch) != _names(
            parse_patch(got[0].data, source=got[0].source, strip=level)
        ):
            got = read_patch_file(path, file=kept, canonical=True, strip=level)
            for inc in got:
                inc.keep_file = True  # its name, subdirectory included, stays
            log.warn(
                f"{where}:{lineno}: {rel} is a -p{level} patch; stored in git's form "
                "(a/ and b/ names) so that `git apply` and `quilt push` read it as it is meant"
            )
        out.extend(got)
    return out


def _names(patch: PatchFile) -> list[tuple[str | None, str | None]]:
    return [(f.old_path, f.new_path) for f in patch.files]


# --------------------------------------------------------------------------- naming


def _unique(base: str, taken: set[str], files: set[str]) -> str:
    candidate = base
    n = 2
    while candidate in taken or f"{candidate}.patch" in files:
        suffix = f"-{n}"
        candidate = base[: 80 - len(suffix)].rstrip("-._") + suffix
        n += 1
    return candidate


def _own_file(inc: Incoming, rename: bool) -> bool:
    """Whether ``inc`` keeps its own file name in patches/."""
    return inc.file is not None and not rename and (not inc.canonical or inc.keep_file)


def _assign_names_and_files(
    project: Project, incoming: list[Incoming], *, rename: bool
) -> list[PatchEntry]:
    """Give every incoming patch a unique name and a file in patches/; raise on clashes."""
    series = project.series
    taken = set(series.names())
    listed = {p.file: p.name for p in series.patches if p.file}
    files_taken = set(listed)
    for inc in incoming:
        if inc.name is not None and not NAME_RE.match(inc.name):
            raise UsageError(
                f"'{inc.name}' (from {inc.source}) is not a valid patch name",
                tip="use lower-case letters, digits, '.', '_' and '-'",
            )
    entries = []
    for inc in incoming:
        if inc.name is not None:
            if inc.name in taken:
                raise UsageError(
                    f"a patch named '{inc.name}' already exists (from {inc.source})",
                    tip="pass --name NEW, or `forkpatch delete` the old one first",
                )
            name = inc.name
        else:
            own = inc.file if _own_file(inc, rename) else None
            name = _unique(inc.slug, taken, files_taken if own is None else set())
        file = inc.file if _own_file(inc, rename) else None
        file = file or f"{name}.patch"
        try:
            check_series_file_path(file, where=inc.source)
        except SeriesError as exc:
            raise UsageError(exc.message, tip="pass --rename to store it as <name>.patch") from None
        if file in files_taken:
            owner = listed.get(file)
            raise UsageError(
                f"patches/{file} (from {inc.source}) "
                + (
                    f"is already the file of patch '{owner}'"
                    if owner
                    else "is also the file of another patch of this import"
                ),
                tip="pass --rename to store each patch as patches/<name>.patch"
                + (f", or `forkpatch delete {owner}` first" if owner else ""),
            )
        target = project.patches_dir / file
        if target.exists() and target.resolve() != Path(inc.source).resolve():
            raise UsageError(
                f"patches/{file} already exists (a file series.yaml does not list)",
                tip="pass --rename to store it as patches/<name>.patch, or remove the file",
            )
        taken.add(name)
        files_taken.add(file)
        entries.append(
            PatchEntry(
                name=name,
                file=file,
                summary=inc.summary or name,
                origin=inc.origin,
                upstream=inc.upstream,
                upstream_commits=inc.upstream_commits,
            )
        )
    return entries


# --------------------------------------------------------------------------- import


def import_patches(
    project: Project,
    *,
    files: list[Path],
    quilt_dir: Path | None,
    series_list: Path | None = None,
    name: str | None = None,
    after: str | None = None,
    rename: bool = False,
    canonical: bool = False,
) -> list[PatchEntry]:
    """Import ``quilt_dir``'s series (in the order of its series file or ``series_list``)
    and then ``files``, in order, after ``after`` (default: at the end)."""
    incoming: list[Incoming] = []
    if quilt_dir is not None:
        incoming.extend(read_series_dir(quilt_dir, listing=series_list, canonical=canonical))
    elif series_list is not None:
        raise UsageError("--series goes with --quilt DIR", tip="--quilt DIR --series LIST")
    for f in files:
        incoming.extend(read_patch_file(f, file=f.name, canonical=canonical))
    if name is not None:
        if len(incoming) != 1:
            raise UsageError("--name works with a single patch only")
        incoming[0].name = name
    new_entries = _assign_names_and_files(project, incoming, rename=rename)

    series = project.series
    position = len(series.patches) if after is None else series.index(after) + 1
    entries = list(series.patches)
    entries[position:position] = new_entries
    parsed = {e.name: inc.patch for e, inc in zip(new_entries, incoming, strict=True)}
    items = [
        Item(e, parsed[e.name] if e.name in parsed else project.load_patch(e)) for e in entries
    ]
    fork = project.fork()
    base = fork.verify_base(series.base.tag, series.base.commit)
    by_entry = {e.name: inc for e, inc in zip(new_entries, incoming, strict=True)}
    converted: set[str] = set()  # CRLF stripped once; a second failure is the patch's own
    while True:
        result = SeriesApplier(fork.store, base).run(items, write=True)
        bad = result.first_conflict()
        if bad is None:
            break
        inc = by_entry.get(bad.name)
        if inc is None or bad.name in converted or not crlf_throughout(inc.data):
            raise PatchApplyError(
                bad.describe_failure(f"{series.base.tag} with the patches before it")
                + "\nnothing was imported",
                tip="import it against the right base, or fix it and import again",
            )
        # Saved with Windows line endings throughout (a mail client, an editor): what
        # `git am` does by default, strip the CRs, and try again.
        _strip_crlf(inc)
        converted.add(bad.name)
        log.warn(
            f"{inc.source}: every line ended in CRLF and it did not apply as it is; "
            f"imported with LF line endings (as `git am` does)"
        )
        items = [Item(i.entry, inc.patch) if i.entry.name == bad.name else i for i in items]
    diffs = diffs_of_commits(fork.store, [r.commit for r in result.results if r.commit])
    by_name = {r.name: r for r in result.results}
    writes: dict[PatchEntry, bytes] = {}
    with PatchTexts(fork.store) as texts:
        for inc, entry in zip(incoming, new_entries, strict=True):
            r = by_name[entry.name]
            if inc.canonical:
                diff = canonical_diff(diffs[r.commit]) if r.commit else b""
                writes[entry] = format_patch(inc.canonical_header, diff)
            elif r.commit is None or r.status == "clean":
                writes[entry] = inc.data  # it is exactly the commit: byte for byte
            else:
                # Applied with an offset: the hunks are rewritten, in the file's style.
                writes[entry] = texts.render(
                    inc.data, commit=r.commit, raw_diff=diffs[r.commit], source=inc.source
                ).data
    # The new files and series.yaml as one unit: a kill never leaves orphan patch files.
    project.commit(writes, series.with_patches(entries))
    # Read by forkpatch, not added outside it: the work tree's record says so.
    project.remember_files(
        {e.name: FileRecord(e.file, project.file_blob(e), None) for e in new_entries}
    )
    return new_entries
