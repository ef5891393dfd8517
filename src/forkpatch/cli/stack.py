"""The editing commands over the stack of applied patches: apply, push, pop, top, new,
edit, refresh, delete, rename, move, export and import."""

from __future__ import annotations

from pathlib import Path

import click

from forkpatch import log
from forkpatch.cli import readonly
from forkpatch.cli.context import Ctx, pass_ctx
from forkpatch.errors import UsageError
from forkpatch.views import print_results


@click.command()
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
    with c.locked_stack() as stack:
        path, result = stack.apply(worktree, force=force, sparse=sparse)
    print_results(result.results, emit=log.result)
    layout = stack.layout()
    what = f"sparse: {len(layout.dirs or ())} directories" if layout.sparse else "full"
    log.result(f"work tree: {path} (branch forkpatch/stack, {what})")


@click.command()
@click.argument("name", required=False)
@click.option("-a", "--all", "all_", is_flag=True, help="Push all unapplied patches.")
@click.option(
    "--merge", is_flag=True, help="3-way merge a patch that does not apply; leave conflict markers."
)
@pass_ctx
def push(c: Ctx, name: str | None, all_: bool, merge: bool) -> None:
    """Apply the next patch (or up to NAME, or --all) in the work tree."""
    with c.locked_stack() as stack:
        results = stack.push(name, all_=all_, merge=merge)
    for r in results:
        log.result(f"applied {r.name} ({r.status})")
    log.result(f"now at {stack.top()}")


@click.command()
@click.argument("name", required=False)
@click.option("-a", "--all", "all_", is_flag=True, help="Pop all patches.")
@click.option("-f", "--force", is_flag=True, help="Discard unsaved changes.")
@pass_ctx
def pop(c: Ctx, name: str | None, all_: bool, force: bool) -> None:
    """Unapply the top patch (or down to NAME, or --all)."""
    with c.locked_stack() as stack:
        popped = stack.pop(name, all_=all_, force=force)
    for n in popped:
        log.result(f"popped {n}")
    log.result(f"now at {stack.top() or 'the base (no patch applied)'}")


@click.command()
@pass_ctx
def top(c: Ctx) -> None:
    """Print the name of the top applied patch."""
    readonly.top(c)


@click.command()
@click.argument("name")
@click.option("-m", "--summary", help="One-line summary for series.yaml.")
@pass_ctx
def new(c: Ctx, name: str, summary: str | None) -> None:
    """Start a new, empty patch NAME on top of the current one."""
    with c.locked_stack() as stack:
        entry = stack.new(name, summary)
    log.result(
        f"created {entry.name} (patches/{entry.file}); edit files in the work tree, "
        "then `forkpatch refresh`"
    )


@click.command()
@click.argument("name")
@pass_ctx
def edit(c: Ctx, name: str) -> None:
    """Go to patch NAME so that the next edits amend it."""
    with c.locked_stack() as stack:
        path = stack.edit(name)
    log.result(
        f"editing {name} in {path}; `forkpatch refresh` saves it and re-applies the patches above"
    )


@click.command()
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
    with c.locked_stack() as stack:
        changed = stack.refresh(force=force, offsets=offsets)
    if changed:
        for n in changed:
            log.result(f"wrote patches/{stack.project.series.get(n).file}")
    else:
        log.result("nothing changed")


@click.command()
@click.argument("name")
@click.option("--keep-file", is_flag=True, help="Leave the patch file in patches/.")
@pass_ctx
def delete(c: Ctx, name: str, keep_file: bool) -> None:
    """Remove patch NAME from the series (popping it if it is the top)."""
    with c.locked_stack() as stack:
        stack.delete(name, keep_file=keep_file)
    log.result(f"deleted {name}")


@click.command()
@click.argument("old")
@click.argument("new_name", metavar="NEW")
@pass_ctx
def rename(c: Ctx, old: str, new_name: str) -> None:
    """Rename patch OLD to NEW (and its file, when named by slug)."""
    with c.locked_stack() as stack:
        entry = stack.rename(old, new_name)
    log.result(f"renamed {old} -> {entry.name} (patches/{entry.file})")


@click.command()
@click.argument("name")
@click.option("--before", metavar="OTHER", help="Move before OTHER.")
@click.option("--after", metavar="OTHER", help="Move after OTHER.")
@click.option("--to", "position", type=int, metavar="N", help="Move to position N (1-based).")
@pass_ctx
def move(c: Ctx, name: str, before: str | None, after: str | None, position: int | None) -> None:
    """Reorder the series: move NAME (checked to still apply before writing)."""
    with c.locked_stack() as stack:
        order = stack.move(name, before=before, after=after, position=position)
    log.result("order: " + ", ".join(order))


@click.command()
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
    with c.locked_stack() as stack:
        changed, moved = stack.export(offsets=offsets, force=force, skip_changed=skip_changed)
    log.result(
        f"{len(changed)} patch file(s) changed" + (": " + ", ".join(changed) if changed else "")
    )
    if moved:
        log.result(
            f"left as they are, only their line numbers moved: {', '.join(moved)} "
            "(`forkpatch export --offsets` rewrites them)"
        )


@click.command(name="import")
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
    from forkpatch.importer import ImportOptions

    _check_import_args(files, quilt_dir)
    opts = ImportOptions(quilt_dir, series_list, name_order, name, after, rename, canonical, merge)
    with c.locked_stack() as stack:
        entries = stack.import_(list(files), opts)
    for e in entries:
        log.result(f"imported {e.name} -> patches/{e.file}")


def _check_import_args(files: tuple[Path, ...], quilt_dir: Path | None) -> None:
    """Something to import, and no directory among FILES (a quilt series is --quilt's)."""
    if not files and quilt_dir is None:
        raise UsageError("nothing to import", tip="give FILES... or --quilt DIR")
    for f in files:
        if f.is_dir():
            raise UsageError(
                f"{f} is a directory",
                tip=f"import a quilt series with `forkpatch import --quilt {f}` (the order "
                "of its series file; `--name-order` or `--series LIST` without one)",
            )
