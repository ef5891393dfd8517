"""Every exit status of forkpatch, as a class.

Two roots. :class:`ForkpatchError` is everything forkpatch reports to a user as
an error: each message says what happened and, where there is one, what to do
next (the ``tip``). :class:`Finished` is a command that ran to the end and
reports its result by its exit status alone (a ``status`` with a conflicting
patch, a ``track`` that found a release): its output has said everything, so
the CLI prints nothing more. Only the CLI catches either; each class carries
the process exit code it maps to, and README.md lists them.

    0   success                      (the command returned; Finished is the base of the results)
    1   failure                      ForkpatchError and most subclasses (ToolMissing); VerifyMismatch
    2   usage error                  UsageError
    3   a patch conflicts            PatchApplyError, ConflictError; PatchesConflict
    4   internal error (a bug)       InternalError
    5   a smoke tier did not run     TierNotRun (``smoke``: asked for or required, not run)
    10  a newer fork release         NewRelease (``forkpatch track``)
    11  a patch can be dropped       PatchesDroppable (``forkpatch droppable``)
    130 interrupted                  Interrupted (Ctrl-C)
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


class UnresolvedMergeError(SeriesError):
    """A file of the project (series.yaml, a patch file) holds git's conflict markers."""


class NoProjectError(SeriesError):
    """No series.yaml at or above the directory: not inside a project (commands that
    also work without one, such as smoke and publish, go on without it)."""


class PatchParseError(ForkpatchError):
    """A patch file cannot be parsed."""


class PatchEncodingError(PatchParseError):
    """A patch's description is not UTF-8 (a mail in another charset can be recoded)."""


class PathSafetyError(ForkpatchError):
    """A patch would write outside the fork tree (or into .git)."""


class PatchApplyError(ForkpatchError):
    """A patch does not apply and no merge was attempted."""

    exit_code = 3


class ConflictError(ForkpatchError):
    """A merge left conflicts that a human must resolve."""

    exit_code = 3


class InputFileError(ForkpatchError):
    """A file forkpatch reads is not a regular file (a device, a FIFO, a directory, a
    link where none may be) or is larger than forkpatch reads."""


class FetchError(ForkpatchError):
    """An HTTP request failed, ran out of time or answered more than it may; ``status``
    is the HTTP status when the server answered with one."""

    def __init__(self, message: str, *, tip: str | None = None, status: int | None = None):
        super().__init__(message, tip=tip)
        self.status = status


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


class TierNotRun(SmokeError):
    """``smoke``: a tier it was asked for (``--tier``, ``smoke.required-tiers``) did not
    run, or ran incomplete; no check failed (a failed check is exit 1)."""

    exit_code = 5


class PublishError(ForkpatchError):
    """Publishing was refused or failed."""


class ToolMissing(ForkpatchError):
    """A local tool or Python module this command needs is not installed here (the
    message names it and where it was looked for, the tip the line that installs it):
    never reported as a failure of a remote service."""


class InternalError(ForkpatchError):
    """An unexpected exception: a bug in forkpatch (the CLI wraps it in this)."""

    exit_code = 4


class Interrupted(ForkpatchError):
    """The user interrupted the command (Ctrl-C)."""

    exit_code = 130


class Finished(Exception):
    """A command that finished and whose result is its exit status (see the module docstring)."""

    exit_code = 0

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


class PatchesConflict(Finished):
    """``status`` / ``check --onto``: at least one patch conflicts (its report said which)."""

    exit_code = 3


class VerifyMismatch(Finished):
    """``verify``: the wheel's RECORD or provenance does not hold (the report said why)."""

    exit_code = 1


class NewRelease(Finished):
    """``track``: a newer fork release is there to act on."""

    exit_code = 10


class PatchesDroppable(Finished):
    """``droppable``: at least one patch can be dropped (its report said which, and why)."""

    exit_code = 11
