"""`forkpatch demo`: the whole workflow on a built-in example, offline, no GPU.

:data:`DEMO_STAGES` lists the stages in order; each gets the demo context and adds
what it produced to the summary. The demo sits on top of everything (nothing in
the core imports it).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forkpatch import log
from forkpatch.errors import UsageError
from forkpatch.views import print_results


@dataclass(frozen=True)
class DemoContext:
    root: Path
    fork: Path
    project_dir: Path
    summary: dict[str, Any] = field(default_factory=dict)


def _stage_setup(ctx: DemoContext) -> None:
    from forkpatch.example import make_fork, write_example_patches
    from forkpatch.importer import import_patches
    from forkpatch.ops import init_project

    with log.step("create an example fork (tags v1.2.0, v1.2.1, v1.3.0)"):
        fork = make_fork(ctx.fork)
        incoming = write_example_patches(ctx.fork, "v1.2.1", ctx.root / "incoming")
        log.info(f"    fork: {ctx.fork}")
        log.info(f"    {len(incoming)} patches from `git format-patch` in {ctx.root / 'incoming'}")
    with log.step("forkpatch init --fork-url <example fork> --base v1.2.1"):
        project = init_project(
            ctx.project_dir,
            fork_url=str(ctx.fork),
            base_tag="v1.2.1",
            fork_name="1Cat-vLLM (example)",
            distribution="1cat-vllm",
            fork_override=None,
        )
    with log.step("forkpatch import <the format-patch files>"):
        entries = import_patches(project, incoming)
        for e in entries:
            log.info(f"    {e.name} -> patches/{e.file}")
    ctx.summary.update(
        {
            "fork": str(ctx.fork),
            "project": str(ctx.project_dir),
            "tags": fork.tags,
            "patches": [e.name for e in entries],
        }
    )


def _stage_status_apply(ctx: DemoContext) -> None:
    from forkpatch.ops import series_status
    from forkpatch.project import Project
    from forkpatch.stack import Stack

    project = Project(ctx.project_dir)
    with log.step("forkpatch status"):
        report = series_status(project)
        print_results(report.results)
    with log.step("forkpatch apply (work tree with one commit per patch)"):
        path, _ = Stack(project).apply()
        log.info(f"    work tree: {path}")
    ctx.summary["status"] = {r.name: r.status for r in report.results}
    ctx.summary["worktree"] = str(path)


def _stage_build(ctx: DemoContext) -> None:
    from forkpatch.example import build_release_wheel
    from forkpatch.project import Project
    from forkpatch.series import PatchEntry
    from forkpatch.wheels.buildwheel import build_wheel
    from forkpatch.wheels.options import BuildOptions
    from forkpatch.wheels.verify import verify_wheel

    project = Project(ctx.project_dir)
    series = project.series
    if "vllm-dist-info" not in series.names():
        # The dist-info fix is a build step, not a diff: series.yaml lists it so the
        # wheel provides importlib.metadata.version("vllm") properly.
        project.save_series(
            series.with_patches(
                [
                    *series.patches,
                    PatchEntry(
                        name="vllm-dist-info",
                        build_step="vllm-dist-info",
                        summary="Answer importlib.metadata.version('vllm') with the wheel's version",
                    ),
                ]
            )
        )
        series = project.series
    tag = series.base.tag
    with log.step(f"the fork's released wheel for {tag} (built offline for the demo)"):
        base_wheel = build_release_wheel(ctx.fork, tag, ctx.root / "release")
        log.info(f"    {base_wheel}")
    with log.step("forkpatch build-wheel --mode overlay --base-wheel <released wheel>"):
        result = build_wheel(project, BuildOptions(mode="overlay", base_wheel=base_wheel))
    with log.step("forkpatch verify <built wheel>"):
        report = verify_wheel(result.wheels[0])
        log.info(f"    RECORD {'ok' if report.ok else 'FAILED'}; version {report.version}")
    ctx.summary["build"] = {
        "wheel": str(result.wheels[0]),
        "version": result.version,
        "mode": result.mode,
        "base_wheel": str(base_wheel),
    }


TEAM_CHECK = "static.team-vllm-is-the-wheel"


def _stage_droppable(ctx: DemoContext) -> None:
    """series.yaml says what the demo's patches became and how to drop them, and adds a
    check of the team's own; then `status --upstream` and `droppable --onto v1.3.0`."""
    from dataclasses import replace

    from forkpatch.droppable import DroppableOptions, evaluate, print_result
    from forkpatch.project import Project
    from forkpatch.upstream_status import upstream_states

    project = Project(ctx.project_dir)
    series = project.series
    fixed = project.fork().resolve_tag("v1.3.0")
    patches = []
    for p in series.patches:
        if p.name == "cli-version":
            p = replace(
                p,
                upstream=f"the fork took it ({fixed})",
                drop_when=p.drop_when or "the fork reads the CLI version from its package",
                drop_when_upstreamed=True,
            )
        elif p.name == "capability-floor":
            p = replace(p, smoke=(*p.smoke, TEAM_CHECK))
        patches.append(p)
    checks = {
        TEAM_CHECK: {
            "command": [
                "python",
                "-c",
                "import sys, vllm; sys.exit('site-packages' not in vllm.__file__)",
            ],
            "summary": "vllm is imported from the installed wheel",
        }
    }
    smoke = {**series.smoke.as_mapping(), "checks": checks}
    project.save_series(
        replace(series.with_patches(patches), sections={**series.sections, "smoke": smoke})
    )
    with log.step("forkpatch status --upstream (cli-version names the fork's commit)"):
        ups = upstream_states(project, project.series.patches)
        for name, up in ups.items():
            log.info(up.describe(name))
    with log.step("forkpatch droppable --onto v1.3.0 (cli-version: drop-when upstreamed)"):
        result = evaluate(project, DroppableOptions(onto="v1.3.0"))
        print_result(result)
    ctx.summary["upstream"] = {n: u.state for n, u in ups.items()}
    ctx.summary["droppable"] = {v.name: v.verdict for v in result.patches}


def _stage_rebase(ctx: DemoContext) -> None:
    """`forkpatch check --onto v1.3.0` then `forkpatch rebase --onto v1.3.0`, with the report."""
    from forkpatch.project import Project
    from forkpatch.rebase import RebaseOptions, check, rebase
    from forkpatch.rebase import report as report_mod

    project = Project(ctx.project_dir)
    with log.step("forkpatch check --onto v1.3.0 (dry run)"):
        plan = check(project, RebaseOptions(onto="v1.3.0"))
    with log.step("forkpatch rebase --onto v1.3.0"):
        result = rebase(project, RebaseOptions(onto="v1.3.0"))
    log.info(report_mod.markdown(result.report))
    for p in result.report_paths:
        log.info(f"    report: {p}")
    ctx.summary["rebase"] = {
        "onto": result.plan.onto,
        "check": {o.name: o.status for o in plan.outcomes},
        "status": {o.name: o.status for o in result.plan.outcomes},
        "changed_files": list(result.written),
        "report": [str(p) for p in result.report_paths],
    }


def _stage_smoke_publish(ctx: DemoContext) -> None:
    """Smoke the wheel the build stage made (static tier), then publish it to a directory."""
    from forkpatch.project import Project
    from forkpatch.publish import PublishOptions, install_line, publish
    from forkpatch.smoke import SmokeOptions, run_smoke
    from forkpatch.smoke.runner import print_summary

    project = Project(ctx.project_dir)
    wheel = (ctx.summary.get("build") or {}).get("wheel")
    if not wheel:
        log.info("no wheel was built by an earlier stage: skipping smoke and publish")
        return
    wheel = Path(wheel)
    with log.step("forkpatch smoke --tier static <wheel>  (deps: this interpreter's packages)"):
        outcome = run_smoke(SmokeOptions(wheels=(wheel,), tier="static", deps="system"), project)
        print_summary(outcome.report)
    static = outcome.report.status("static")
    ctx.summary["team_check"] = outcome.report.outcomes().get(TEAM_CHECK)
    ctx.summary.update({"smoke_passed": outcome.passed, "smoke_tiers": outcome.report.statuses()})
    if static != "passed":
        # Not passed (e.g. no torch here, so the patched modules cannot import): the
        # publish gate would refuse, as it should; the demo says so instead of failing.
        log.warn(f"static tier {static}: not publishing (the gate requires it to pass)")
        return
    index = ctx.root / "index"
    with log.step(f"forkpatch publish <wheel> --to {index} --allow-missing-tier sm70"):
        done = publish(
            PublishOptions(wheels=(wheel,), to=str(index), allow_missing_tiers=("sm70",)), project
        )
    line = install_line(str(index), None, [p.file for p in done])
    log.info(f"    {line}")
    ctx.summary.update(
        {"published": [p.to_json() for p in done], "index": str(index), "install": line}
    )


# The order a user would follow: set up, apply, rebase onto the newer tag, build,
# then smoke and publish.
DEMO_STAGES: list[Callable[[DemoContext], None]] = [
    _stage_setup,
    _stage_status_apply,
    _stage_droppable,
    _stage_rebase,
    _stage_build,
    _stage_smoke_publish,
]


def run_demo(directory: Path | None) -> dict[str, Any]:
    root = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="forkpatch-demo-"))
    root = root.resolve()
    if root.exists() and any(root.iterdir()):
        raise UsageError(f"{root} is not empty", tip="give a new or empty directory")
    root.mkdir(parents=True, exist_ok=True)
    ctx = DemoContext(root=root, fork=root / "fork", project_dir=root / "project")
    log.info(f"forkpatch demo in {root}")
    for stage in DEMO_STAGES:
        stage(ctx)
    _print_locations(ctx)
    return ctx.summary


def _print_locations(ctx: DemoContext) -> None:
    """Where everything the demo made is, for a person to look at."""
    s = ctx.summary
    rows = [
        ("example fork (a git repository)", s.get("fork")),
        ("project (series.yaml, patches/)", s.get("project")),
        ("editing work tree", s.get("worktree")),
    ]
    reports = (s.get("rebase") or {}).get("report") or []
    rows += [("rebase report", r) for r in reports if str(r).endswith(".md")]
    if s.get("build"):
        rows.append(("built wheel", s["build"].get("wheel")))
    for p in s.get("published") or []:
        rows.append(("smoke report", p.get("report")))
    if s.get("index"):
        rows.append(("published index (PEP 503)", s["index"]))
    log.info("")
    log.info("where everything is:")
    for label, path in rows:
        if path:
            log.info(f"  {label:34} {path}")
    if s.get("install"):
        log.info(f"install it: {s['install']}")
    log.info(f"next: cd {ctx.project_dir} && forkpatch status")
