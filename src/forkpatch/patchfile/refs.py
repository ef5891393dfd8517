"""Upstream references: the upstream commit ids a patch names as its origin."""

from __future__ import annotations

import re
from typing import Protocol

# A commit id: 7 to 64 hex digits standing alone. An abbreviated one must hold a
# letter (so that a bug number or a date is not taken for one).
_COMMIT_ID = re.compile(r"(?<![0-9A-Za-z])([0-9a-fA-F]{7,64})(?![0-9A-Za-z])")
# Lines that name the upstream commit a patch came from, and the group holding it
# (or, for the fields, the value to search for commit ids).
_REF_LINE = re.compile(
    r"^From ([0-9a-f]{40}) "  # a git format-patch mail's mbox line
    r"|\(cherry[ -]picked from commit ([0-9a-fA-F]{7,64})\)"
    r"|^commit ([0-9a-fA-F]{40}) upstream\.?[ \t]*$"  # Linux stable backports
    r"|^\[ *[Uu]pstream commit ([0-9a-fA-F]{7,64}) *\]",
    re.MULTILINE | re.IGNORECASE,
)
_REF_FIELD = re.compile(
    r"^[ \t]*(?:Upstream-Status[ \t]*:[ \t]*(?:Backport|Accepted)\b"
    r"|Origin[ \t]*:[ \t]*(?:upstream|backport)\b|Applied-Upstream[ \t]*:"
    # DEP-3's category is optional: a bare Origin URL into upstream's VCS is one too.
    r"|Origin[ \t]*:(?=[ \t]*[a-z][a-z0-9+.-]*://\S*(?:/commit/|[?;&](?:id|h)=)))(.*)$",
    re.MULTILINE | re.IGNORECASE,
)


class _HasUpstream(Protocol):
    upstream_commits: tuple[str, ...]
    origin: str
    upstream: str


def _commit_ids(text: str) -> list[str]:
    out = []
    for m in _COMMIT_ID.finditer(text):
        oid = m.group(1).lower()
        if (len(oid) in (40, 64) or any(c in "abcdef" for c in oid)) and oid.strip("0"):
            out.append(oid)
    return out


def upstream_refs(source: _HasUpstream | str | bytes) -> list[str]:
    """Upstream commit ids a patch names as its origin, first-seen order, no repeats.

    ``source`` is the text of a patch file (or of its header), or a series entry
    (:class:`forkpatch.series.PatchEntry`: its ``upstream-commits`` list, which
    ``import`` fills, plus ids in its ``origin`` and ``upstream`` texts). Found in
    text: a ``From <id> Mon Sep 17 00:00:00 2001`` mail line, ``(cherry picked
    from commit <id>)``, Linux-stable ``commit <id> upstream.`` and ``[ Upstream
    commit <id> ]``, and ids in the values of ``Upstream-Status: Backport|Accepted
    [...]``, DEP-3 ``Origin: upstream|backport, ...`` and ``Applied-Upstream:``
    (URLs such as ``.../commit/<id>`` or ``?id=<id>`` included). The all-zero id
    of ``format-patch --zero-commit`` is never one.

    These are *candidates*: a mail's ``From`` id may name a local commit. Whoever
    uses them (the rebase's upstream evidence) checks that the commit is in the
    target's history.
    """
    if isinstance(source, bytes):
        source = source.decode("utf-8", "surrogateescape")
    found: list[str] = []
    if isinstance(source, str):
        hits = [(m.start(), next(g for g in m.groups() if g)) for m in _REF_LINE.finditer(source)]
        hits += [(m.start(), m.group(1)) for m in _REF_FIELD.finditer(source)]
        for _pos, text in sorted(hits):
            found.extend(_commit_ids(text))
    else:
        found.extend(o.lower() for o in source.upstream_commits)
        texts = [f"Origin: {source.origin}", *source.upstream.split("; ")]
        found.extend(upstream_refs("\n".join(texts)))
    return list(dict.fromkeys(found))
