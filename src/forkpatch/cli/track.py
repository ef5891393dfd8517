"""``forkpatch track``: a thin click command over :mod:`forkpatch.track`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from forkpatch import log
from forkpatch.cli import options
from forkpatch.cli.context import Ctx, pass_ctx
from forkpatch.errors import NewRelease, UsageError
from forkpatch.fsutil import read_regular
from forkpatch.kinds import (
    HARDWARE_TIERS,
    BuildMode,
    HardwareTier,
    SmokeDeps,
)

if TYPE_CHECKING:
    from forkpatch.track import Change, RunOptions, TrackReport

HELP = """Compare the series' base with the fork's release tags; act on the newest.

\b
Without --run: list the tags newer than the base (series.yaml `track:`
selects and filters them), the one forkpatch would act on, and a forecast:
how the series fares on the head of the fork's default branch.
\b
  exit 0   up to date: no newer release to act on
  exit 10  a newer release can be acted on (the `target` in --json)
  exit 1   error (cannot list the tags, bad track.pattern, ...)
--tag names the tag to act on instead (a warning when it is held back, not
a release tag, or not newer than the base).

\b
With --run: for that release (or --tag), in OUT/<tag>/ (never in the project
itself): check + rebase, build, smoke (up to --smoke-tier) and, when a
target is configured (publish.to or --publish-to), publish. Writes result.json
and summary.md (a pull request body) there. A stage already done for the same
tag commit and the same series is not done again. --proposed FILE: the body
of the open pull request / issue for the release; when it already reports a
final outcome for the same inputs, nothing runs (`status` unchanged).
\b
  exit 0   done (or up to date); result.json `status` says how far it got
  exit 3   the rebase conflicts: summary.md names the patch, files and hunks
  exit 1   a stage failed (build, smoke, publish refused): see summary.md
  exit 5   a smoke tier asked for (--smoke-tier, smoke.required-tiers) did not
           run here (--allow-missing-tier accepts it); publish waits for it

\b
With --make-branch: commit the rebased series of the last run on the bot
branch (track.bot-branch, default forkpatch/rebase-<tag>) of the project's
repository, deterministically; print what the pull request (or, on a
conflict, the issue) should be. Nothing is pushed.
"""


def _steps(value: str | None) -> tuple[str, ...]:
    from forkpatch.track import STEPS

    if not value:
        return STEPS
    steps = tuple(s.strip() for s in value.split(",") if s.strip())
    bad = [s for s in steps if s not in STEPS]
    if bad:
        raise UsageError(f"unknown step(s) {', '.join(bad)}", tip=f"steps: {', '.join(STEPS)}")
    return steps


@click.command(help=HELP)
@options.as_json()
@click.option(
    "--no-forecast", is_flag=True, help="Skip the check against the fork's default branch."
)
@click.option("--run", "do_run", is_flag=True, help="Act on the release (see above).")
@click.option(
    "--make-branch",
    is_flag=True,
    help="Commit the last run's series on the bot branch (see above).",
)
@click.option(
    "--tag",
    metavar="TAG",
    help="Act on TAG instead of the newest release (even a held-back one).",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="FORKPATCH_OUT",
    show_envvar=True,
    help="Output directory (default: .forkpatch/track in the project).",
)
@click.option(
    "--steps",
    metavar="LIST",
    help="Comma-separated stages to run: rebase,build,smoke,publish (default: "
    "all). A pipeline runs one per job, passing --out along.",
)
@click.option("--no-publish", is_flag=True, help="Do everything but publish.")
@options.publish_to("--publish-to", "publish_to", envvar="FORKPATCH_PUBLISH_TO")
@options.allow_missing_tier(HARDWARE_TIERS, what="Smoke and publish")
@options.base_wheel(
    for_what="for the tag, for an overlay build", url=True, envvar="FORKPATCH_BASE_WHEEL"
)
@options.build_mode("--build-mode", "build_mode")
@click.option(
    "--smoke-tier",
    type=click.Choice(HARDWARE_TIERS),
    default="sm70",
    show_default=True,
    help="Highest smoke tier; a tier this machine lacks is reported as not run and "
    "the run exits 5 (publish waits) unless --allow-missing-tier accepts it.",
)
@options.smoke_deps("--smoke-deps", "smoke_deps")
@options.smoke_python("--smoke-python", "smoke_python")
@click.option(
    "--smoke-with",
    "smoke_with",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Another wheel to install in the smoke environment (e.g. a pinned torch); repeatable.",
)
@click.option(
    "--proposed",
    "proposed_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="--run: the body of the open change for the release (a missing or empty "
    "file is no change).",
)
@click.option(
    "--repo",
    type=click.Path(file_okay=False, path_type=Path),
    help="--make-branch: the project's git repository (default: around it).",
)
@pass_ctx
def track(c: Ctx, /, **options: Any) -> None:
    _track(c, _Args(**options))


@dataclass(frozen=True)
class _Args:
    """The options of `forkpatch track`, as click parsed them."""

    as_json: bool
    no_forecast: bool
    do_run: bool
    make_branch: bool
    tag: str | None
    out_dir: Path | None
    steps: str | None
    no_publish: bool
    publish_to: str | None
    allow_missing: tuple[HardwareTier, ...]
    base_wheel: str | None
    build_mode: BuildMode | None
    smoke_tier: HardwareTier
    smoke_deps: SmokeDeps | None
    smoke_python: str | None
    smoke_with: tuple[Path, ...]
    proposed_file: Path | None
    repo: Path | None

    def run_only(self) -> bool:
        return bool(
            self.steps
            or self.no_publish
            or self.publish_to
            or self.base_wheel
            or self.smoke_with
            or self.proposed_file
        )

    def run_options(self) -> RunOptions:
        from forkpatch import track as core

        return core.RunOptions(
            out_dir=self.out_dir,
            tag=self.tag,
            steps=_steps(self.steps),
            publish=not self.no_publish,
            publish_to=self.publish_to,
            allow_missing_tiers=self.allow_missing,
            base_wheel=self.base_wheel,
            build_mode=self.build_mode,
            smoke_tier=self.smoke_tier,
            smoke_deps=self.smoke_deps,
            smoke_python=self.smoke_python,
            smoke_with=self.smoke_with,
            forecast=not self.no_forecast,
            proposed=_read_optional(self.proposed_file),
        )


def _track(c: Ctx, a: _Args) -> None:
    from forkpatch import track as core

    if a.do_run and a.make_branch:
        raise UsageError(
            "give --run or --make-branch, not both", tip="run them one after the other"
        )
    project = c.project()
    if a.make_branch:
        change = core.prepare_change(project, out_dir=a.out_dir, tag=a.tag, repo=a.repo)
        _print_change(change, log.info if a.as_json else log.result)
        if a.as_json:
            log.emit_json(change.to_json())
        return
    if not a.do_run:
        if a.run_only():
            raise UsageError(
                "--steps, --publish-to, --base-wheel, --proposed and the smoke options go with --run"
            )
        report = core.list_releases(project)
        if a.tag:
            target = core.pick_tag(project, report, a.tag)
            report = replace(report, target=target, bot_branch=core.bot_branch(project, a.tag))
        if not a.no_forecast:
            report = replace(report, forecast=core.forecast_or_warn(project))
        if a.as_json:
            log.emit_json(report.to_json())
        _print_report(report, log.info if a.as_json else log.result)
        if report.target is not None:
            raise NewRelease(report.target.tag)
        return  # up to date: nothing to run (and one JSON document on stdout)
    result = core.run(project, a.run_options())
    if a.as_json:
        log.emit_json(result.to_json())
    if result.state is not None and result.work_dir is not None:
        (log.info if a.as_json else log.result)(
            f"{result.state.tag}: {result.status}; summary: {result.work_dir / core.SUMMARY_FILE}"
        )
    if result.error is not None:
        raise result.error


def _read_optional(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        return read_regular(path).decode("utf-8", errors="replace")
    except FileNotFoundError:
        return None


def _print_report(report: TrackReport, emit: Callable[[str], None]) -> None:
    """The releases and the forecast, through ``emit`` (stdout, or stderr beside --json);
    warnings on stderr."""
    emit(f"base {report.base}; {len(report.newer)} newer release tag(s)")
    for t in report.newer:
        mark = "->" if report.target is t else "  "
        emit(
            f" {mark} {t.tag:<16} {t.commit[:12]}"
            + (f"  held back: {t.held_back}" if t.held_back else "")
        )
    for tag in report.unparsable:
        log.warn(f"tag '{tag}' matches track.pattern but is not a PEP 440 version; ignored")
    fc = report.forecast
    if fc:
        where = f"{fc.branch} ({fc.commit[:12]})"
        if fc.ok:
            emit(f"forecast: the series applies to {where}")
        for conflict in fc.conflicts:
            files = ", ".join(x.path for x in conflict.conflicts) or ", ".join(conflict.files)
            log.warn(f"forecast: patch '{conflict.patch}' conflicts on {where}: {files}")
    if report.target:
        emit(f"new release: {report.target.tag}; `forkpatch track --run` acts on it")
    else:
        emit("up to date")


def _print_change(change: Change, emit: Callable[[str], None]) -> None:
    if change.kind == "pull":
        emit(
            f"branch {change.branch} -> {(change.commit or '')[:12]} "
            f"({'updated' if change.updated else 'unchanged'}); title: {change.title}"
        )
    elif change.kind == "issue":
        emit(f"the rebase conflicts: open an issue '{change.title}'")
    else:
        emit(f"nothing to propose: {change.title}")
    emit(f"body: {change.body_file}")
