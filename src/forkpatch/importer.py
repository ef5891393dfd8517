"""Import patches: git format-patch files, mbox, plain unified diffs, quilt series.

Every imported patch is validated (parsed, paths checked), applied in memory on
top of the series, and written back in forkpatch's canonical form. Nothing is
written unless all of them apply; patch files first, series.yaml last.
"""

from __future__ import annotations

import email
import email.header
import email.policy
import mailbox
import re
from dataclasses import dataclass
from pathlib import Path

from forkpatch.engine import Item, SeriesApplier, canonical_diff, diffs_of_commits
from forkpatch.errors import PatchApplyError, PatchParseError, UsageError
from forkpatch.patchfile import format_patch, parse_patch
from forkpatch.project import Project
from forkpatch.series import NAME_RE, PatchEntry
from forkpatch.stack import describe_failure


@dataclass
class Incoming:
    name: str
    summary: str
    header: str
    diff: bytes
    source: str


_SUBJECT_PREFIX = re.compile(r"^\s*(\[[^\]]*\]\s*)+")
_QUILT_INDEX = re.compile(rb"^Index: [^\n]*\n={20,}\n", re.M)


def slugify(text: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    slug = re.sub(r"^\d{4}-", "", slug) if re.match(r"^\d{4}-", slug) else slug
    slug = slug[:60].rstrip("-")
    return slug or "patch"


def _decode_header(value: str | None) -> str:
    if not value:
        return ""
    parts = email.header.decode_header(value)
    out = []
    for chunk, charset in parts:
        if isinstance(chunk, bytes):
            out.append(chunk.decode(charset or "utf-8", "replace"))
        else:
            out.append(chunk)
    return " ".join("".join(out).split())


def _split_mail_body(body: bytes) -> tuple[str, bytes]:
    """format-patch body -> (description, diff) without diffstat and signature."""
    lines = body.split(b"\n")
    diff_start = next(
        (
            i
            for i, ln in enumerate(lines)
            if ln.startswith(b"diff --git ")
            or (ln.startswith(b"--- ") and i + 1 < len(lines) and lines[i + 1].startswith(b"+++ "))
        ),
        len(lines),
    )
    desc_lines = lines[:diff_start]
    # The description ends at the "---" separator that precedes the diffstat.
    if b"---" in desc_lines:
        desc_lines = desc_lines[: desc_lines.index(b"---")]
    diff_lines = lines[diff_start:]
    # Drop the "-- \n<git version>" signature.
    for i in range(len(diff_lines) - 1, -1, -1):
        if diff_lines[i] == b"-- ":
            diff_lines = diff_lines[:i]
            break
    diff = b"\n".join(diff_lines)
    if diff and not diff.endswith(b"\n"):
        diff += b"\n"
    try:
        desc = b"\n".join(desc_lines).decode("utf-8").strip()
    except UnicodeDecodeError:
        desc = b"\n".join(desc_lines).decode("latin-1").strip()
    return desc, diff


_NAMED_SUBJECT = re.compile(r"^([a-z0-9][a-z0-9._-]{0,79}): (.+)$")
_TRAILER = re.compile(r"(?m)^Forkpatch-Patch: *([a-z0-9][a-z0-9._-]{0,79}) *$")


def _name_from_message(subject: str, desc: str) -> tuple[str, str, str]:
    """A patch's name: its ``Forkpatch-Patch`` trailer, a ``name: summary`` subject
    (forkpatch's own commits look like that), or a slug of the subject."""
    name = None
    summary = subject
    m = _NAMED_SUBJECT.match(subject)
    if m:
        name, summary = m.group(1), m.group(2)
    t = _TRAILER.search(desc)
    if t:
        name = t.group(1)
        desc = _TRAILER.sub("", desc).strip()
    return name or slugify(subject), summary, desc


def read_mail(path: Path) -> list[Incoming]:
    data = path.read_bytes()
    messages: list[email.message.Message] = []
    if data.startswith(b"From "):
        box = mailbox.mbox(str(path), create=False)
        try:
            # get_bytes() is the message as stored; Message.as_bytes() would run it
            # through email's generator, which rewrites CRLF line ends in the diff.
            messages = [
                email.message_from_bytes(box.get_bytes(key), policy=email.policy.compat32)
                for key in box.keys()  # noqa: SIM118 (iterating a mailbox yields messages, not keys)
            ]
        finally:
            box.close()
    else:
        messages = [email.message_from_bytes(data, policy=email.policy.compat32)]
    out = []
    for i, msg in enumerate(messages, 1):
        subject = _SUBJECT_PREFIX.sub("", _decode_header(msg.get("Subject"))).strip()
        payload = msg.get_payload(decode=True)
        if not isinstance(payload, bytes):
            raise PatchParseError(
                f"{path}: message {i} has no plain-text body",
                tip="export the patch with `git format-patch`",
            )
        desc, diff = _split_mail_body(payload)
        if not diff.strip():
            raise PatchParseError(f"{path}: message {i} ('{subject}') contains no diff")
        name, summary, desc = _name_from_message(subject, desc)
        out.append(
            Incoming(
                name=name, summary=summary or path.stem, header=desc, diff=diff, source=str(path)
            )
        )
    return out


def read_plain(path: Path, name: str | None) -> Incoming:
    data = _QUILT_INDEX.sub(b"", path.read_bytes())
    patch = parse_patch(data, source=str(path))
    if not patch.files:
        raise PatchParseError(
            f"{path}: contains no diff (no 'diff --git' or '--- / +++' lines)",
            tip="import a file made by `git diff`, `git format-patch`, `diff -u` or quilt",
        )
    header = patch.header.strip()
    summary = header.splitlines()[0].strip() if header else path.stem
    return Incoming(
        name=name or slugify(path.stem),
        summary=summary[:200],
        header=header,
        diff=patch.diff,
        source=str(path),
    )


def read_quilt(directory: Path) -> list[Incoming]:
    series = directory / "series"
    if not series.is_file():
        raise UsageError(
            f"{directory} has no 'series' file", tip="point --quilt at quilt's patches/ directory"
        )
    out = []
    for lineno, raw in enumerate(series.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        rel = parts[0]
        if rel.startswith("/") or ".." in rel.split("/"):
            raise UsageError(f"{series}:{lineno}: patch '{rel}' is outside {directory}")
        opts = parts[1:]
        if any(o not in ("-p1", "-p0", "-p", "1", "0") for o in opts):
            raise UsageError(f"{series}:{lineno}: unsupported quilt options {' '.join(opts)}")
        path = directory / rel
        if not path.is_file():
            raise UsageError(f"{series}:{lineno}: {path} does not exist")
        stem = re.sub(r"\.(patch|diff)$", "", Path(rel).name)
        out.append(read_plain(path, slugify(stem)))
    return out


def _is_mail(path: Path) -> bool:
    with path.open("rb") as fh:
        head = fh.read(512)
    return head.startswith((b"From ", b"From: ", b"Subject: ", b"Date: "))


def import_patches(
    project: Project,
    *,
    files: list[Path],
    quilt_dir: Path | None,
    name: str | None = None,
    after: str | None = None,
) -> list[PatchEntry]:
    incoming: list[Incoming] = []
    if quilt_dir is not None:
        incoming.extend(read_quilt(quilt_dir))
    for f in files:
        if _is_mail(f):
            incoming.extend(read_mail(f))
        else:
            incoming.append(read_plain(f, None))
    if name is not None:
        if len(incoming) != 1:
            raise UsageError("--name works with a single patch only")
        incoming[0].name = name
    series = project.series
    taken = set(series.names())
    for inc in incoming:
        if not NAME_RE.match(inc.name):
            raise UsageError(
                f"'{inc.name}' (from {inc.source}) is not a valid patch name", tip="pass --name"
            )
        if inc.name in taken:
            raise UsageError(
                f"a patch named '{inc.name}' already exists (from {inc.source})",
                tip="pass --name NEW, or `forkpatch delete` the old one first",
            )
        target = project.patches_dir / f"{inc.name}.patch"
        listed = {p.file for p in series.patches}
        if (
            target.exists()
            and f"{inc.name}.patch" not in listed
            and target.resolve() != Path(inc.source).resolve()
        ):
            raise UsageError(
                f"patches/{inc.name}.patch already exists", tip="pass --name NEW or remove the file"
            )
        taken.add(inc.name)

    new_entries = [
        PatchEntry(name=inc.name, file=f"{inc.name}.patch", summary=inc.summary) for inc in incoming
    ]
    parsed = {
        inc.name: parse_patch(format_patch(inc.header, inc.diff), source=inc.source)
        for inc in incoming
    }
    position = len(series.patches) if after is None else series.index(after) + 1
    entries = list(series.patches)
    entries[position:position] = new_entries
    items = []
    for e in entries:
        items.append(Item(e, parsed[e.name] if e.name in parsed else project.load_patch(e)))
    fork = project.fork()
    base = fork.verify_base(series.base.tag, series.base.commit)
    result = SeriesApplier(fork.store, base).run(items, write=True)
    bad = result.first_conflict()
    if bad is not None:
        raise PatchApplyError(
            describe_failure(bad, f"{series.base.tag} with the patches before it")
            + "\nnothing was imported",
            tip="import it against the right base, or fix it and import again",
        )
    diffs = diffs_of_commits(fork.store, [r.commit for r in result.results if r.commit])
    by_name = {r.name: r for r in result.results}
    writes: dict[PatchEntry, tuple[str, bytes]] = {}
    for inc, entry in zip(incoming, new_entries, strict=True):
        r = by_name[entry.name]
        writes[entry] = (inc.header, canonical_diff(diffs[r.commit]) if r.commit else b"")
    # The new files and series.yaml as one unit: a kill never leaves orphan patch files.
    project.commit(writes, series.with_patches(entries))
    return new_entries
