"""The message of a forkpatch commit, written and read back in one place.

Every commit forkpatch makes for a patch is ``name: summary``, the patch's description
and the trailer ``Forkpatch-Patch: NAME`` (:func:`commit_message`); the stack finds its
patches by the trailer (:func:`parse_commit_message`). Kept apart from the engine so
that reading the stack (``top``, ``status``) needs neither the engine nor the patch
parser (the writer imports the header reader when it writes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from forkpatch.series import PatchEntry

TRAILER = "Forkpatch-Patch"

__all__ = ["TRAILER", "commit_message", "parse_commit_message"]


def commit_message(entry: PatchEntry, header: str) -> str:
    """``name: summary``, the description of the patch file's ``header`` (a mail's body
    or the plain text, above any ``---`` line: see patchheader), and the trailer: what
    :func:`parse_commit_message` reads back."""
    from forkpatch.patchheader import description_of

    parts = [f"{entry.name}: {entry.summary}"]
    description = description_of(header)
    if description:
        parts.append(description)
    parts.append(f"{TRAILER}: {entry.name}")
    return "\n\n".join(parts) + "\n"


def parse_commit_message(message: str) -> tuple[str | None, str, str]:
    """Split a forkpatch commit message into (name, summary, header)."""
    lines = message.rstrip("\n").split("\n")
    name = None
    body = lines[1:]
    while body and not body[-1].strip():
        body.pop()
    if body and body[-1].startswith(f"{TRAILER}:"):
        name = body.pop().split(":", 1)[1].strip()
    subject = lines[0] if lines else ""
    summary = subject
    if name and subject.startswith(f"{name}: "):
        summary = subject[len(name) + 2 :]
    header = "\n".join(body).strip("\n")
    return name, summary, header
