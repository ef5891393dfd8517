"""`forkpatch init`, `forkpatch status` and `forkpatch demo`: the project as a whole."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from forkpatch import log
from forkpatch.cli import readonly
from forkpatch.cli.context import Ctx, pass_ctx

if TYPE_CHECKING:
    from forkpatch.project import Project


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
    _show_init(project, existed)


def _show_init(project: Project, existed: bool) -> None:
    """What init did: the series kept (a clone set up) or written, and the next step."""
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
    readonly.status(c, as_json=as_json, upstream=upstream)


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
