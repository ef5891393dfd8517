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
    PatchesConflict,
    PatchParseError,
    SeriesError,
    UsageError,
)
from forkpatch.fsutil import read_regular
from forkpatch.patchfile import MBOX_SEPARATOR as _MBOX_SEPARATOR
from forkpatch.patchfile import (
    PatchFile,
    crlf_throughout,
    format_patch,
    lf_form,
    parse_patch,
    split_mails,
    upstream_refs,
)
from forkpatch.patchheader import HeaderLayout, header_fields
from forkpatch.patchtext import PatchTexts
from forkpatch.project import Project
from forkpatch.results import PatchResult
from forkpatch.series import (
    NAME_RE,
    UPSTREAM_CREDENTIAL_TIP,
    PatchEntry,
    check_series_file_path,
    upstream_credentials,
)
from forkpatch.stackstate import FileRecord, StackState

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
    # With ``keep_file``: the file's bytes before its diff (description, mail headers,
    # notes), kept above the diff in git's form.
    lead: bytes = b""


_TRAILER = re.compile(r"(?m)^Forkpatch-Patch: *([a-z0-9][a-z0-9._-]{0,79}) *$")
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
    path: Path,
    *,
    file: str | None,
    canonical: bool = False,
    strip: int | None = None,
    one_patch: bool = False,
) -> list[Incoming]:
    """The patches in one file: one, or one per message of an mbox holding several.

    ``file`` is the name to keep in patches/ (None: ``<name>.patch``); an mbox of
    several mails has no name per patch, so its patches get ``<name>.patch``.
    ``one_patch``: the file is one patch whatever it holds (as quilt and ``patch``
    apply it): several mails are one patch under the file's name, its summary the
    first mail's, its upstream commits those every mail names.
    """
    data = read_regular(path)
    messages = split_mails(data)
    if one_patch and len(messages) > 1:
        inc = _read(
            data, source=str(path), file=file, stem=path.name, canonical=canonical, strip=strip
        )
        refs = dict.fromkeys(inc.upstream_commits)
        for msg in messages[1:]:
            m = _DIFF_START.search(msg)
            lead = msg[: m.start() if m else len(msg)].decode("utf-8", "surrogateescape")
            refs.update(dict.fromkeys(upstream_refs(lead)))
        inc.upstream_commits = tuple(refs)
        return [inc]
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
    _refuse_upstream_credentials(source, upstream)
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


_PATCH_SUFFIXES = (".patch", ".diff")


def _name_order_lines(directory: Path) -> list[str]:
    """The ``*.patch``/``*.diff`` files directly in ``directory``, in the byte order of
    their names (``LC_ALL=C ls``): the order some build systems apply a patches/
    directory without a series file."""
    names = sorted(
        (p.name for p in directory.iterdir() if not p.name.startswith(".") and p.is_file()),
        key=lambda n: n.encode("utf-8", "surrogateescape"),
    )
    picked = [n for n in names if n.lower().endswith(_PATCH_SUFFIXES)]
    skipped = [n for n in names if n not in picked]
    if not picked:
        raise UsageError(
            f"{directory} holds no *.patch or *.diff file",
            tip="name the files in order: `forkpatch import FILE...`",
        )
    if skipped:
        log.warn(f"{directory}: not a *.patch or *.diff file, skipped: {', '.join(skipped)}")
    return picked


def _series_lines(
    listing: Path | None, directory: Path, *, name_order: bool = False
) -> tuple[str, list[str]]:
    """(name for messages, lines) of a quilt series file, ``listing`` ('-': stdin), or
    with ``name_order`` the directory's patch files in name order."""
    if name_order:
        if listing is not None:
            raise UsageError(
                "--name-order and --series both give the order", tip="pass one of them"
            )
        return str(directory), _name_order_lines(directory)
    if listing is not None and str(listing) == "-":
        return "<stdin>", sys.stdin.read().splitlines()
    series = listing if listing is not None else directory / "series"
    if not series.is_file():
        raise UsageError(
            f"{directory} has no 'series' file",
            tip="give the order another way: `--name-order` (every *.patch and *.diff file "
            "of DIR in the byte order of their names, as build systems without a series "
            "file apply them), `--series LIST` (one patch per line, as in quilt's series "
            "file; '-' reads stdin), or name the files in order: "
            "`forkpatch import DIR/first.patch DIR/second.patch ...` (names are kept)",
        )
    return str(series), series.read_text(encoding="utf-8", errors="surrogateescape").splitlines()


def read_series_dir(
    directory: Path,
    *,
    listing: Path | None = None,
    canonical: bool = False,
    name_order: bool = False,
) -> list[Incoming]:
    """The patches of a quilt directory in the order its ``series`` file (or ``listing``,
    or with ``name_order`` the names of its patch files) gives; each keeps its path
    relative to ``directory`` as its file name."""
    where, lines = _series_lines(listing, directory, name_order=name_order)
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
        # quilt applies a file as one patch, several format-patch mails in it too.
        got = read_patch_file(path, file=kept, canonical=canonical, one_patch=True)
        # quilt's -p level (1 unless the line says -p0). forkpatch's files carry no
        # level: where the names read differently without it (a -p0 file, or -p1 names
        # with one top directory such as dir/x.orig and dir/x), the diff is stored in
        # git's form, which `git apply` and `quilt push` read at -p1, below the file's
        # own header bytes.
        level = 0 if opts in (["-p0"], ["-p", "0"]) else 1
        at_level = parse_patch(got[0].data, source=got[0].source, strip=level)
        if level == 0 or _names(got[0].patch) != _names(at_level):
            own = got[0]
            got = read_patch_file(path, file=kept, canonical=True, strip=level, one_patch=True)
            for inc in got:
                inc.keep_file = True  # its name, subdirectory included, stays
                if not own.canonical:  # its bytes are text: its header stays as it is
                    inc.lead = own.data[: len(own.data) - len(at_level.diff)]
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


@dataclass(frozen=True)
class ImportOptions:
    """How `forkpatch import` takes its files (each field is the option of that name;
    see :func:`import_patches`)."""

    quilt_dir: Path | None = None
    series_list: Path | None = None
    name_order: bool = False
    name: str | None = None
    after: str | None = None
    rename: bool = False
    canonical: bool = False
    merge: bool = False


def import_patches(
    project: Project, files: list[Path], opts: ImportOptions = ImportOptions()
) -> list[PatchEntry]:
    """Import ``quilt_dir``'s series (in the order of its series file or ``series_list``)
    and then ``files``, in order, after ``after`` (default: at the end).

    ``merge``: a single patch that applies to the base but not on top of the patches
    below it is merged in 3-way (the base as the merge base); if that leaves conflicts,
    it is imported as it is with its images on the base saved, so that ``forkpatch
    push --merge`` brings it into the work tree with conflict markers (then
    :class:`PatchesConflict` is raised, after the import)."""
    incoming: list[Incoming] = []
    if opts.quilt_dir is not None:
        incoming.extend(
            read_series_dir(
                opts.quilt_dir,
                listing=opts.series_list,
                canonical=opts.canonical,
                name_order=opts.name_order,
            )
        )
    elif opts.series_list is not None or opts.name_order:
        option = "--series" if opts.series_list is not None else "--name-order"
        raise UsageError(
            f"{option} goes with --quilt DIR",
            tip=f"--quilt DIR {option}" + (" LIST" if opts.series_list is not None else ""),
        )
    for f in files:
        incoming.extend(read_patch_file(f, file=f.name, canonical=opts.canonical))
    if opts.name is not None:
        if len(incoming) != 1:
            raise UsageError("--name works with a single patch only")
        incoming[0].name = opts.name
    new_entries = _assign_names_and_files(project, incoming, rename=opts.rename)

    series = project.series
    position = len(series.patches) if opts.after is None else series.index(opts.after) + 1
    entries = list(series.patches)
    entries[position:position] = new_entries
    parsed = {e.name: inc.patch for e, inc in zip(new_entries, incoming, strict=True)}
    items = [
        Item(e, parsed[e.name] if e.name in parsed else project.load_patch(e)) for e in entries
    ]
    fork = project.fork()
    base = fork.verify_base(series.base.tag, series.base.commit)
    by_entry = {e.name: inc for e, inc in zip(new_entries, incoming, strict=True)}
    items_of = {e.name for e in series.patches}  # the series as it was before the import
    converted: set[str] = set()  # CRLF stripped once; a second failure is the patch's own
    if opts.merge and len(incoming) != 1:
        raise UsageError(
            "--merge imports a single patch", tip="import the others first, then this one"
        )
    applier = SeriesApplier(fork.store, base)
    pending: dict[str, dict[str, tuple[bytes | None, bytes | None]]] = {}
    while True:
        result = applier.run(items, write=True)
        bad = result.first_conflict()
        if bad is None or bad.name in pending:
            break
        inc = by_entry.get(bad.name)
        if inc is None or bad.name in converted or not crlf_throughout(inc.data):
            images = _images_on_base(applier, _entry_named(new_entries, bad.name), inc)
            if opts.merge and images is not None:
                # It applies to the base: merge it 3-way onto the patches below it.
                pending[bad.name] = images
                applier = SeriesApplier(fork.store, base, three_way=True, merge_bases=pending)
                continue
            raise PatchApplyError(
                bad.describe_failure(f"{series.base.label} with the patches before it")
                + "\nnothing was imported",
                tip=_overlap_tip(bad.name, items, series.base.label, images is not None)
                if inc is not None
                else _above_tip(bad.name, applier, [i for i in items if i.entry.name in items_of]),
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
    if bad is not None and not any(c.merged is not None for c in bad.conflicts):
        raise PatchApplyError(
            bad.describe_failure(f"{series.base.label} with the patches before it")
            + "\nnothing was imported",
            tip="a 3-way merge cannot bring it in (a file it changes is missing or binary): "
            "change it to apply on top of the patches below it",
        )
    if bad is not None:
        _import_with_conflicts(project, bad, by_entry[bad.name], items, pending[bad.name])
    diffs = diffs_of_commits(fork.store, [r.commit for r in result.results if r.commit])
    by_name = {r.name: r for r in result.results}
    writes: dict[PatchEntry, bytes] = {}
    with PatchTexts(fork.store) as texts:
        for inc, entry in zip(incoming, new_entries, strict=True):
            r = by_name[entry.name]
            if inc.canonical:
                diff = canonical_diff(diffs[r.commit]) if r.commit else b""
                writes[entry] = (
                    inc.lead + diff if inc.lead else format_patch(inc.canonical_header, diff)
                )
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


def _entry_named(entries: list[PatchEntry], name: str) -> PatchEntry | None:
    return next((e for e in entries if e.name == name), None)


def _images_on_base(
    applier: SeriesApplier, entry: PatchEntry | None, inc: Incoming | None
) -> dict[str, tuple[bytes | None, bytes | None]] | None:
    """The files an incoming patch touches before and after it, applied to the base
    alone; None when it does not apply there either (or is no incoming patch)."""
    if entry is None or inc is None:
        return None
    alone = SeriesApplier(applier.git, applier.base_commit).run([Item(entry, inc.patch)])
    only = alone.results[0]
    return only.images if only.status != "conflict" else None


def _below(name: str, items: list[Item], paths: set[str]) -> list[str]:
    """The patches before ``name`` that touch one of ``paths``."""
    out = []
    for item in items:
        if item.entry.name == name:
            break
        if item.patch is not None and paths & {
            p for fp in item.patch.files for p in (fp.old_path, fp.new_path) if p
        }:
            out.append(item.entry.name)
    return out


def _above_tip(name: str, applier: SeriesApplier, series_items: list[Item]) -> str:
    """The tip for a patch of the series that fails once the import is below it."""
    before = SeriesApplier(applier.git, applier.base_commit).run(series_items).first_conflict()
    if before is not None and before.name == name:
        return (
            f"patch '{name}' conflicts in the series before this import: resolve it first "
            "(`forkpatch apply`, `forkpatch push --merge`, `forkpatch refresh`)"
        )
    return (
        f"the patches imported below '{name}' change what it needs: import them above "
        f"it (`--after {name}`, or at the end)"
    )


def _overlap_tip(name: str, items: list[Item], tag: str, on_base: bool) -> str:
    if not on_base:
        return (
            f"it does not apply to {tag} alone either: make it against {tag} (or fix its "
            "hunks) and import it again"
        )
    patch = next(i.patch for i in items if i.entry.name == name)
    assert patch is not None
    below = _below(name, items, {fp.path for fp in patch.files})
    return (
        f"it applies to {tag} alone"
        + (f"; {', '.join(repr(n) for n in below)} below it change its files" if below else "")
        + ": `--merge` imports it with a 3-way merge onto the patches below it, and where "
        "that leaves conflicts, as it is, for `forkpatch push --merge` to bring into "
        "the work tree with conflict markers; or change it to apply on top of them "
        "(`--after OTHER` imports it lower)"
    )


def _import_with_conflicts(
    project: Project,
    bad: PatchResult,
    inc: Incoming,
    items: list[Item],
    images: dict[str, tuple[bytes | None, bytes | None]],
) -> None:
    """Write ``inc`` as it is (it applies to the base) and its images on the base as the
    merge base `push --merge` takes, then raise :class:`PatchesConflict`."""
    series = project.series
    entries = [i.entry for i in items]
    entry = next(e for e in entries if e.name == bad.name)
    store = project.fork().store
    state = project.read_state() or StackState()
    saved = {
        **state.merge_bases,
        entry.name: {
            path: (
                None if pair[0] is None else store.hash_blob(pair[0]),
                None if pair[1] is None else store.hash_blob(pair[1]),
            )
            for path, pair in images.items()
        },
    }
    data = format_patch(inc.canonical_header, inc.patch.diff) if inc.canonical else inc.data
    writes: dict[PatchEntry, bytes] = {entry: data}
    project.commit(writes, series.with_patches(entries))
    project.write_state(state.with_(merge_bases=saved))
    project.remember_files({entry.name: FileRecord(entry.file, project.file_blob(entry), None)})
    files = ", ".join(c.path for c in bad.conflicts)
    log.info(
        f"imported {entry.name} -> patches/{entry.file} (as it is: it applies to {series.base.label})"
    )
    log.warn(
        f"patch '{entry.name}' conflicts with the patches below it in: {files}; "
        "`forkpatch push --merge` (after `forkpatch apply` where there is no work tree) "
        "brings it in with conflict markers; resolve them, then `forkpatch refresh`"
    )
    raise PatchesConflict(f"patch '{entry.name}' conflicts")


def _refuse_upstream_credentials(source: str, upstream: str) -> None:
    """A patch whose Forwarded:/Bug:/... URL carries a user name or token would put it
    into series.yaml's ``upstream:``: refused before anything is written."""
    shown = upstream_credentials(upstream)
    if shown is not None:
        raise UsageError(
            f"{source}: its header names {shown}, a URL with credentials; "
            "nothing was imported (series.yaml never holds a credential)",
            tip="remove the user/token part of that URL in the patch file, then import "
            "again. " + UPSTREAM_CREDENTIAL_TIP,
        )
