"""One error root for everything forkpatch reports to a user.

Only the CLI catches these. Each class carries the process exit code it maps
to; every message says what happened and, where there is one, what to do next
(the ``tip``).
"""

from __future__ import annotations


class ForkpatchError(Exception):
    """Base of all errors that are reported to the user without a traceback."""

    exit_code = 1

    def __init__(self, message: str, *, tip: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.tip = tip

    def __str__(self) -> str:
        if self.tip:
            return f"{self.message}\n  tip: {self.tip}"
        return self.message


class UsageError(ForkpatchError):
    """The command line was wrong."""

    exit_code = 2


class SeriesError(ForkpatchError):
    """series.yaml is missing, malformed or inconsistent with patches/."""


class PatchParseError(ForkpatchError):
    """A patch file cannot be parsed."""


class PathSafetyError(ForkpatchError):
    """A patch would write outside the fork tree (or into .git)."""


class PatchApplyError(ForkpatchError):
    """A patch does not apply and no merge was attempted."""

    exit_code = 3


class ConflictError(ForkpatchError):
    """A merge left conflicts that a human must resolve."""

    exit_code = 3


class GitError(ForkpatchError):
    """A git command failed unexpectedly."""


class ForkRepoError(ForkpatchError):
    """The fork repository or a tag in it cannot be found or has moved."""


class StateError(ForkpatchError):
    """An operation is in progress (or not) that prevents this command."""


class LockError(ForkpatchError):
    """Another forkpatch process holds the project lock."""


class BuildError(ForkpatchError):
    """A wheel build failed."""


class SmokeError(ForkpatchError):
    """The smoke suite could not run or failed."""


class PublishError(ForkpatchError):
    """Publishing was refused or failed."""
