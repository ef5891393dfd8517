"""Demo stage: the built wheel -> smoke (static tier) -> publish to a directory index."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from forkpatch import log


def stage_smoke_publish(ctx: Any) -> None:
    """Smoke the wheel the build stage made (static tier), then publish it to a directory."""
    from forkpatch.project import Project
    from forkpatch.publish import PublishOptions, publish
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
    static = outcome.report["tiers"]["status"]["static"]
    ctx.summary.update(
        {"smoke_passed": outcome.passed, "smoke_tiers": outcome.report["tiers"]["status"]}
    )
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
    from forkpatch.cli_smoke import install_line

    line = install_line(str(index), None, [p.file for p in done])
    log.info(f"    {line}")
    ctx.summary.update(
        {"published": [p.to_json() for p in done], "index": str(index), "install": line}
    )
