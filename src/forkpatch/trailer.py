"""The trailer that names a forkpatch commit's patch, and reading a commit message back.

Every commit forkpatch makes for a patch ends in ``Forkpatch-Patch: NAME``; the stack
finds its patches by it. Kept apart from the engine so that reading the stack (``top``,
``status``) needs neither the engine nor the patch parser.
"""

from __future__ import annotations

TRAILER = "Forkpatch-Patch"

__all__ = ["TRAILER", "parse_commit_message"]


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
