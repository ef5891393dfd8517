"""``forkpatch publish``: wheels that passed the smoke suite, to an index or a directory."""

from __future__ import annotations

from pathlib import Path

import click

from forkpatch import log
from forkpatch.cli import options
from forkpatch.cli.context import Ctx, pass_ctx
from forkpatch.errors import UsageError
from forkpatch.kinds import TIERS, Tier
from forkpatch.publish import install_line


@click.command()
@click.argument("wheels", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@options.publish_to("--to", "to")
@options.allow_missing_tier(TIERS, what="Publish")
@click.option(
    "--report",
    "reports",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="A smoke report file to consider (default: the project's store, then <wheel>.smoke.json).",
)
@click.option(
    "--simple-url", metavar="URL", help="The index's PEP 503 pages (default: <URL>/simple/)."
)
@options.as_json("What was published")
@pass_ctx
def publish(
    c: Ctx,
    wheels: tuple[Path, ...],
    to: str | None,
    allow_missing: tuple[Tier, ...],
    reports: tuple[Path, ...],
    simple_url: str | None,
    as_json: bool,
) -> None:
    """Publish WHEEL(s) that passed the smoke suite to an index or a directory.

    Credentials: TWINE_USERNAME / TWINE_PASSWORD or the keyring, never options.
    """
    from forkpatch.publish import PublishOptions
    from forkpatch.publish import publish as do_publish

    project = c.project_or_none()
    target = options.pick(to, project.series.publish.to if project else None, None)
    if not target:
        raise UsageError("no target", tip="pass --to URL|DIR or set publish.to in series.yaml")
    opts = PublishOptions(
        wheels=wheels,
        to=str(target),
        allow_missing_tiers=allow_missing,
        reports=reports,
        simple_url=simple_url,
    )
    done = do_publish(opts, project)
    say = log.info if as_json else log.result
    for p in done:
        extra = f" (without tier(s) {', '.join(p.overrides)})" if p.overrides else ""
        say(f"{p.action}: {p.file}{extra}")
    if done:
        say("install: " + install_line(str(target), simple_url, [p.file for p in done]))
    if as_json:
        log.emit_json({"target": str(target), "published": [p.to_json() for p in done]})
