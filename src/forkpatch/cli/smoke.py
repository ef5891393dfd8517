"""``forkpatch smoke``: the smoke suite over wheels, or the bisect of a failing check."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from forkpatch import log
from forkpatch.cli import options
from forkpatch.cli.context import Ctx, pass_ctx
from forkpatch.errors import SmokeError, UsageError
from forkpatch.kinds import TIERS, SmokeDeps, Tier
from forkpatch.sections import SmokeConfig

if TYPE_CHECKING:
    from forkpatch.smoke import SmokeOutcome


@dataclass(frozen=True)
class _Given:
    """What the command line gave, for one smoke run or a bisect."""

    wheels: tuple[Path, ...]
    tier: Tier
    deps: SmokeDeps | None
    python: str | None
    index_url: str | None
    allow_missing: tuple[Tier, ...]
    as_json: bool
    junit: Path | None
    report_path: Path | None
    keep_env: bool
    timeout_s: float
    ptx_lib: Path | None
    base_wheel: Path | None


def _list_checks(c: Ctx) -> None:
    """--list-checks: the known checks, one row each."""
    from forkpatch.smoke import checks
    from forkpatch.views import table

    rows = [
        [s.id, s.tier, "yes" if s.baseline else "", ", ".join(s.needs), s.summary]
        for s in checks.registry(getattr(c.project_or_none(), "series", None)).values()
    ]
    log.result(table(rows, ["check", "tier", "baseline", "needs", "what it proves"]))


def _bisect(c: Ctx, target: Path, g: _Given) -> None:
    """--bisect WHEEL|SERIES: the first patch whose addition makes a check fail."""
    from forkpatch.smoke.bisect import BisectOptions, bisect, print_result

    if g.junit is not None or g.report_path is not None or g.allow_missing:
        raise UsageError(
            "--junit, --report and --allow-missing-tier are about one smoke run, not a bisect",
            tip="use --json for the bisect's result",
        )
    if g.wheels:
        raise UsageError(
            "--bisect takes one WHEEL or series, not more arguments",
            tip="forkpatch smoke --bisect dist/1cat_vllm-*.whl",
        )
    project = c.project_or_none()
    smoke_cfg = project.series.smoke if project is not None else SmokeConfig()
    opts = BisectOptions(
        target=None if str(target) == "." and project is not None else target,
        base_wheel=g.base_wheel,
        tier=g.tier,
        deps=options.pick(g.deps, None, "system"),
        python=options.pick(g.python, smoke_cfg.python, None),
        index_url=options.pick(g.index_url, smoke_cfg.index_url, None),
        keep_env=g.keep_env,
        timeout_s=g.timeout_s,
    )
    result = bisect(opts, project, fork_override=c.fork_repo)
    print_result(result, emit=log.info if g.as_json else log.result)
    if g.as_json:
        log.emit_json(result.to_json())


@click.command()
@click.argument("wheels", nargs=-1, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--tier",
    type=click.Choice(TIERS),
    default="sm70",
    show_default=True,
    help="Highest tier to run (cumulative; gpu-jit, the fork's SM70 kernels as PTX on "
    "any GPU of capability 7.0+, runs static, gpu and gpu-jit and never counts as "
    "sm70). Tiers whose hardware is absent are "
    "reported as not run, never as passed.",
)
@options.smoke_deps("--deps", "deps")
@options.smoke_python("--python", "python")
@click.option(
    "--index-url",
    metavar="URL",
    help="Index for --deps index (default: series smoke.index-url, else pip's configuration).",
)
@options.allow_missing_tier(TIERS, what="Exit 0 (not 5)")
@options.as_json("The report")
@click.option(
    "--junit",
    "junit",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write a JUnit XML report to FILE.",
)
@click.option(
    "--report",
    "report_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the JSON report to FILE.",
)
@click.option(
    "--keep-env",
    is_flag=True,
    help="Keep the smoke venv for debugging [env: FORKPATCH_KEEP_SMOKE_ENV=1].",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=float,
    default=3600.0,
    show_default=True,
    help="Seconds the whole smoke run may take: the environment, the checks and each "
    "team check share this one deadline.",
)
@click.option(
    "--ptx-lib",
    "ptx_lib",
    type=click.Path(dir_okay=False, path_type=Path),
    help="For --tier gpu-jit: the fork's SM70 FP8 kernels built as compute_70 PTX "
    "(ci/sm70-ptx-lib.sh prints its path).",
)
@click.option("--list-checks", is_flag=True, help="List the known checks and exit.")
@click.option(
    "--bisect",
    "bisect",
    metavar="WHEEL|SERIES",
    is_flag=False,
    flag_value=".",
    default=None,
    type=click.Path(path_type=Path),
    help="Find the first patch whose addition makes a check fail: smoke WHEEL "
    "(built from this series) or the series (series.yaml or its project "
    "directory; default: this project), then build (overlay path) and "
    "smoke prefixes of the series.",
)
@options.base_wheel(for_what="the --bisect prefixes are overlaid on")
@pass_ctx
def smoke(
    c: Ctx,
    wheels: tuple[Path, ...],
    tier: Tier,
    deps: SmokeDeps | None,
    python: str | None,
    index_url: str | None,
    allow_missing: tuple[Tier, ...],
    as_json: bool,
    junit: Path | None,
    report_path: Path | None,
    keep_env: bool,
    timeout_s: float,
    ptx_lib: Path | None,
    list_checks: bool,
    bisect: Path | None,
    base_wheel: Path | None,
) -> None:
    """Install WHEEL(s) in a fresh environment and run the smoke checks there.

    The report is stored by the wheel's sha256 (.forkpatch/smoke/<sha256>.json in
    the project, else <wheel>.smoke.json); `forkpatch publish` requires it.
    Exit code 1 when a check failed; 5 when no check failed but a tier asked for
    (--tier and the tiers below it, smoke.required-tiers) did not run or ran
    incomplete (--allow-missing-tier accepts that).
    """
    given = _Given(
        wheels=wheels,
        tier=tier,
        deps=deps,
        python=python,
        index_url=index_url,
        allow_missing=allow_missing,
        as_json=as_json,
        junit=junit,
        report_path=report_path,
        keep_env=keep_env,
        timeout_s=timeout_s,
        ptx_lib=ptx_lib,
        base_wheel=base_wheel,
    )
    if list_checks:
        _list_checks(c)
    elif bisect is not None:
        _bisect(c, bisect, given)
    else:
        _show_smoke(_smoke(c, given), as_json)


def _smoke(c: Ctx, g: _Given) -> SmokeOutcome:
    """One smoke run over the wheels given."""
    from forkpatch.smoke import SmokeOptions, run_smoke

    if g.base_wheel is not None:
        raise UsageError(
            "--base-wheel goes with --bisect",
            tip="forkpatch smoke --bisect WHEEL|series.yaml --base-wheel PATH",
        )
    if not g.wheels:
        raise UsageError("no wheel given", tip="forkpatch smoke dist/1cat_vllm-*.whl")
    project = c.project_or_none()
    smoke_cfg = project.series.smoke if project is not None else SmokeConfig()
    opts = SmokeOptions(
        wheels=g.wheels,
        tier=g.tier,
        deps=options.pick(g.deps, None, "system"),
        python=options.pick(g.python, smoke_cfg.python, None),
        index_url=options.pick(g.index_url, smoke_cfg.index_url, None),
        keep_env=g.keep_env,
        timeout_s=g.timeout_s,
        report_path=g.report_path,
        junit_path=g.junit,
        ptx_lib=g.ptx_lib,
        allow_missing_tiers=g.allow_missing,
    )
    return run_smoke(opts, project)


def _show_smoke(outcome: SmokeOutcome, as_json: bool) -> None:
    """The summary and the reports written (stderr), the report as JSON, and the exit
    status: a failed check, or a tier asked for that did not run."""
    from forkpatch.smoke.runner import failure_tip, print_summary

    print_summary(outcome.report)
    for p in outcome.written:
        log.info(f"wrote {p}")
    if as_json:
        log.emit_json(outcome.report.to_json())
    if not outcome.passed:
        failed = [
            ch.id + (f" (declared by {', '.join(ch.patches)})" if ch.patches else "")
            for ch in outcome.report.failed()
        ]
        raise SmokeError(
            f"{len(failed)} smoke check(s) failed: {', '.join(failed)}",
            tip=failure_tip(outcome.report),
        )
    for accepted, why in outcome.allowed_missing.items():
        log.warn(f"tier {accepted} {why} [accepted: --allow-missing-tier {accepted}]")
    if outcome.missing:
        raise outcome.not_run_error()
