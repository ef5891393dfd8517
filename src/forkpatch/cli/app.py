"""The ``forkpatch`` command line: the group, its table of commands, and :func:`main`.

Each command parses its options, opens the project, calls the core and hands the
result to one view; the commands live by group in the modules of this package and are imported only when they
run (the table below names each one's module and function, and carries the short help
that `forkpatch --help` lists). Errors derived from :class:`ForkpatchError` are reported
in one place (:func:`main`) with their exit code; tracebacks only with ``--debug``. A
command's result goes to stdout (``log.result``), progress and diagnostics to stderr,
``--json`` alone to stdout.
"""

from __future__ import annotations

import errno
import importlib
import signal
import sys
import threading
from collections.abc import Mapping
from gettext import gettext as _
from pathlib import Path
from typing import Any, ClassVar, Literal, NamedTuple

import click

from forkpatch import __version__, log, settings
from forkpatch.cli.context import Ctx
from forkpatch.errors import Finished, ForkpatchError, InternalError, Interrupted

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class Entry(NamedTuple):
    """Where a command lives, and the first paragraph of its help (what --help lists)."""

    module: str
    function: str
    summary: str


_STACK = "forkpatch.cli.stack"
_PROJECT = "forkpatch.cli.project"

COMMANDS: Mapping[str, Entry] = {
    "apply": Entry(
        _STACK, "apply", "Create the work tree: the fork at the base, one commit per patch."
    ),
    "base-wheel": Entry(
        "forkpatch.cli.build",
        "base_wheel_cmd",
        "Build the fork's Python-only wheel at the series' base (or REF), for overlay builds.",
    ),
    "build-wheel": Entry(
        "forkpatch.cli.build",
        "build_wheel_cmd",
        "Build the patched fork's wheel(s) into dist/ with a SHA256SUMS.",
    ),
    "check": Entry(
        "forkpatch.cli.rebase",
        "check",
        "Dry run of `rebase --onto TAG`: how each patch would fare. Changes nothing.",
    ),
    "delete": Entry(
        _STACK, "delete", "Remove patch NAME from the series (popping it if it is the top)."
    ),
    "demo": Entry(
        _PROJECT,
        "demo",
        "Run the built-in example end to end in DIR (default: a new temporary directory).",
    ),
    "droppable": Entry(
        "forkpatch.cli.droppable",
        "droppable",
        "Which patches the series no longer needs, on evidence.",
    ),
    "edit": Entry(_STACK, "edit", "Go to patch NAME so that the next edits amend it."),
    "export": Entry(
        _STACK,
        "export",
        "Write every applied patch back to its file (only changed files are rewritten).",
    ),
    "import": Entry(
        _STACK,
        "import_",
        "Import git format-patch files, mbox, plain diffs, or a quilt series.",
    ),
    "init": Entry(
        _PROJECT, "init", "Start a series: write series.yaml and patches/ for the fork at BASE."
    ),
    "move": Entry(
        _STACK,
        "move",
        "Reorder the series: move NAME (checked to still apply before writing).",
    ),
    "new": Entry(_STACK, "new", "Start a new, empty patch NAME on top of the current one."),
    "pop": Entry(_STACK, "pop", "Unapply the top patch (or down to NAME, or --all)."),
    "publish": Entry(
        "forkpatch.cli.publish",
        "publish",
        "Publish WHEEL(s) that passed the smoke suite to an index or a directory.",
    ),
    "push": Entry(
        _STACK, "push", "Apply the next patch (or up to NAME, or --all) in the work tree."
    ),
    "rebase": Entry(
        "forkpatch.cli.rebase",
        "rebase",
        "Move the series onto TAG: refresh the patches, drop the upstreamed ones.",
    ),
    "refresh": Entry(
        _STACK,
        "refresh",
        "Write the top patch (with the work tree's changes) back to its file.",
    ),
    "rename": Entry(
        _STACK, "rename", "Rename patch OLD to NEW (and its file, when named by slug)."
    ),
    "smoke": Entry(
        "forkpatch.cli.smoke",
        "smoke",
        "Install WHEEL(s) in a fresh environment and run the smoke checks there.",
    ),
    "status": Entry(
        _PROJECT,
        "status",
        "Show the patches in order and how each applies to the base (alias: series).",
    ),
    "top": Entry(_STACK, "top", "Print the name of the top applied patch."),
    "track": Entry(
        "forkpatch.cli.track",
        "track",
        "Compare the series' base with the fork's release tags; act on the newest.",
    ),
    "verify": Entry(
        "forkpatch.cli.build",
        "verify",
        "Check a wheel's RECORD hashes and whether it matches the current series.",
    ),
}
"""Every command: `forkpatch NAME` imports ``module`` and runs its ``function`` (a click
command); ``summary`` is the first paragraph of that command's help (a test holds them
equal), so that listing the commands imports none of them."""


# click 8.4+ says "did you mean" for an unknown command (older ones fail without it).
_NO_SUCH_COMMAND: Any = getattr(click.exceptions, "NoSuchCommand", ())


class LazyGroup(click.Group):
    """The group of :data:`COMMANDS`, each imported when it is asked for."""

    ALIASES: ClassVar[Mapping[str, str]] = {"series": "status", "st": "status"}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        name = self.ALIASES.get(cmd_name, cmd_name)
        entry = COMMANDS.get(name)
        if entry is None:
            return super().get_command(ctx, name)
        command = getattr(importlib.import_module(entry.module), entry.function)
        assert isinstance(command, click.Command), entry
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            _, cmd, rest = super().resolve_command(ctx, args)
        except _NO_SUCH_COMMAND as exc:
            # click suggests from the commands it holds: these are in the table.
            raise _NO_SUCH_COMMAND(
                exc.command_name, possibilities=self.list_commands(ctx), ctx=ctx
            ) from None
        return (cmd.name if cmd else None), cmd, rest

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """As click lists them, each short help made from the table's summary by click
        itself (a stand-in command with that help): `--help` imports no command."""
        listed: list[tuple[str, click.Command]] = []
        for name in self.list_commands(ctx):
            entry = COMMANDS.get(name)
            cmd = click.Command(name, help=entry.summary) if entry else self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                listed.append((name, cmd))
        limit = formatter.width - 6 - max(len(name) for name, _ in listed)
        with formatter.section(_("Commands")):  # click's heading, translated as click does
            formatter.write_dl([(name, cmd.get_short_help_str(limit)) for name, cmd in listed])


@click.group(cls=LazyGroup, context_settings=CONTEXT_SETTINGS)
@click.version_option(__version__, "-V", "--version", prog_name="forkpatch")
@click.option(
    "-C",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    help="Run as if started in DIR (the project with series.yaml).",
)
@click.option(
    "--fork-repo",
    metavar="PATH",
    help="Local clone of the fork (bare or not) to use instead of fork.url. Without it, "
    "FORKPATCH_FORK_REPO stands in for a fork.url that is not a local path.",
)
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.option("-q", "--quiet", is_flag=True, help="Less progress output on stderr.")
@click.pass_context
def cli(
    ctx: click.Context, directory: Path | None, fork_repo: str | None, debug: bool, quiet: bool
) -> None:
    """Manage a series of private patches on top of a fork of vLLM.

    Shell completion: add `eval "$(_FORKPATCH_COMPLETE=bash_source forkpatch)"` to
    ~/.bashrc (zsh: zsh_source, fish: fish_source).
    """
    log.set_quiet(quiet)
    ctx.obj = Ctx(directory, fork_repo, debug)


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
    command, directory = _command_of(argv)
    code, note = _run(argv, debug, directory)
    # `rebase` reports its own state; any other command that ran mentions a rebase in
    # progress (after a Ctrl-C every command does: how to go on or back).
    if note == "always" or (note == "command" and command not in (None, "rebase", "init", "demo")):
        _hint_pending_operation(directory)
    return code


def _run(
    argv: list[str], debug: bool, directory: Path | None
) -> tuple[int, Literal["always", "command", "never"]]:
    """The command's exit status, and whether a rebase in progress is worth a note after it
    (not after a usage error or an internal error)."""
    try:
        # From here on a Ctrl-C is a KeyboardInterrupt that the handlers below report
        # (forkpatch.entry ended the process at once while the modules were loading).
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.default_int_handler)
        settings.check_environment()  # a wrong FORKPATCH_* value: exit 2, nothing done
        cli.main(args=argv, prog_name="forkpatch", standalone_mode=False)
    except ForkpatchError as exc:
        if debug:
            _print_traceback()
        log.error(exc.message)
        if exc.tip:
            log.detail(f"  tip: {exc.tip}")
        return exc.exit_code, "command"
    except Finished as exc:
        return exc.exit_code, "command"
    except click.exceptions.Abort:  # click's name for a KeyboardInterrupt in a command
        _report_interrupt(directory)
        return Interrupted.exit_code, "always"
    except click.ClickException as exc:
        exc.show()
        return (2 if isinstance(exc, click.UsageError) else exc.exit_code), "never"
    except SystemExit as exc:
        return (int(exc.code or 0) if not isinstance(exc.code, str) else 1), "command"
    except KeyboardInterrupt:
        _report_interrupt(directory)
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


def _report_interrupt(directory: Path | None) -> None:
    """Ctrl-C: say what state the project is in. Every write of series.yaml and patches/
    is one unit (fsutil.commit_files), so they are as before the command or completely
    written; a unit cut short after its commit point is finished by the next command."""
    from forkpatch.forkrepo import STORE_DIR
    from forkpatch.project import COMMIT_JOURNAL, find_root

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


def _command_of(args: list[str]) -> tuple[str | None, Path | None]:
    """The subcommand and the -C directory of a command line, for the pending-rebase note."""
    directory: Path | None = None
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-C", "--fork-repo"):
            if arg == "-C" and i + 1 < len(args):
                directory = Path(args[i + 1])
            i += 2
            continue
        if arg.startswith("-C") and len(arg) > 2:
            directory = Path(arg[2:])
        elif not arg.startswith("-"):
            return arg, directory
        i += 1
    return None, directory
