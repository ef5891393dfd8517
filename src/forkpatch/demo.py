"""`forkpatch demo`: the whole workflow on a built-in example, offline, no GPU.

Later stages extend :data:`DEMO_STAGES`; each stage gets the demo context and
adds what it produced to the summary.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forkpatch import log
from forkpatch.errors import UsageError


@dataclass
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
        project = init_project(ctx.project_dir, fork_url=str(ctx.fork), base_tag="v1.2.1",
                               fork_name="1Cat-vLLM (example)", distribution="1cat-vllm",
                               fork_override=None)
    with log.step("forkpatch import <the format-patch files>"):
        entries = import_patches(project, files=incoming, quilt_dir=None)
        for e in entries:
            log.info(f"    {e.name} -> patches/{e.file}")
    ctx.summary.update({"fork": str(ctx.fork), "project": str(ctx.project_dir),
                        "tags": fork.tags, "patches": [e.name for e in entries]})


def _stage_status_apply(ctx: DemoContext) -> None:
    from forkpatch.cli import _print_results
    from forkpatch.ops import series_status
    from forkpatch.project import Project
    from forkpatch.stack import Stack

    project = Project(ctx.project_dir)
    with log.step("forkpatch status"):
        report = series_status(project)
        _print_results(report.results)
    with log.step("forkpatch apply (work tree with one commit per patch)"):
        path, _ = Stack(project).apply()
        log.info(f"    work tree: {path}")
    ctx.summary["status"] = {r.name: r.status for r in report.results}
    ctx.summary["worktree"] = str(path)


DEMO_STAGES: list[Callable[[DemoContext], None]] = [_stage_setup, _stage_status_apply]


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
    log.info(f"done. Try: cd {ctx.project_dir} && forkpatch status")
    return ctx.summary
