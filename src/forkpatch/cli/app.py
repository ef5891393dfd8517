"""The ``forkpatch`` command line's click group and its table of commands.

Each command parses its options, opens the project, calls the core and hands the
result to one view; the commands live by group in the modules of this package and are imported only when they
run (the table below names each one's module and function, and carries the short help
that `forkpatch --help` lists). Errors derived from :class:`ForkpatchError` are reported
in one place (:func:`forkpatch.cli.dispatch.main`) with their exit code; tracebacks only
with ``--debug``. A command's result goes to stdout (``log.result``), progress and
diagnostics to stderr, ``--json`` alone to stdout.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from gettext import gettext as _
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import click

from forkpatch import __version__, log
from forkpatch.cli.context import Ctx

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
    "server": Entry(
        "forkpatch.cli.server",
        "server",
        "Show or stop the background server that runs forkpatch's commands.",
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
    c = ctx.ensure_object(Ctx)
    c.directory, c.fork_repo, c.debug = directory, fork_repo, c.debug or debug
    c.command = ctx.invoked_subcommand


def run_group(argv: list[str], c: Ctx) -> int | None:
    """Run ``argv`` through the group, filling in ``c`` as it parses (errors of the
    command propagate to :mod:`forkpatch.cli.dispatch`'s boundary); an exit status when
    click itself refused the command line (a usage error, shown here as click shows it)."""
    try:
        cli.main(args=argv, prog_name="forkpatch", standalone_mode=False, obj=c)
    except click.exceptions.Abort:  # click's name for a KeyboardInterrupt in a command
        raise KeyboardInterrupt from None
    except click.ClickException as exc:
        exc.show()
        return 2 if isinstance(exc, click.UsageError) else exc.exit_code
    return None
