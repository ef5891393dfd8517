"""The report of a rebase: JSON for machines, Markdown for a pull request body.

It says where the series moved from and to, what happened to each patch and
why (the evidence of an upstreamed patch, the reason a patch was dropped),
which files in the project changed, and for every patch whose file was
rewritten the range-diff: a unified diff of the old patch file against the new
one, so that a reviewer sees exactly what moved.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forkpatch.escape import md_cell, md_code, md_fence, md_text
from forkpatch.fsutil import atomic_write
from forkpatch.rebase.plan import DROPPED, Plan
from forkpatch.series import PATCHES_DIR, Series

REPORT_VERSION = 1

# The report is a JSON document for other programs (and the Markdown renders it).
Report = dict[str, Any]


def range_diff(old: bytes, new: bytes, *, name: str, old_label: str, new_label: str) -> str:
    """Unified diff of two versions of one patch file (empty when they are equal)."""
    a = old.decode("utf-8", "replace").splitlines(keepends=True)
    b = new.decode("utf-8", "replace").splitlines(keepends=True)
    import difflib  # only when a report is written: keeps it out of every start-up

    lines = difflib.unified_diff(
        a, b, fromfile=f"{name} ({old_label})", tofile=f"{name} ({new_label})", n=3
    )
    out = []
    for line in lines:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


@dataclass(frozen=True)
class Texts:
    """The bytes of the patch files before the rebase and, for those rewritten, after."""

    old: Mapping[str, bytes]
    new: Mapping[str, bytes]


def build(
    plan: Plan,
    *,
    series: Series,
    texts: Texts,
    changed_files: Sequence[str],
    options: Mapping[str, Any],
) -> Report:
    """The report as a JSON-ready dict (``series`` is the series before the rebase)."""
    old_texts, new_texts = texts.old, texts.new
    files = {p.name: p.file for p in series.patches}
    patches = []
    dropped = []
    for o in plan.outcomes:
        entry: dict[str, Any] = o.to_json()
        entry.pop("commit", None)
        file = files.get(o.name)
        entry["patch_file"] = f"{PATCHES_DIR}/{file}" if file else None
        rd = ""
        if o.name in new_texts and o.name in old_texts:
            rd = range_diff(
                old_texts[o.name],
                new_texts[o.name],
                name=entry["patch_file"],
                old_label=plan.base,
                new_label=plan.onto,
            )
        entry["rewritten"] = bool(rd)
        if rd:
            entry["range_diff"] = rd
        if o.status in DROPPED:
            reason = o.evidence or o.status
            entry["dropped"] = reason
            dropped.append({"name": o.name, "status": o.status, "reason": reason})
        patches.append(entry)
    counts = Counter(o.status for o in plan.outcomes)
    return {
        "version": REPORT_VERSION,
        "kind": "rebase",
        "from": {"tag": plan.base, "commit": plan.base_commit},
        "to": {"tag": plan.onto, "commit": plan.onto_commit},
        "relation": plan.relation,
        "note": plan.note,
        "options": dict(options),
        "summary": dict(sorted(counts.items())),
        "patches": patches,
        "dropped": dropped,
        "changed_files": list(changed_files),
    }


def markdown(report: Mapping[str, Any]) -> str:
    """The report as Markdown, suitable as a pull request body."""
    f, t = report["from"], report["to"]
    out = [f"# Rebase of the patch series: {md_cell(f['tag'])} → {md_cell(t['tag'])}", ""]
    out.append(
        f"- from {md_code(f['tag'])} (`{f['commit'][:12]}`) "
        f"to {md_code(t['tag'])} (`{t['commit'][:12]}`)"
    )
    if report.get("note"):
        out.append(f"- **note:** {md_cell(report['note'])}")
    summary = ", ".join(f"{n} {s}" for s, n in report["summary"].items())
    out.append(f"- {len(report['patches'])} patch(es): {summary or 'none'}")
    opts = report.get("options", {})
    out.append(
        f"- 3-way merge: {'on' if opts.get('three_way', True) else 'off (--no-3way)'}"
        f", fuzz: {opts.get('fuzz', 0)}"
    )
    out += ["", "| # | patch | status | files | evidence / detail |", "|---|---|---|---|---|"]
    for i, p in enumerate(report["patches"], 1):
        why = p.get("evidence") or "; ".join(p.get("detail", [])[:2])
        if p.get("conflicts"):
            why = "; ".join(c["reason"] for c in p["conflicts"])
        files = ", ".join(md_code(x) for x in p.get("files", [])[:4])
        if len(p.get("files", [])) > 4:
            files += f" (+{len(p['files']) - 4})"
        out.append(
            f"| {i} | {md_code(p['name'])} | {p['status']} | {files or '-'} | {md_cell(why) or '-'} |"
        )
    if report["dropped"]:
        out += ["", "## Dropped from the series", ""]
        for d in report["dropped"]:
            out.append(f"- {md_code(d['name'])} ({d['status']}): {md_cell(d['reason'])}")
    out += ["", "## Files changed in the project", ""]
    if report["changed_files"]:
        out += [f"- {md_code(x)}" for x in report["changed_files"]]
    else:
        out.append("- none: the series already applies exactly")
    rewritten = [p for p in report["patches"] if p.get("range_diff")]
    if rewritten:
        out += ["", "## Range-diff of the patches that changed", ""]
        for p in rewritten:
            fence = md_fence(p["range_diff"])
            out += [f"### {md_code(p['name'])} ({p['status']})", ""]
            out += [f"{fence}diff", md_text(p["range_diff"].rstrip("\n")), fence, ""]
    return "\n".join(out).rstrip("\n") + "\n"


def file_stem(report: Mapping[str, Any]) -> str:
    def safe(tag: str) -> str:
        return re.sub(r"[^A-Za-z0-9._-]+", "_", tag)

    return f"rebase-{safe(report['from']['tag'])}-to-{safe(report['to']['tag'])}"


def write(report: Mapping[str, Any], directories: Sequence[Path]) -> list[Path]:
    """Write ``<stem>.json`` and ``<stem>.md`` into each directory; returns the paths."""
    paths = []
    stem = file_stem(report)
    text = (json.dumps(report, indent=2) + "\n").encode()
    md = markdown(report).encode()
    for d in directories:
        for path, data in ((d / f"{stem}.json", text), (d / f"{stem}.md", md)):
            atomic_write(path, data)
            paths.append(path)
    return paths
