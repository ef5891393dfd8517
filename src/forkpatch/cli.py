"""The ``forkpatch`` command line: thin click commands over the core modules.

Each command parses its options, opens the project and calls one core
function. Errors derived from :class:`ForkpatchError` are reported in one
place (:func:`main`) with their exit code; tracebacks only with ``--debug``.
A command's result goes to stdout (``log.result``), progress and diagnostics to
stderr, ``--json`` alone to stdout.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

import click

from forkpatch import __version__, log
from forkpatch.cli_context import Ctx, pass_ctx
from forkpatch.errors import (
    Finished,
    ForkpatchError,
    InternalError,
    Interrupted,
    PatchesConflict,
    StateError,
    UsageError,
)
from forkpatch.views import print_results

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class AliasedGroup(click.Group):
    ALIASES: ClassVar[Mapping[str, str]] = {"series": "status", "st": "status"}

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return super().get_command(ctx, self.ALIASES.get(cmd_name, cmd_name))

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        _, cmd, rest = super().resolve_command(ctx, args)
        return (cmd.name if cmd else None), cmd, rest


@click.group(cls=AliasedGroup, context_settings=CONTEXT_SETTINGS)
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


# --------------------------------------------------------------------------- commands


@cli.command()
@click.option("--fork-url", required=True, help="Git URL (or path) of the fork.")
@click.option("--base", "base_tag", required=True, help="Tag of the fork the series applies to.")
@click.option("--name", "fork_name", help="Fork name (default: from the URL).")
@click.option(
    "--distribution",
    default="1cat-vllm",
    show_default=True,
    help="Distribution name of the fork's wheel.",
)
@click.option("--force", is_flag=True, help="Overwrite an existing series.yaml.")
@pass_ctx
def init(
    c: Ctx, fork_url: str, base_tag: str, fork_name: str | None, distribution: str, force: bool
) -> None:
    """Start a series: write series.yaml and patches/ for the fork at BASE."""
    from forkpatch.ops import init_project

    project = init_project(
        c.directory or Path.cwd(),
        fork_url=fork_url,
        base_tag=base_tag,
        fork_name=fork_name,
        distribution=distribution,
        fork_override=c.fork_repo,
        force=force,
    )
    s = project.series
    log.result(
        f"wrote {project.series_path} (base {s.base.tag} = {s.base.commit[:12]}) and "
        f"{project.patches_dir}/"
    )
    log.info(
        "next: `forkpatch apply`, then `forkpatch new NAME` to start a patch, "
        "or `forkpatch import FILE...`"
    )


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output on stdout.")
@click.option(
    "--upstream",
    is_flag=True,
    help="Also ask the forge what became of each patch's upstream request "
    "(GITHUB_TOKEN / GITLAB_TOKEN; cached in .forkpatch/).",
)
@pass_ctx
def status(c: Ctx, as_json: bool, upstream: bool) -> None:
    """Show the patches in order and how each applies to the base (alias: series)."""
    from forkpatch.ops import series_status

    project = c.project()
    report = series_status(project)
    ups: dict[str, dict[str, object]] = {}
    if upstream:
        from forkpatch.upstream_status import describe, upstream_states

        ups = upstream_states(project, project.series.patches)
    if as_json:
        data = report.to_json()
        patches = data.get("patches")
        for p in patches if isinstance(patches, list) else []:
            if isinstance(p, dict) and p.get("name") in ups:
                p["upstream"] = ups[p["name"]]
        log.emit_json(data)
    else:
        log.result(
            f"base {report.base_tag} ({report.base_commit[:12]}), "
            f"{len(report.results)} patch(es)"
            + (f", work tree {report.worktree}" if report.worktree else "")
        )
        print_results(report.results, report.applied, emit=log.result)
        if ups:
            log.result("upstream:")
            for name, up in ups.items():
                log.result(describe(name, up))
        if report.editing:
            log.result(
                f"editing '{report.editing}': `forkpatch refresh` re-applies the patches above it"
            )
        if report.worktree_problem:
            log.warn(f"{report.worktree_problem}; `forkpatch apply --force` rebuilds it")
        for change in report.changes:
            log.warn(change.describe())
        sides = {ch.side for ch in report.changes if ch.applied and not ch.unrecorded}
        if "file" in sides:
            log.info("`forkpatch apply` (or `edit NAME`) takes the files into the work tree")
        if "both" in sides or any(ch.unrecorded for ch in report.changes):
            log.info(
                "where both sides changed: `forkpatch export --force` keeps the work tree, "
                "`forkpatch apply --force` takes the files (discarding the work tree's edits)"
            )
        for o in report.orphans:
            log.warn(
                f"patches/{o} is not listed in series.yaml (orphan); "
                f"`forkpatch import patches/{o}` adds it"
            )
    if any(r.status == "conflict" for r in report.results):
        raise PatchesConflict("a patch conflicts")


@cli.command()
@click.option(
    "--worktree",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where to create the work tree (default: .forkpatch/worktree).",
)
@click.option("--force", is_flag=True, help="Discard unsaved changes in an existing work tree.")
@click.option(
    "--sparse/--full",
    default=None,
    help="Check out only the directories the series touches (fast; it grows as patches "
    "touch more), or every file. Default: as the existing work tree is; a new one is full.",
)
@pass_ctx
def apply(c: Ctx, worktree: Path | None, force: bool, sparse: bool | None) -> None:
    """Create the work tree: the fork at the base, one commit per patch."""
    stack = c.stack()
    with stack.project.locked("apply"):
        path, result = stack.apply(worktree, force=force, sparse=sparse)
    print_results(result.results, emit=log.result)
    layout = stack.layout()
    what = f"sparse: {len(layout.dirs or ())} directories" if layout.sparse else "full"
    log.result(f"work tree: {path} (branch forkpatch/stack, {what})")


@cli.command()
@click.argument("name", required=False)
@click.option("-a", "--all", "all_", is_flag=True, help="Push all unapplied patches.")
@click.option(
    "--merge", is_flag=True, help="3-way merge a patch that does not apply; leave conflict markers."
)
@pass_ctx
def push(c: Ctx, name: str | None, all_: bool, merge: bool) -> None:
    """Apply the next patch (or up to NAME, or --all) in the work tree."""
    stack = c.stack()
    with stack.project.locked("push"):
        results = stack.push(name, all_=all_, merge=merge)
    for r in results:
        log.result(f"applied {r.name} ({r.status})")
    log.result(f"now at {stack.top()}")


@cli.command()
@click.argument("name", required=False)
@click.option("-a", "--all", "all_", is_flag=True, help="Pop all patches.")
@click.option("-f", "--force", is_flag=True, help="Discard unsaved changes.")
@pass_ctx
def pop(c: Ctx, name: str | None, all_: bool, force: bool) -> None:
    """Unapply the top patch (or down to NAME, or --all)."""
    stack = c.stack()
    with stack.project.locked("pop"):
        popped = stack.pop(name, all_=all_, force=force)
    for n in popped:
        log.result(f"popped {n}")
    log.result(f"now at {stack.top() or 'the base (no patch applied)'}")


@cli.command()
@pass_ctx
def top(c: Ctx) -> None:
    """Print the name of the top applied patch."""
    name = c.stack().top()
    if name is None:  # exit 1 as quilt's "No patches applied": a state, not a usage error
        raise StateError("no patch is applied", tip="`forkpatch push` applies the next one")
    click.echo(log.shown(name))


@cli.command()
@click.argument("name")
@click.option("-m", "--summary", help="One-line summary for series.yaml.")
@pass_ctx
def new(c: Ctx, name: str, summary: str | None) -> None:
    """Start a new, empty patch NAME on top of the current one."""
    stack = c.stack()
    with stack.project.locked("new"):
        entry = stack.new(name, summary)
    log.result(
        f"created {entry.name} (patches/{entry.file}); edit files in the work tree, "
        "then `forkpatch refresh`"
    )


@cli.command()
@click.argument("name")
@pass_ctx
def edit(c: Ctx, name: str) -> None:
    """Go to patch NAME so that the next edits amend it."""
    stack = c.stack()
    with stack.project.locked("edit"):
        path = stack.edit(name)
    log.result(
        f"editing {name} in {path}; `forkpatch refresh` saves it and re-applies the patches above"
    )


@cli.command()
@click.option(
    "-f",
    "--force",
    is_flag=True,
    help="Save even with conflict markers / when patches above no longer apply / over a "
    "patch file changed outside forkpatch.",
)
@click.option(
    "--offsets",
    is_flag=True,
    help="Also rewrite patches above whose hunks only moved to other line numbers.",
)
@pass_ctx
def refresh(c: Ctx, force: bool, offsets: bool) -> None:
    """Write the top patch (with the work tree's changes) back to its file."""
    stack = c.stack()
    with stack.project.locked("refresh"):
        changed = stack.refresh(force=force, offsets=offsets)
    if changed:
        for n in changed:
            log.result(f"wrote patches/{stack.project.series.get(n).file}")
    else:
        log.result("nothing changed")


@cli.command()
@click.argument("name")
@click.option("--keep-file", is_flag=True, help="Leave the patch file in patches/.")
@pass_ctx
def delete(c: Ctx, name: str, keep_file: bool) -> None:
    """Remove patch NAME from the series (popping it if it is the top)."""
    stack = c.stack()
    with stack.project.locked("delete"):
        stack.delete(name, keep_file=keep_file)
    log.result(f"deleted {name}")


@cli.command()
@click.argument("old")
@click.argument("new_name", metavar="NEW")
@pass_ctx
def rename(c: Ctx, old: str, new_name: str) -> None:
    """Rename patch OLD to NEW (and its file, when named by slug)."""
    stack = c.stack()
    with stack.project.locked("rename"):
        entry = stack.rename(old, new_name)
    log.result(f"renamed {old} -> {entry.name} (patches/{entry.file})")


@cli.command()
@click.argument("name")
@click.option("--before", metavar="OTHER", help="Move before OTHER.")
@click.option("--after", metavar="OTHER", help="Move after OTHER.")
@click.option("--to", "position", type=int, metavar="N", help="Move to position N (1-based).")
@pass_ctx
def move(c: Ctx, name: str, before: str | None, after: str | None, position: int | None) -> None:
    """Reorder the series: move NAME (checked to still apply before writing)."""
    stack = c.stack()
    with stack.project.locked("move"):
        order = stack.move(name, before=before, after=after, position=position)
    log.result("order: " + ", ".join(order))


@cli.command()
@click.option(
    "--offsets",
    is_flag=True,
    help="Also rewrite patches whose hunks only moved to other line numbers.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Export even patches that gained unresolved conflict markers, and over patch "
    "files changed outside forkpatch (the work tree's version wins).",
)
@click.option(
    "--skip-changed",
    is_flag=True,
    help="Leave patch files changed outside forkpatch as they are (for `forkpatch apply` "
    "to take) and write the others.",
)
@pass_ctx
def export(c: Ctx, offsets: bool, force: bool, skip_changed: bool) -> None:
    """Write every applied patch back to its file (only changed files are rewritten).

    A patch whose diff differs from its file only in the line numbers of its hunks
    (an edit below it moved them) is left as it is: its file still applies to the
    same result. --offsets rewrites those too.
    """
    stack = c.stack()
    with stack.project.locked("export"):
        changed, moved = stack.export(offsets=offsets, force=force, skip_changed=skip_changed)
    log.result(
        f"{len(changed)} patch file(s) changed" + (": " + ", ".join(changed) if changed else "")
    )
    if moved:
        log.result(
            f"left as they are, only their line numbers moved: {', '.join(moved)} "
            "(`forkpatch export --offsets` rewrites them)"
        )


@cli.command(name="import")
@click.argument("files", nargs=-1, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--quilt",
    "quilt_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Import a quilt patches/ directory, in the order of its series file.",
)
@click.option(
    "--series",
    "series_list",
    type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
    help="With --quilt: the order from this list instead of DIR/series "
    "(one patch per line, paths relative to DIR; '-' reads stdin).",
)
@click.option(
    "--name-order",
    is_flag=True,
    help="With --quilt, for a directory without a series file: every *.patch and "
    "*.diff file of DIR in the byte order of their names.",
)
@click.option("--name", help="Name for the patch (a single patch only).")
@click.option("--after", metavar="OTHER", help="Insert after OTHER (default: at the end).")
@click.option(
    "--rename",
    is_flag=True,
    help="Store each patch as patches/<name>.patch (default: keep the file's own name).",
)
@click.option(
    "--canonical",
    is_flag=True,
    help="Store forkpatch's own form: the description and the canonical git diff "
    "(drops mail headers, diffstat, signature, quilt Index: lines; implies --rename).",
)
@click.option(
    "--merge",
    is_flag=True,
    help="A patch that applies to the base but not on top of the series: merge it in "
    "3-way; where conflicts remain, import it as it is for `push --merge` (exit 3).",
)
@pass_ctx
def import_(
    c: Ctx,
    files: tuple[Path, ...],
    quilt_dir: Path | None,
    series_list: Path | None,
    name_order: bool,
    name: str | None,
    after: str | None,
    rename: bool,
    canonical: bool,
    merge: bool,
) -> None:
    """Import git format-patch files, mbox, plain diffs, or a quilt series.

    Files keep their names and bytes (see the README's "What import
    normalises"); FILES are imported in the order given.
    """
    from forkpatch.importer import import_patches
    from forkpatch.stack import Stack

    if not files and quilt_dir is None:
        raise UsageError("nothing to import", tip="give FILES... or --quilt DIR")
    for f in files:
        if f.is_dir():
            raise UsageError(
                f"{f} is a directory",
                tip=f"import a quilt series with `forkpatch import --quilt {f}` (the order "
                "of its series file; `--name-order` or `--series LIST` without one)",
            )
    project = c.project()
    with project.locked("import"):
        # Inserted among the applied patches, the new ones join the stack: checked first
        # (nothing unsaved in the work tree), rebuilt once the files are written.
        stack = Stack(project)
        series = project.series
        position = len(series.patches) if after is None else series.index(after) + 1
        rebuild = stack.stack_for_insert(position)
        entries = import_patches(
            project,
            files=list(files),
            quilt_dir=quilt_dir,
            series_list=series_list,
            name_order=name_order,
            name=name,
            after=after,
            rename=rename,
            canonical=canonical,
            merge=merge,
        )
        stack.after_series_change(rebuild)
    for e in entries:
        log.result(f"imported {e.name} -> patches/{e.file}")


@cli.command()
@click.argument("directory", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable summary on stdout.")
@pass_ctx
def demo(c: Ctx, directory: Path | None, as_json: bool) -> None:
    """Run the built-in example end to end in DIR (default: a new temporary directory)."""
    from forkpatch.demo import run_demo

    summary = run_demo(directory)
    if as_json:
        log.emit_json(summary)


# --------------------------------------------------------------------------- entry point


def _register_optional() -> None:
    """Commands from later stages register themselves if their modules are present."""
    import importlib

    for module in (
        "forkpatch.cli_rebase",
        "forkpatch.cli_build",
        "forkpatch.cli_smoke",
        "forkpatch.cli_track",
        "forkpatch.cli_droppable",
    ):
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name == module:
                continue
            raise
        mod.register(cli)


_register_optional()


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
    debug = "--debug" in argv or os.environ.get("FORKPATCH_DEBUG") == "1"
    command, directory = _command_of(argv)
    # `rebase` reports its own state; any other command mentions a rebase in progress.
    hint = command not in (None, "rebase", "init", "demo")
    try:
        # From here on a Ctrl-C is a KeyboardInterrupt that the handlers below report
        # (forkpatch.entry ended the process at once while the modules were loading).
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.default_int_handler)
        cli.main(args=argv, prog_name="forkpatch", standalone_mode=False)
    except ForkpatchError as exc:
        if debug:
            _print_traceback()
        log.error(exc.message)
        if exc.tip:
            log.detail(f"  tip: {exc.tip}")
        if hint:
            _hint_pending_operation(directory)
        return exc.exit_code
    except Finished as exc:
        if hint:
            _hint_pending_operation(directory)
        return exc.exit_code
    except click.exceptions.Abort:  # click's name for a KeyboardInterrupt in a command
        _report_interrupt(directory)
        return Interrupted.exit_code
    except click.ClickException as exc:
        exc.show()
        return 2 if isinstance(exc, click.UsageError) else exc.exit_code
    except SystemExit as exc:
        if hint:
            _hint_pending_operation(directory)
        return int(exc.code or 0) if not isinstance(exc.code, str) else 1
    except KeyboardInterrupt:
        _report_interrupt(directory)
        return Interrupted.exit_code
    except OSError as exc:
        # The machine said no (permissions, a read-only or full disk): the user's to
        # fix, not a bug. Anything else is still an internal error below.
        known = _ENVIRONMENT_ERRORS.get(exc.errno or 0)
        if known is None:
            return _internal_error(debug)
        if debug:
            _print_traceback()
        where = exc.filename if exc.filename is not None else "a file"
        log.error(f"{where}: {exc.strerror or exc}")
        log.detail(f"  tip: {known}")
        if hint:
            _hint_pending_operation(directory)
        return ForkpatchError.exit_code
    except Exception:
        return _internal_error(debug)
    if hint:
        _hint_pending_operation(directory)
    return 0


_ENVIRONMENT_ERRORS = {
    errno.EACCES: "check that you may use it (its owner and mode), or choose another place",
    errno.EPERM: "check that you may use it (its owner, mode, attributes), or choose another place",
    errno.EROFS: "that file system is read-only: choose another place",
    errno.ENOSPC: "the disk is full: free some space and run the command again",
    errno.EDQUOT: "your disk quota is used up: free some space and run the command again",
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
    _hint_pending_operation(directory)  # a rebase's own journal: how to go on or back


def _hint_pending_operation(directory: Path | None = None) -> bool:
    try:
        from forkpatch.rebase import pending_hint
    except ImportError:
        return False
    try:
        hint = pending_hint(directory or Path.cwd())
    except Exception:
        return False
    if hint:
        log.detail(f"  note: {hint}")
    return bool(hint)


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
