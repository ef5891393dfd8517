"""``forkpatch smoke`` and ``forkpatch publish`` (registered by cli.py when present)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from forkpatch import log
from forkpatch.errors import NoProjectError, SmokeError, UsageError
from forkpatch.sections import SmokeConfig


def _project_or_none(c: Any) -> Any:
    """The project when there is a series.yaml (smoke and publish also work without one)."""
    try:
        return c.project()
    except NoProjectError:
        return None


def _bisect(
    c: Any,
    target: Path,
    wheels: tuple[Path, ...],
    *,
    base_wheel: Path | None,
    tier: str,
    deps: str | None,
    python: str | None,
    index_url: str | None,
    keep_env: bool,
    timeout_s: float,
    as_json: bool,
) -> None:
    from forkpatch.smoke.bisect import BisectOptions, bisect, print_result

    if wheels:
        raise UsageError(
            "--bisect takes one WHEEL or series, not more arguments",
            tip="forkpatch smoke --bisect dist/1cat_vllm-*.whl",
        )
    project = _project_or_none(c)
    smoke_cfg = project.series.smoke if project is not None else SmokeConfig()
    opts = BisectOptions(
        target=None if str(target) == "." and project is not None else target,
        base_wheel=base_wheel,
        tier=tier,
        deps=deps or "system",
        python=python or smoke_cfg.python,
        index_url=index_url or smoke_cfg.index_url,
        keep_env=keep_env,
        timeout_s=timeout_s,
    )
    result = bisect(opts, project, fork_override=c.fork_repo)
    print_result(result)
    if as_json:
        log.emit_json(result.to_json())


def install_line(to: str, simple_url: str | None, files: list[str]) -> str:
    """The pip command that installs what was published to ``to``.

    ``--extra-index-url``, not ``--index-url``: the target holds only our wheels,
    and their dependencies (the fork's requirements) come from the default index.
    The exact pin keeps it safe from a same-named package elsewhere: a local
    version (``+fp.<label>``) cannot be on PyPI.
    """
    from packaging.utils import parse_wheel_filename

    from forkpatch.publish import DirTarget, IndexTarget, open_target

    target = open_target(to, simple_url=simple_url)
    if isinstance(target, DirTarget):
        index = target.simple.as_uri() + "/"
    else:
        assert isinstance(target, IndexTarget)
        index = target.simple_url
    pins = []
    for f in files:
        name, version, _build, _tags = parse_wheel_filename(Path(f).name)
        pin = f"'{name}=={version}'"
        if pin not in pins:
            pins.append(pin)
    return f"pip install --extra-index-url {index} {' '.join(pins)}"


def register(cli: click.Group) -> None:
    from forkpatch.cli_context import pass_ctx

    @cli.command()
    @click.argument("wheels", nargs=-1, type=click.Path(dir_okay=False, path_type=Path))
    @click.option(
        "--tier",
        type=click.Choice(["static", "gpu", "sm70", "gpu-jit"]),
        default="sm70",
        show_default=True,
        help="Highest tier to run (cumulative; gpu-jit, the fork's SM70 kernels as PTX on "
        "any GPU of capability 7.0+, runs static, gpu and gpu-jit and never counts as "
        "sm70). Tiers whose hardware is absent are "
        "reported as not run, never as passed.",
    )
    @click.option(
        "--deps",
        type=click.Choice(["system", "index", "none"]),
        default=None,
        help="Where the wheels' dependencies come from: the interpreter's own "
        "packages (system, the default: torch/CUDA of the box), the index "
        "(index), or nowhere (none; checks needing torch are not run).",
    )
    @click.option(
        "--python",
        "python",
        metavar="PYTHON",
        help="Interpreter for the smoke venv (default: series smoke.python, else "
        "this one). On a V100 box: the python that has torch.",
    )
    @click.option(
        "--index-url",
        metavar="URL",
        help="Index for --deps index (default: series smoke.index-url, else pip's configuration).",
    )
    @click.option(
        "--allow-missing-tier",
        "allow_missing",
        multiple=True,
        type=click.Choice(["static", "gpu", "sm70", "gpu-jit"]),
        help="Exit 0 although this tier (asked for by --tier or smoke.required-tiers) "
        "did not run or ran incomplete; the report still says it did not run. "
        "Without it such a run exits 5. Repeatable.",
    )
    @click.option("--json", "as_json", is_flag=True, help="The report on stdout.")
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
        help="Seconds the checks may take in all.",
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
    @click.option(
        "--base-wheel",
        type=click.Path(dir_okay=False, path_type=Path),
        help="With --bisect: the fork's released wheel the prefixes are overlaid on "
        "(default: series build.base-wheel).",
    )
    @pass_ctx
    def smoke(
        c: Any,
        wheels: tuple[Path, ...],
        tier: str,
        deps: str | None,
        python: str | None,
        index_url: str | None,
        allow_missing: tuple[str, ...],
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
        from forkpatch.smoke import checks

        if list_checks:
            rows = [
                [s.id, s.tier, "yes" if s.baseline else "", ", ".join(s.needs), s.summary]
                for s in checks.registry(getattr(_project_or_none(c), "series", None)).values()
            ]
            from forkpatch.views import table

            click.echo(table(rows, ["check", "tier", "baseline", "needs", "what it proves"]))
            return
        if bisect is not None:
            if junit is not None or report_path is not None or allow_missing:
                raise UsageError(
                    "--junit, --report and --allow-missing-tier are about one smoke run, "
                    "not a bisect",
                    tip="use --json for the bisect's result",
                )
            _bisect(
                c,
                bisect,
                wheels,
                base_wheel=base_wheel,
                tier=tier,
                deps=deps,
                python=python,
                index_url=index_url,
                keep_env=keep_env,
                timeout_s=timeout_s,
                as_json=as_json,
            )
            return
        if base_wheel is not None:
            raise UsageError(
                "--base-wheel goes with --bisect",
                tip="forkpatch smoke --bisect WHEEL|series.yaml --base-wheel PATH",
            )
        if not wheels:
            raise UsageError("no wheel given", tip="forkpatch smoke dist/1cat_vllm-*.whl")
        from forkpatch.smoke import SmokeOptions, run_smoke
        from forkpatch.smoke.runner import print_summary

        project = _project_or_none(c)
        smoke_cfg = project.series.smoke if project is not None else SmokeConfig()
        opts = SmokeOptions(
            wheels=wheels,
            tier=tier,
            deps=deps or "system",
            python=python or smoke_cfg.python,
            index_url=index_url or smoke_cfg.index_url,
            keep_env=keep_env,
            timeout_s=timeout_s,
            report_path=report_path,
            junit_path=junit,
            ptx_lib=ptx_lib,
            allow_missing_tiers=allow_missing,
        )
        outcome = run_smoke(opts, project)
        print_summary(outcome.report)
        for p in outcome.written:
            log.info(f"wrote {p}")
        if as_json:
            log.emit_json(outcome.report.to_json())
        if not outcome.passed:
            from forkpatch.smoke.runner import failure_tip

            failed = [
                ch.id + (f" (declared by {', '.join(ch.patches)})" if ch.patches else "")
                for ch in outcome.report.failed()
            ]
            raise SmokeError(
                f"{len(failed)} smoke check(s) failed: {', '.join(failed)}",
                tip=failure_tip(outcome.report),
            )
        for tier, why in outcome.allowed_missing.items():
            log.warn(f"tier {tier} {why} [accepted: --allow-missing-tier {tier}]")
        if outcome.missing:
            raise outcome.not_run_error()

    @cli.command()
    @click.argument(
        "wheels", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path)
    )
    @click.option(
        "--to",
        "to",
        metavar="URL|DIR",
        help="An upload index (http[s]://...) or a directory to keep as a static "
        "PEP 503 index (default: series publish.to).",
    )
    @click.option(
        "--allow-missing-tier",
        "allow_missing",
        multiple=True,
        type=click.Choice(["static", "gpu", "sm70", "gpu-jit"]),
        help="Publish although this required tier did not run (logged, and written "
        "into the published report). Never covers a failed tier.",
    )
    @click.option(
        "--report",
        "reports",
        multiple=True,
        type=click.Path(dir_okay=False, path_type=Path),
        help="A smoke report file to consider (default: the project's store, then "
        "<wheel>.smoke.json).",
    )
    @click.option(
        "--simple-url", metavar="URL", help="The index's PEP 503 pages (default: <URL>/simple/)."
    )
    @click.option("--json", "as_json", is_flag=True, help="What was published, on stdout.")
    @pass_ctx
    def publish(
        c: Any,
        wheels: tuple[Path, ...],
        to: str | None,
        allow_missing: tuple[str, ...],
        reports: tuple[Path, ...],
        simple_url: str | None,
        as_json: bool,
    ) -> None:
        """Publish WHEEL(s) that passed the smoke suite to an index or a directory.

        Credentials: TWINE_USERNAME / TWINE_PASSWORD or the keyring, never options.
        """
        from forkpatch.publish import PublishOptions
        from forkpatch.publish import publish as do_publish

        project = _project_or_none(c)
        target = to or (project.series.publish.to if project else None)
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
        for p in done:
            extra = f" (without tier(s) {', '.join(p.overrides)})" if p.overrides else ""
            log.info(f"{p.action}: {p.file}{extra}")
        if done:
            log.info("install: " + install_line(str(target), simple_url, [p.file for p in done]))
        if as_json:
            log.emit_json({"target": str(target), "published": [p.to_json() for p in done]})
