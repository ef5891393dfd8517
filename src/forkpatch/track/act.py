"""``forkpatch track --run``: the stages for the chosen tag, one after the other, each
result saved as it comes, in the run's own work directory (never the project itself).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forkpatch import __version__, log
from forkpatch.errors import ForkpatchError, UsageError
from forkpatch.fsutil import atomic_write, name_part
from forkpatch.kinds import TrackStatus
from forkpatch.project import Project
from forkpatch.track.pipeline import RunContext, RunOptions
from forkpatch.track.releases import TagInfo, TrackReport, bot_branch, list_releases, pick_tag
from forkpatch.track.stages import (
    RESULT_VERSION,
    STEPS,
    RebaseConflict,
    RunInfo,
    RunKey,
    RunState,
    Skipped,
    Stages,
    parse_state_marker,
    series_digest,
)
from forkpatch.track.workdir import LATEST_FILE, WorkDir, out_root


@dataclass(frozen=True)
class RunResult:
    status: TrackStatus
    report: TrackReport
    state: RunState | None = None
    work_dir: Path | None = None
    error: ForkpatchError | None = None
    note: str | None = None

    def to_json(self) -> dict[str, Any]:
        if self.state is None:
            return {
                "version": RESULT_VERSION,
                "status": self.status,
                "base": self.report.base,
                "track": self.report.to_json(),
                **({"note": self.note} if self.note else {}),
            }
        out = self.state.to_json()
        out["status"] = self.status
        if self.note:
            out["note"] = self.note
        return out


def _start(project: Project, report: TrackReport, target: TagInfo, work: WorkDir) -> RunState:
    """The state of the run for these inputs: resumed from ``work`` or new (``work`` cleared)."""
    key = RunKey(target.tag, target.commit, series_digest(project))
    prev = work.load_info()
    if prev is not None and prev.key != key:
        log.info(f"{work.path} holds a run for other inputs ({prev.key.text()}); starting over")
        prev = None
    if prev is None:
        if work.path.exists():
            shutil.rmtree(work.path)
        work.path.mkdir(parents=True)
        series = project.series
        prev = RunInfo(
            key=key,
            tag_version=target.version,
            base_tag=series.base.label,
            base_commit=series.base.commit,
            fork_name=series.fork.name,
            fork_url=series.fork.url,
            project=str(project.root),
            branch=bot_branch(project, target.tag),
            newer=report.newer,
            forkpatch_version=__version__,
        )
        work.save_info(prev)
    return RunState(info=prev, stages=work.load_stages())


def _warn_pending_edits(project: Project) -> None:
    """A run works on a copy of series.yaml and patches/ and never touches the editing
    work tree; what is edited there and not refreshed is not in what it rebases."""
    from forkpatch.stack import Stack, describe_changes

    stack = Stack(project)
    pending = stack.pending_edits()
    if pending:
        log.warn(
            f"the work tree {stack.worktree_path()} has uncommitted changes that are in no "
            f"patch: {describe_changes(pending)}; this run takes series.yaml and patches/ as "
            "they are, without them (the work tree is left as it is; `forkpatch refresh` "
            "writes them into the top patch)"
        )


def run(project: Project, opts: RunOptions) -> RunResult:
    """Act on the newest release (or ``opts.tag``): see the module docstring.

    Never raises for a stage that fails: the failure is recorded, the summary
    written, and the error returned in :attr:`RunResult.error` for the CLI.
    """
    for s in opts.steps:
        if s not in STEPS:
            raise UsageError(f"unknown step '{s}'", tip=f"steps: {', '.join(STEPS)}")
    _warn_pending_edits(project)
    report = list_releases(project)
    target = pick_tag(project, report, opts.tag) if opts.tag else report.target
    if target is None:
        log.info(f"up to date: no release newer than {report.base} to act on")
        return RunResult(status="up-to-date", report=report)
    root = out_root(project, opts.out_dir)
    prior = parse_state_marker(opts.proposed or "")
    key = RunKey(target.tag, target.commit, series_digest(project))
    if prior is not None and prior.key == key and prior.final:
        note = (
            f"the open change for {target.tag} already reports these inputs ({key.text()}): "
            f"{prior.status}; nothing to do"
        )
        log.info(note)
        return RunResult(status="unchanged", report=report, note=note)
    work = WorkDir(root / name_part(target.tag))
    state = _start(project, report, target, work)
    atomic_write(root / LATEST_FILE, (work.path.name + "\n").encode())
    ctx = RunContext(project=project, opts=opts, work=work, info=state.info)
    stages = state.stages
    error: ForkpatchError | None = None
    stopped: str | None = None
    try:
        for step in STEPS:
            if step not in opts.steps:
                continue
            if stopped is not None:
                # Results of an earlier run for these stages no longer hold.
                stages = stages.with_result(step, Skipped(_stop_reason(stopped, stages)))
                work.save_stage(step, stages.get(step))  # type: ignore[arg-type]
                continue
            outcome = ctx.run_stage(step, stages)
            if outcome.result is not None:
                stages = stages.with_result(step, outcome.result)
                work.save_stage(step, outcome.result)
            if outcome.error is not None:
                error = error or outcome.error
            if outcome.stop:
                stopped = step
    finally:
        state = RunState(info=state.info, stages=stages)
        work.save_views(state)
    return RunResult(
        status=state.status, report=report, state=state, work_dir=work.path, error=error
    )


def _stop_reason(stage: str, stages: Stages) -> str:
    result = stages.get(stage)
    if isinstance(result, RebaseConflict):
        return "the rebase conflicts"
    if isinstance(result, Skipped):
        return f"{stage} was skipped ({result.reason})"
    return f"the {stage} stage did not succeed"
