"""`forkpatch init`, `forkpatch status` and `forkpatch demo`: the project as a whole."""

from __future__ import annotations

from pathlib import Path

import click

from forkpatch import log
from forkpatch.cli.context import Ctx, pass_ctx
from forkpatch.errors import PatchesConflict
from forkpatch.views import print_results


@click.command()
@click.option(
    "--fork-url", help="Git URL (or path) of the fork (needed unless series.yaml exists)."
)
@click.option(
    "--base",
    "base_tag",
    help="Tag of the fork the series applies to (needed unless series.yaml exists).",
)
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
    c: Ctx,
    fork_url: str | None,
    base_tag: str | None,
    fork_name: str | None,
    distribution: str,
    force: bool,
) -> None:
    """Start a series: write series.yaml and patches/ for the fork at BASE.

    In a clone of a project that already has series.yaml, set the clone up (patches/,
    the .gitignore lines) and keep series.yaml as it is."""
    from forkpatch.ops import init_project
    from forkpatch.series import SERIES_FILE

    root = (c.directory or Path.cwd()).resolve()
    existed = (root / SERIES_FILE).exists() and not force
    project = init_project(
        root,
        fork_url=fork_url,
        base_tag=base_tag,
        fork_name=fork_name,
        distribution=distribution,
        fork_override=c.fork_repo,
        force=force,
    )
    s = project.series
    if existed:
        log.result(
            f"{project.series_path} is already a series (base {s.base.tag} = "
            f"{s.base.commit[:12]}, {len(s.patches)} patch(es)): kept as it is; patches/ "
            "and the .gitignore lines for .forkpatch/ and dist/ are in place"
        )
        log.info("next: `forkpatch status`, then `forkpatch apply` to work on the patches")
        return
    log.result(
        f"wrote {project.series_path} (base {s.base.label} = {s.base.commit[:12]}) and "
        f"{project.patches_dir}/"
    )
    log.info(
        "next: `forkpatch apply`, then `forkpatch new NAME` to start a patch, "
        "or `forkpatch import FILE...`"
    )


@click.command()
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
        if report.interrupted_worktree:
            log.warn(
                f"{report.interrupted_worktree} is a work tree an interrupted `forkpatch "
                "apply` left half made; `forkpatch apply` makes it again"
            )
        if report.worktree_problem:
            log.warn(f"{report.worktree_problem}; `forkpatch apply --force` rebuilds it")
        for change in report.changes:
            log.warn(change.describe())
            if (way := change.way_out()) is not None:
                log.detail(f"  tip: {way}")
        takes = [ch for ch in report.changes if ch.way_out() is None]
        sides = {ch.side for ch in takes if ch.applied and not ch.unrecorded}
        if "file" in sides:
            log.info("`forkpatch apply` (or `edit NAME`) takes the files into the work tree")
        if "both" in sides or any(ch.unrecorded for ch in takes):
            log.info(
                "where both sides changed: `forkpatch export --force` keeps the work tree, "
                "`forkpatch apply --force` takes the files (discarding the work tree's edits)"
            )
        for o in report.orphans:
            meant = project.meant_by(o)
            if meant is not None:
                # Importing it would make a second patch of the same change.
                log.warn(
                    f"patches/{o} is not listed in series.yaml: entry '{meant.name}' names "
                    f"patches/{meant.file}, which does not exist; did you mean `file: {o}`?"
                )
                continue
            log.warn(
                f"patches/{o} is not listed in series.yaml (orphan); "
                f"`forkpatch import patches/{o}` adds it"
            )
    if any(r.status == "conflict" for r in report.results):
        raise PatchesConflict("a patch conflicts")


@click.command()
@click.argument("directory", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable summary on stdout.")
@pass_ctx
def demo(c: Ctx, directory: Path | None, as_json: bool) -> None:
    """Run the built-in example end to end in DIR (default: a new temporary directory)."""
    from forkpatch.demo import run_demo

    summary = run_demo(directory)
    if as_json:
        log.emit_json(summary)
