"""The command line's entry: :func:`main`, the one error boundary (errors to exit codes,
the pending-rebase note), and the way to each command.

Every command line goes through the click group (:mod:`forkpatch.cli.app`), except the
plain forms of the commands a developer runs between two edits: ``top`` and
``status`` (``st``, ``series``; ``--json``), after any of ``-C DIR``, ``--fork-repo
PATH``, ``-q``/``--quiet`` and ``--debug``. Those run the same function as their
click command (:mod:`forkpatch.cli.readonly`) without loading click, whose import is
a large part of their start-up. Any other form (``--help``, an option spelled
another way or given twice, a ``-C`` that is a file, shell completion) goes
through click, which parses and answers it as always.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TextIO, cast

from forkpatch import log, settings
from forkpatch.errors import Finished, ForkpatchError, InternalError, Interrupted

if TYPE_CHECKING:
    from forkpatch.cli.context import Ctx


def _utf8_args(argv: list[str]) -> list[str]:
    """Arguments a locale could not decode (UTF-8 bytes under LC_ALL=C come in as
    surrogates) read as UTF-8, the encoding of everything forkpatch writes."""
    out = []
    for arg in argv:
        if any("\udc80" <= ch <= "\udcff" for ch in arg):
            raw = arg.encode(sys.getfilesystemencoding(), "surrogateescape")
            arg = raw.decode("utf-8", "surrogateescape")
        out.append(arg)
    return out


def main(argv: list[str] | None = None) -> int:
    log.tolerant_streams()
    argv = _utf8_args(argv if argv is not None else sys.argv[1:])
    debug = "--debug" in argv or settings.flag_or_false("FORKPATCH_DEBUG")
    from forkpatch.cli.context import Ctx

    c = Ctx(debug=debug)  # filled in as the command line is parsed
    code, note = _run(argv, c)
    # `rebase` reports its own state; any other command that ran mentions a rebase in
    # progress (after a Ctrl-C every command does: how to go on or back).
    if c.command is not None and (
        note == "always" or (note == "command" and c.notes_pending_rebase)
    ):
        _hint_pending_operation(c.directory)
    return code


def _run(argv: list[str], c: Ctx) -> tuple[int, Literal["always", "command", "never"]]:
    """The command's exit status, and whether a rebase in progress is worth a note after it
    (not after a usage error or an internal error)."""
    debug = c.debug
    try:
        # From here on a Ctrl-C is a KeyboardInterrupt that the handlers below report
        # (forkpatch.entry ended the process at once while the modules were loading).
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.default_int_handler)
        settings.check_environment()  # a wrong FORKPATCH_* value: exit 2, nothing done
        plain = plain_command(argv, c)
        if plain is not None:
            _run_plain(plain)
        else:
            from forkpatch.cli.app import run_group

            shown = run_group(argv, c)
            if shown is not None:  # click's own error (a usage error), shown by click
                return shown, "never"
    except ForkpatchError as exc:
        if debug:
            _print_traceback()
        log.error(exc.message)
        if exc.tip:
            log.detail(f"  tip: {exc.tip}")
        return exc.exit_code, "command"
    except Finished as exc:
        return exc.exit_code, "command"
    except SystemExit as exc:
        return (int(exc.code or 0) if not isinstance(exc.code, str) else 1), "command"
    except KeyboardInterrupt:
        _report_interrupt(c)
        return Interrupted.exit_code, "always"
    except OSError as exc:
        # The machine said no (permissions, a read-only or full disk): the user's to
        # fix, not a bug. Anything else is still an internal error below.
        known = _ENVIRONMENT_ERRORS.get(exc.errno or 0)
        if known is None:
            return _internal_error(debug), "never"
        if debug:
            _print_traceback()
        where = exc.filename if exc.filename is not None else "a file"
        log.error(f"{where}: {exc.strerror or exc}")
        log.detail(f"  tip: {known}")
        return ForkpatchError.exit_code, "command"
    except Exception:
        return _internal_error(debug), "never"
    return 0, "command"


# ----------------------------------------------------------------- the plain forms

_GLOBAL_VALUES = ("-C", "--fork-repo")
_GLOBAL_FLAGS = ("-q", "--quiet", "--debug")
_PLAIN_COMMANDS = {"top": "top", "status": "status", "st": "status", "series": "status"}


def plain_command(argv: list[str], c: Ctx) -> Callable[[], None] | None:
    """The command to run without click for a plain command line of ``top`` or
    ``status`` (see the module's description), filling in ``c``; None for any other
    (click's to parse).

    Each accepted form is one click parses into exactly these values: the global
    options once each, their values separate words not starting with ``-``, a ``-C``
    directory that click's check (not a file, readable) lets through."""
    if os.environ.get("_FORKPATCH_COMPLETE"):  # click's shell completion
        return None
    given: dict[str, str | bool] = {}
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        arg = argv[i]
        if arg in given or (arg in ("-q", "--quiet") and ("-q" in given or "--quiet" in given)):
            return None
        if arg in _GLOBAL_FLAGS:
            given[arg] = True
            i += 1
        elif arg in _GLOBAL_VALUES and i + 1 < len(argv):
            value = argv[i + 1]
            if not value or value.startswith("-"):
                return None
            given[arg] = value
            i += 2
        else:
            return None
    if i >= len(argv) or argv[i] not in _PLAIN_COMMANDS:
        return None
    name, rest = _PLAIN_COMMANDS[argv[i]], argv[i + 1 :]
    if (name == "top" and rest) or (name == "status" and rest not in ([], ["--json"])):
        return None
    directory = given.get("-C")
    if isinstance(directory, str) and not _plain_directory(directory):
        return None
    fork_repo = given.get("--fork-repo")

    c.directory = Path(directory) if isinstance(directory, str) else None
    c.fork_repo = fork_repo if isinstance(fork_repo, str) else None
    c.command = name

    def run() -> None:
        from forkpatch.cli import readonly

        log.set_quiet(bool(given.get("-q") or given.get("--quiet")))
        if name == "top":
            readonly.top(c)
        else:
            readonly.status(c, as_json=rest == ["--json"], upstream=False)

    return run


def _plain_directory(value: str) -> bool:
    """Whether click's ``-C`` type (a directory, not a file; readable when it exists)
    takes ``value`` as it is."""
    if not os.path.exists(value):
        return True
    return os.path.isdir(value) and os.access(value, os.R_OK)


def _run_plain(run: Callable[[], None]) -> None:
    """``run`` as click runs a command (standalone_mode=False): a Ctrl-C or an end of
    input is reported as an interrupt after a new line on stderr, a closed stdout ends
    the command with status 1 and no second error."""
    try:
        run()
    except (EOFError, KeyboardInterrupt):
        print(file=sys.stderr)
        raise KeyboardInterrupt from None
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            raise
        import click.utils  # what click puts there: flushes at exit stay quiet

        names = ("_PacifyFlushWrapper", "PacifyFlushWrapper")  # the second before click 8.2
        wrapper: Any = next(getattr(click.utils, n) for n in names if hasattr(click.utils, n))
        sys.stdout = cast(TextIO, wrapper(sys.stdout))
        sys.stderr = cast(TextIO, wrapper(sys.stderr))
        raise SystemExit(1) from None


# ----------------------------------------------------------------- errors and notes

_ENVIRONMENT_ERRORS = {
    errno.EACCES: "check that you may use it (its owner and mode), or choose another place",
    errno.EPERM: "check that you may use it (its owner, mode, attributes), or choose another place",
    errno.EROFS: "that file system is read-only: choose another place",
    errno.ENOSPC: "the disk is full: free some space and run the command again",
    errno.EDQUOT: "your disk quota is used up: free some space and run the command again",
    errno.EFBIG: "the file is larger than this process may write (`ulimit -f`, or the file "
    "system's limit): raise the limit or choose another place",
}


def _print_traceback() -> None:
    import traceback  # only for --debug: keeps it out of every start-up

    traceback.print_exc()


def _internal_error(debug: bool) -> int:
    if debug:
        _print_traceback()
    else:
        etype, value, _ = sys.exc_info()
        log.error(f"internal error: {etype.__name__ if etype else '?'}: {value}")
        print("  tip: run again with --debug for a traceback and report it", file=sys.stderr)
    return InternalError.exit_code


def _report_interrupt(c: Ctx) -> None:
    """Ctrl-C: say what state the project is in. Every write of series.yaml and patches/
    is one unit (fsutil.commit_files), so they are as before the command or completely
    written; a unit cut short after its commit point is finished by the next command.
    Before the command line was parsed as far as its command, no command ran."""
    if c.command is None:
        log.error("interrupted (Ctrl-C): no command ran, nothing was changed")
        return
    from forkpatch.forkrepo import STORE_DIR
    from forkpatch.project import COMMIT_JOURNAL, find_root

    directory = c.directory

    state = (
        "series.yaml and patches/ are as they were before this command, or completely "
        "written (forkpatch writes them as one unit, never half); `forkpatch status` "
        "shows where the project and its work tree stand"
    )
    try:
        root = find_root(directory or Path.cwd())
    except Exception:
        root = None
    if root is not None and (root / STORE_DIR / COMMIT_JOURNAL).exists():
        state = (
            "a write of series.yaml and patches/ was cut short after its commit point: "
            "the next forkpatch command on this project finishes it"
        )
    elif root is None:
        state = "no forkpatch project was changed"
    log.error(f"interrupted (Ctrl-C): {state}")


def _hint_pending_operation(directory: Path | None) -> None:
    """A note on stderr when a rebase is in progress in the project (its journal exists);
    the rebase package is imported only then."""
    from forkpatch.forkrepo import STORE_DIR
    from forkpatch.project import REBASE_JOURNAL, find_root

    try:
        journal = find_root(directory or Path.cwd()) / STORE_DIR / REBASE_JOURNAL
        if not (journal.is_file() or journal.is_symlink()):
            return
        from forkpatch.rebase import pending_hint

        hint = pending_hint(directory or Path.cwd())
    except Exception:
        return
    if hint:
        log.detail(f"  note: {hint}")
