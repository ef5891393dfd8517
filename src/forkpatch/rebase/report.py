"""The report of a rebase: JSON for machines, Markdown for a pull request body.

It says where the series moved from and to, what happened to each patch and
why (the evidence of an upstreamed patch, the reason a patch was dropped),
which files in the project changed, and for every patch whose file was
rewritten the range-diff: a unified diff of the old patch file against the new
one, so that a reviewer sees exactly what moved.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from forkpatch.escape import md_cell, md_code, md_fence, md_text
from forkpatch.fsutil import atomic_write_each, name_part
from forkpatch.kinds import DROPPED_STATUSES, DroppedStatus, OutcomeStatus, Relation
from forkpatch.rebase.plan import Outcome, Plan
from forkpatch.series import PATCHES_DIR, Series

REPORT_VERSION = 1


def range_diff(old: bytes, new: bytes, *, name: str, old_label: str, new_label: str) -> str:
    """Unified diff of two versions of one patch file (empty when they are equal), by
    libgit2's xdiff in process: a large file's few changed hunk lines cost little."""
    import pygit2  # only when a report is written (the finish has it loaded)
    from pygit2.enums import DiffOption

    if old == new:
        return ""
    patch = pygit2.Patch.create_from(
        old, new, old_as_path=name, new_as_path=name, flag=DiffOption.FORCE_TEXT, context_lines=3
    )
    hunks = patch.data.partition(b"\n@@ ")[2]
    if not hunks:
        return ""
    head = f"--- {name} ({old_label})\n+++ {name} ({new_label})\n@@ "
    return head + hunks.decode("utf-8", "replace")


@dataclass(frozen=True)
class Texts:
    """The bytes of the patch files before the rebase and, for those rewritten, after."""

    old: Mapping[str, bytes]
    new: Mapping[str, bytes]


@dataclass(frozen=True)
class ReportOptions:
    """How the rebase merged: what the report says it was asked for."""

    three_way: bool = True
    fuzz: int = 0

    def to_json(self) -> dict[str, object]:
        return {"three_way": self.three_way, "fuzz": self.fuzz}


@dataclass(frozen=True)
class Endpoint:
    """Where the series was or went: a tag (or a branch) and its commit."""

    tag: str
    commit: str

    def to_json(self) -> dict[str, object]:
        return {"tag": self.tag, "commit": self.commit}


@dataclass(frozen=True)
class Dropped:
    """A patch the rebase took out of the series, and why."""

    name: str
    status: DroppedStatus
    reason: str

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "status": self.status, "reason": self.reason}


@dataclass(frozen=True)
class ReportedPatch:
    """One patch's outcome, its file and, when the file was rewritten, the range-diff."""

    outcome: Outcome
    patch_file: str | None  # "patches/<file>"
    range_diff: str = ""  # empty: the file was not rewritten

    @property
    def name(self) -> str:
        return self.outcome.name

    @property
    def status(self) -> OutcomeStatus:
        return self.outcome.status

    @property
    def rewritten(self) -> bool:
        return bool(self.range_diff)

    @property
    def dropped(self) -> str | None:
        """Why the patch left the series (None when it stays)."""
        got = self.drop
        return None if got is None else got.reason

    @property
    def drop(self) -> Dropped | None:
        """The patch as it left the series (None when it stays)."""
        for status in DROPPED_STATUSES:
            if status == self.outcome.status:
                return Dropped(self.name, status, self.outcome.evidence or status)
        return None

    @property
    def why(self) -> str:
        """The evidence or the first details, or the reasons of a conflict."""
        o = self.outcome
        if o.conflicts:
            return "; ".join(c.reason for c in o.conflicts)
        return o.evidence or "; ".join(o.detail[:2])

    def to_json(self) -> dict[str, object]:
        entry = self.outcome.to_json()
        entry.pop("commit", None)  # a commit of the rebase's own store
        entry["patch_file"] = self.patch_file
        entry["rewritten"] = self.rewritten
        if self.range_diff:
            entry["range_diff"] = self.range_diff
        if self.dropped is not None:
            entry["dropped"] = self.dropped
        return entry


@dataclass(frozen=True)
class RebaseReport:
    """What a finished rebase did: from where to where, each patch, the project's files."""

    source: Endpoint  # "from": the series' base before the rebase
    target: Endpoint  # "to"
    relation: Relation
    note: str | None
    options: ReportOptions
    patches: tuple[ReportedPatch, ...]
    changed_files: tuple[str, ...]  # project-relative paths the rebase changed

    @property
    def summary(self) -> dict[str, int]:
        """How many patches ended in each status, by status name."""
        return dict(sorted(Counter(p.status for p in self.patches).items()))

    @property
    def dropped(self) -> tuple[Dropped, ...]:
        return tuple(d for p in self.patches if (d := p.drop) is not None)

    @property
    def file_stem(self) -> str:
        """``rebase-<from>-to-<to>``: the name of the report's files, without suffix."""
        return f"rebase-{name_part(self.source.tag)}-to-{name_part(self.target.tag)}"

    def to_json(self) -> dict[str, object]:
        """The report file's JSON document (its keys in this order)."""
        return {
            "version": REPORT_VERSION,
            "kind": "rebase",
            "from": self.source.to_json(),
            "to": self.target.to_json(),
            "relation": self.relation,
            "note": self.note,
            "options": self.options.to_json(),
            "summary": self.summary,
            "patches": [p.to_json() for p in self.patches],
            "dropped": [d.to_json() for d in self.dropped],
            "changed_files": list(self.changed_files),
        }


def build(
    plan: Plan,
    *,
    series: Series,
    texts: Texts,
    changed_files: Sequence[str],
    options: ReportOptions,
) -> RebaseReport:
    """The report of ``plan`` (``series`` is the series before the rebase)."""
    old_texts, new_texts = texts.old, texts.new
    files = {p.name: p.file for p in series.patches}
    patches = []
    for o in plan.outcomes:
        file = files.get(o.name)
        patch_file = f"{PATCHES_DIR}/{file}" if file else None
        rd = ""
        if o.name in new_texts and o.name in old_texts:
            rd = range_diff(
                old_texts[o.name],
                new_texts[o.name],
                name=str(patch_file),
                old_label=plan.base,
                new_label=plan.onto,
            )
        patches.append(ReportedPatch(o, patch_file, rd))
    return RebaseReport(
        source=Endpoint(plan.base, plan.base_commit),
        target=Endpoint(plan.onto, plan.onto_commit),
        relation=plan.relation,
        note=plan.note,
        options=options,
        patches=tuple(patches),
        changed_files=tuple(changed_files),
    )


def markdown(report: RebaseReport) -> str:
    """The report as Markdown, suitable as a pull request body."""
    f, t = report.source, report.target
    out = [f"# Rebase of the patch series: {md_cell(f.tag)} → {md_cell(t.tag)}", ""]
    out.append(
        f"- from {md_code(f.tag)} (`{f.commit[:12]}`) to {md_code(t.tag)} (`{t.commit[:12]}`)"
    )
    if report.note:
        out.append(f"- **note:** {md_cell(report.note)}")
    summary = ", ".join(f"{n} {s}" for s, n in report.summary.items())
    out.append(f"- {len(report.patches)} patch(es): {summary or 'none'}")
    opts = report.options
    out.append(f"- 3-way merge: {'on' if opts.three_way else 'off (--no-3way)'}, fuzz: {opts.fuzz}")
    out += ["", "| # | patch | status | files | evidence / detail |", "|---|---|---|---|---|"]
    for i, p in enumerate(report.patches, 1):
        names = p.outcome.files
        files = ", ".join(md_code(x) for x in names[:4])
        if len(names) > 4:
            files += f" (+{len(names) - 4})"
        out.append(
            f"| {i} | {md_code(p.name)} | {p.status} | {files or '-'} | {md_cell(p.why) or '-'} |"
        )
    if report.dropped:
        out += ["", "## Dropped from the series", ""]
        for d in report.dropped:
            out.append(f"- {md_code(d.name)} ({d.status}): {md_cell(d.reason)}")
    out += ["", "## Files changed in the project", ""]
    if report.changed_files:
        out += [f"- {md_code(x)}" for x in report.changed_files]
    else:
        out.append("- none: the series already applies exactly")
    rewritten = [p for p in report.patches if p.range_diff]
    if rewritten:
        out += ["", "## Range-diff of the patches that changed", ""]
        for p in rewritten:
            fence = md_fence(p.range_diff)
            out += [f"### {md_code(p.name)} ({p.status})", ""]
            out += [f"{fence}diff", md_text(p.range_diff.rstrip("\n")), fence, ""]
    return "\n".join(out).rstrip("\n") + "\n"


def write(report: RebaseReport, directories: Sequence[Path]) -> list[Path]:
    """Write ``<stem>.json`` and ``<stem>.md`` into each directory; returns the paths."""
    stem = report.file_stem
    text = (json.dumps(report.to_json(), indent=2) + "\n").encode()
    md = markdown(report).encode()
    files = {}
    for d in directories:
        files[d / f"{stem}.json"] = text
        files[d / f"{stem}.md"] = md
    atomic_write_each(files)  # each file whole; flushed together
    return list(files)
