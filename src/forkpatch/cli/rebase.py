"""``forkpatch check`` and ``forkpatch rebase``: thin click commands over forkpatch.rebase."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from forkpatch import log
from forkpatch.cli.context import Ctx, pass_ctx
from forkpatch.errors import ConflictError, PatchesConflict, UsageError

if TYPE_CHECKING:
    from forkpatch.project import Project
    from forkpatch.rebase import Plan, RebaseOptions, RebaseResult


def _options(
    onto: str, no_three_way: bool, fuzz: int, report_dir: Path | None = None
) -> RebaseOptions:
    from forkpatch.rebase import RebaseOptions

    if no_three_way and fuzz:
        raise UsageError("--no-3way means exact context only: it cannot be combined with --fuzz")
    return RebaseOptions(
        onto=onto,
        three_way=not no_three_way,
        fuzz=fuzz,
        report_dir=report_dir.resolve() if report_dir else None,
    )


def _summary(plan: Plan, emit: Callable[[str], None]) -> None:
    """Every patch's verdict, through ``emit``: stdout as the result of `check`, stderr
    beside --json (which is then alone on stdout)."""
    counts: dict[str, int] = {}
    for o in plan.outcomes:
        counts[o.status] = counts.get(o.status, 0) + 1
    emit(
        f"{plan.base} ({plan.base_commit[:12]}) -> {plan.onto} ({plan.onto_commit[:12]}): "
        + ", ".join(f"{n} {s}" for s, n in counts.items())
    )
    limit = 8  # per patch; --json has everything
    for o in plan.outcomes:
        lines = [c.reason for c in o.conflicts]
        if o.replaced_by:
            from forkpatch.rebase import replacement

            lines.append(replacement(o.replaced_by, plan.onto))
        if o.status != "clean":
            lines += o.detail
        if o.evidence:
            lines.append(o.evidence)
        for line in lines[:limit]:
            emit(f"  {o.name}: {line}")
        if len(lines) > limit:
            emit(f"  {o.name}: ... {len(lines) - limit} more (see --json)")
    _forecast_summary(plan, emit)


def _forecast_summary(plan: Plan, emit: Callable[[str], None]) -> None:
    """How to read the patches above the first conflict (see README, "Reading a forecast")."""
    first = plan.first_conflict
    above = [o for o in plan.outcomes if o.forecast is not None]
    if first is None or not above:
        return
    sure = [o for o in above if o.forecast and o.forecast.independent]
    unsure = [o for o in above if o.forecast and not o.forecast.independent]
    conflicts = sum(1 for o in plan.outcomes if o.status == "conflict")
    emit(
        f"forecast past '{first.name}' (as if each conflicting patch were skipped): "
        f"{len(sure)} patch(es) independent of the conflicts (their outcome is certain), "
        f"{len(unsure)} sharing files with them; {conflicts} conflict(s) in all"
    )
    for o in unsure:
        assert o.forecast is not None
        emit(
            f"  {o.name}: depends on {', '.join(o.forecast.depends_on)}: {o.status} if "
            f"skipped, {o.forecast.if_merged} if merged with the conflict markers kept"
        )


three_way_opt = click.option(
    "--no-3way",
    "no_three_way",
    is_flag=True,
    help="Exact context only, zero fuzz: a hunk that does not apply as is conflicts.",
)
fuzz_opt = click.option(
    "--fuzz",
    type=click.IntRange(0, 3),
    default=0,
    show_default=True,
    help="Let hunks apply with up to N context lines ignored (reported as 'fuzz'; the "
    "refreshed file no longer needs it).",
)


@click.command()
@click.option(
    "--onto",
    required=True,
    metavar="REF",
    help="Where to check the series: a tag of the fork, a branch (main, origin/main) "
    "or a commit id.",
)
@three_way_opt
@fuzz_opt
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output on stdout.")
@pass_ctx
def check(c: Ctx, onto: str, no_three_way: bool, fuzz: int, as_json: bool) -> None:
    """Dry run of `rebase --onto TAG`: how each patch would fare. Changes nothing.

    Past a conflict every patch is still forecast (as if the conflicting one were
    skipped, and as if it were merged with its markers), marked independent when it
    shares no file with it. Exit status 0 when nothing conflicts, 3 when a patch
    conflicts.
    """
    from forkpatch.rebase import check as run_check

    plan = run_check(c.project(), _options(onto, no_three_way, fuzz))
    if as_json:
        log.emit_json(plan.to_json())
    _summary(plan, log.info if as_json else log.result)
    if not plan.ok:
        raise PatchesConflict(f"a patch conflicts on {onto}")


@click.command()
@click.option(
    "--onto",
    metavar="REF",
    help="Where to move the series: a tag of the fork (the usual target), a branch or a commit id.",
)
@click.option(
    "--continue",
    "continue_",
    is_flag=True,
    help="Go on after resolving a conflict (or finish an interrupted rebase).",
)
@click.option("--skip", is_flag=True, help="Drop the conflicting patch and go on.")
@click.option("--abort", is_flag=True, help="Restore everything as before the rebase.")
@three_way_opt
@fuzz_opt
@click.option(
    "--report",
    "report_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Also write the report (.md and .json) into DIR (with --onto, or with the "
    "--continue / --skip that finishes the rebase).",
)
@click.option("--json", "as_json", is_flag=True, help="The report as JSON on stdout.")
@pass_ctx
def rebase(
    c: Ctx,
    onto: str | None,
    continue_: bool,
    skip: bool,
    abort: bool,
    no_three_way: bool,
    fuzz: int,
    report_dir: Path | None,
    as_json: bool,
) -> None:
    """Move the series onto TAG: refresh the patches, drop the upstreamed ones.

    Stops at a conflict with a work tree to resolve it in; then `--continue`,
    `--skip` or `--abort`.
    """
    from forkpatch import rebase as core

    _exactly_one(onto=onto, continue_=continue_, skip=skip, abort=abort)
    if report_dir is not None and not abort:
        _check_writable(report_dir)
    with c.locked_project() as project:
        if abort:
            _show_abort(core.abort(project))
            return
        result = _move(project, onto, continue_, no_three_way, fuzz, report_dir, as_json)
    _show_rebase(result, as_json)


def _exactly_one(*, onto: str | None, continue_: bool, skip: bool, abort: bool) -> None:
    chosen = [
        n
        for n, v in (
            ("--onto", onto),
            ("--continue", continue_),
            ("--skip", skip),
            ("--abort", abort),
        )
        if v
    ]
    if len(chosen) != 1:
        raise UsageError("give exactly one of --onto TAG, --continue, --skip, --abort")


def _move(
    project: Project,
    onto: str | None,
    continue_: bool,
    no_three_way: bool,
    fuzz: int,
    report_dir: Path | None,
    as_json: bool,
) -> RebaseResult:
    """Start (--onto), go on (--continue) or skip: a stop for a conflict is also told
    as JSON on stdout under --json."""
    from forkpatch import rebase as core

    try:
        if onto:
            return core.rebase(project, _options(onto, no_three_way, fuzz, report_dir))
        if continue_:
            return core.continue_(project, report_dir.resolve() if report_dir else None)
        return core.skip(project, report_dir.resolve() if report_dir else None)
    except ConflictError as exc:
        if as_json:
            state = exc.state if isinstance(exc, core.RebaseStopped) else None
            stopped = core.stopped_json(project, state)
            if stopped is not None:
                log.emit_json(stopped)
        raise


def _show_abort(changed: list[str]) -> None:
    log.info(
        "rebase aborted; "
        + (
            f"restored {', '.join(changed)}"
            if changed
            else "patches/ and series.yaml were unchanged"
        )
    )


def _show_rebase(result: RebaseResult, as_json: bool) -> None:
    """The result: what happened and where the whole report is (the Markdown is a
    pull request body, not terminal output)."""
    if as_json:
        log.emit_json(result.report.to_json())
        return
    summary = result.report.summary
    log.result(
        f"rebased onto {result.plan.onto} ({result.plan.onto_commit[:12]}): "
        + (", ".join(f"{n} {s}" for s, n in summary.items()) or "no patches")
        + "; "
        + (f"{len(result.written)} file(s) changed" if result.written else "nothing changed")
    )
    for d in result.report.dropped:
        log.result(f"  dropped {d.name} ({d.status}): {d.reason}")
    for p in result.report_paths:
        if p.suffix == ".md":
            log.result(f"report: {p}")


def _check_writable(directory: Path) -> None:
    """Fail now, before the rebase changes anything, when ``--report DIR`` cannot be
    written (the OSError names DIR; the CLI turns it into exit 1 with a tip)."""
    import tempfile

    directory.mkdir(parents=True, exist_ok=True)
    fd, probe = tempfile.mkstemp(dir=directory, prefix=".forkpatch-probe-")
    os.close(fd)
    os.unlink(probe)
