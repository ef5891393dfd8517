"""Each stage's work (rebase, build, smoke, publish) on a copy of the project, given
the typed results of the stages before it; and the options a run was asked for.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from forkpatch import log, proc
from forkpatch.errors import (
    BuildError,
    ConflictError,
    FetchError,
    ForkpatchError,
    SmokeError,
    UsageError,
)
from forkpatch.fetch import Fetcher
from forkpatch.fsutil import file_sha256
from forkpatch.kinds import BuildMode, SmokeDeps, Tier
from forkpatch.project import Project
from forkpatch.redact import strip_url_credentials
from forkpatch.series import PATCHES_DIR, SERIES_FILE, PatchEntry
from forkpatch.track.forecast import BranchForecast, ConflictEntry, forecast
from forkpatch.track.releases import version_of
from forkpatch.track.stages import (
    STEPS,
    BuildDone,
    Failed,
    PublishDone,
    RebaseConflict,
    RebaseDone,
    RunInfo,
    Skipped,
    SmokeRun,
    StageResult,
    Stages,
    series_digest,
)
from forkpatch.track.workdir import SUMMARY_FILE, WorkDir

if TYPE_CHECKING:
    from forkpatch.rebase.plan import Plan


@dataclass(frozen=True)
class RunOptions:
    """What `forkpatch track --run` was asked to do; built once by the CLI."""

    out_dir: Path | None = None
    tag: str | None = None  # act on this tag instead of the newest release
    steps: tuple[str, ...] = STEPS
    publish: bool = True
    publish_to: str | None = None
    allow_missing_tiers: tuple[str, ...] = ()
    base_wheel: str | None = None  # path, URL or template with {tag} / {version}
    build_mode: BuildMode | None = None
    smoke_tier: Tier = "sm70"
    smoke_deps: SmokeDeps | None = None
    smoke_python: str | None = None
    smoke_with: tuple[Path, ...] = ()  # extra wheels for the smoke environment
    forecast: bool = True
    proposed: str | None = None  # body of the open change for this release, if any


def runner_class() -> str:
    """What GPU this machine has, for smoke results: 'cpu' or 'cuda:<cap>,...'."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return "cpu"
    try:
        done = proc.run(
            [exe, "--query-gpu=compute_cap", "--format=csv,noheader"],
            split_stderr=True,
            timeout=30,
        )
    except OSError:
        return "cpu"
    out = "" if done.timed_out else done.output
    caps = sorted({c.strip() for c in out.splitlines() if c.strip()})
    return "cuda:" + ",".join(caps) if caps else "cpu"


# =========================================================================== stages


@dataclass(frozen=True)
class StageOutcome:
    """What one stage did: its result to record (None: nothing to record), whether the
    stages after it must not run, and the error for the CLI's exit code."""

    result: StageResult | None
    stop: bool = False
    error: ForkpatchError | None = None


def _failed(stage: str, exc: ForkpatchError, target: str | None = None) -> StageOutcome:
    log.error(f"{stage}: {exc.message}")
    return StageOutcome(Failed(exc.message, exc.tip, target), stop=True, error=exc)


def _out_of_order(exc: UsageError) -> StageOutcome:
    """Asked for a stage whose input is not here: say so, record nothing."""
    return StageOutcome(None, stop=True, error=exc)


class RunContext:
    """The project, the options and the work directory of one run; runs one stage at a
    time on the typed results so far and returns the new result (it keeps no state)."""

    def __init__(self, project: Project, opts: RunOptions, work: WorkDir, info: RunInfo) -> None:
        self.project = project
        self.opts = opts
        self.work = work
        self.info = info
        self._copy: Project | None = None

    @property
    def tag(self) -> str:
        return self.info.tag

    @property
    def dir(self) -> Path:
        return self.work.path

    def run_stage(self, stage: str, stages: Stages) -> StageOutcome:
        runner: Callable[[Stages], StageOutcome] = getattr(self, f"stage_{stage}")
        return runner(stages)

    def copy(self) -> Project:
        """The project as this run sees it: ``<work>/project`` (series.yaml + patches/).

        Its private store borrows the objects of the project's own store, so no
        second fetch of the fork happens and the copy works on any machine where
        the project can reach the fork.
        """
        if self._copy is None:
            dest = self.dir / "project"
            if not (dest / SERIES_FILE).is_file():
                if dest.exists():
                    shutil.rmtree(dest)
                (dest / PATCHES_DIR).mkdir(parents=True)
                shutil.copy2(self.project.series_path, dest / SERIES_FILE)
                if self.project.patches_dir.is_dir():
                    shutil.copytree(
                        self.project.patches_dir, dest / PATCHES_DIR, dirs_exist_ok=True
                    )
            self._copy = Project(root=dest, fork_override=str(self.project.fork().store.git_dir))
        return self._copy

    def prepare_store(self) -> None:
        """Make sure the project's store holds the base and the tag the copy will ask for."""
        fork = self.project.fork()
        series = self.project.series
        fork.verify_base(series.base.tag, series.base.commit)
        fork.resolve_tag(self.tag)

    # ---------------------------------------------------------------- rebase

    def stage_rebase(self, stages: Stages) -> StageOutcome:
        done = stages.rebase
        if (
            isinstance(done, (RebaseDone, RebaseConflict))
            and (self.dir / "project" / SERIES_FILE).is_file()
        ):
            log.info(f"rebase onto {self.tag}: already {done.status} (in {self.dir})")
            return StageOutcome(done, stop=isinstance(done, RebaseConflict))
        from forkpatch import rebase as rb

        fc = None
        if self.opts.forecast:
            with contextlib.suppress(ForkpatchError):
                fc = forecast(self.project)
        try:
            self.prepare_store()
            copy = self.copy()
            with log.step(f"forkpatch check --onto {self.tag}"):
                plan = rb.check(copy, rb.RebaseOptions(onto=self.tag))
            if not plan.ok:
                conflict = _conflict_stage(plan, fc)
                return StageOutcome(
                    conflict,
                    stop=True,
                    error=ConflictError(
                        f"the series does not rebase cleanly onto {self.tag}: patch "
                        f"'{conflict.conflict.patch}' conflicts",
                        tip=f"the summary in {self.dir / SUMMARY_FILE} says what to run locally",
                    ),
                )
            with log.step(f"forkpatch rebase --onto {self.tag}"), copy.locked("rebase"):
                result = rb.rebase(
                    copy, rb.RebaseOptions(onto=self.tag, report_dir=self.dir / "rebase")
                )
        except ConflictError as exc:  # check said clean but the rebase stopped: undo it
            with contextlib.suppress(ForkpatchError):
                rb.abort(self.copy())
            return _failed("rebase", exc)
        except ForkpatchError as exc:
            return _failed("rebase", exc)
        stem = result.report.file_stem
        return StageOutcome(
            RebaseDone(
                relation=result.plan.relation,
                note=result.plan.note,
                summary=result.report.summary,
                patches={o.name: o.status for o in result.plan.outcomes},
                changed_files=tuple(result.written),
                report_json=f"rebase/{stem}.json",
                report_markdown=f"rebase/{stem}.md",
                series_sha256=series_digest(copy),
                forecast=fc,
                upstream=_upstream(copy, self.project.series.patches),
            )
        )

    def _rebased(self, stage: str, stages: Stages) -> Project | StageOutcome:
        """The rebased copy, or the outcome to record when the rebase has not succeeded."""
        rebase = stages.rebase
        if rebase is None:
            return _out_of_order(
                UsageError(
                    f"cannot {stage}: no rebase onto {self.tag} in {self.dir}",
                    tip="run the rebase step first (`forkpatch track --run --steps rebase`) "
                    "and pass its output directory along (--out)",
                )
            )
        if not isinstance(rebase, RebaseDone):
            why = (
                "the rebase conflicts"
                if isinstance(rebase, RebaseConflict)
                else "the rebase failed"
            )
            return StageOutcome(Skipped(why), stop=True)
        copy = self.copy()
        if series_digest(copy) != rebase.series_sha256:
            exc = UsageError(
                f"{copy.root} was changed after the rebase", tip=f"remove {self.dir} and run again"
            )
            return StageOutcome(Failed(exc.message, exc.tip), stop=True, error=exc)
        return copy

    # ---------------------------------------------------------------- build

    def stage_build(self, stages: Stages) -> StageOutcome:
        copy = self._rebased("build", stages)
        if isinstance(copy, StageOutcome):
            return copy
        dist = self.dir / "dist"
        done = stages.build
        if isinstance(done, BuildDone) and _files_match(dist, done.wheels):
            log.info(f"build for {self.tag}: already done ({', '.join(done.wheels)})")
            return StageOutcome(done)
        from forkpatch.wheels.buildwheel import build_wheel
        from forkpatch.wheels.options import BuildOptions

        try:
            base_wheel = self.base_wheel(copy)
            self.prepare_store()
            if dist.exists():
                shutil.rmtree(dist)
            with copy.locked("build-wheel"):
                result = build_wheel(
                    copy,
                    BuildOptions(
                        mode=self.opts.build_mode or "auto", base_wheel=base_wheel, out_dir=dist
                    ),
                )
        except ForkpatchError as exc:
            return _failed("build", exc)
        return StageOutcome(
            BuildDone(
                mode=result.mode,
                reason=result.reason,
                version=result.version,
                wheels={w.name: result.sha256[w.name] for w in result.wheels},
                base_wheel=base_wheel.name if base_wheel else None,
                provenance=result.provenance.to_dict(),
            )
        )

    def base_wheel(self, copy: Project) -> Path | None:
        """``--base-wheel`` or build.base-wheel, with {tag}/{version} filled in; URLs fetched."""
        raw = self.opts.base_wheel or copy.series.build.base_wheel
        if not raw:
            return None
        from forkpatch.wheels.buildwheel import fill_base_wheel

        text = fill_base_wheel(raw, self.tag, version_of(self.tag))
        if re.match(r"^https?://", text):
            return _download(text, self.dir / "base-wheel")
        if text.startswith("file://"):
            text = urllib.parse.unquote(urllib.parse.urlsplit(text).path)
        path = Path(text).expanduser()
        if not path.is_absolute():
            path = self.project.root / path
        if not path.is_file():
            raise BuildError(
                f"the base wheel for {self.tag} is not there: {path} (from '{raw}')",
                tip="download the fork's released wheel for the tag there, or "
                "pass --base-wheel PATH|URL (may contain {tag} / {version})",
            )
        return path

    # ---------------------------------------------------------------- smoke

    def stage_smoke(self, stages: Stages) -> StageOutcome:
        build = stages.build
        if build is None:
            return _out_of_order(
                UsageError(
                    f"cannot smoke: no build for {self.tag} in {self.dir}",
                    tip="run the build step first and pass its output directory along (--out)",
                )
            )
        if not isinstance(build, BuildDone):
            return StageOutcome(Skipped("nothing was built"), stop=True)
        copy = self.copy()
        dist = self.dir / "dist"
        if not _files_match(dist, build.wheels):
            return _failed(
                "smoke",
                SmokeError(
                    f"the wheels in {dist} are not the ones the build made",
                    tip=f"remove {self.dir} and run again",
                ),
            )
        runner = runner_class()
        done = stages.smoke
        if (
            isinstance(done, SmokeRun)
            and done.status == "done"
            and done.wheels == build.wheels
            and done.tier == self.opts.smoke_tier
            and done.runner == runner
        ):
            log.info(f"smoke for {self.tag}: already done on this kind of runner ({runner})")
            return StageOutcome(done)
        return self._smoke(copy, build, runner)

    def _smoke(self, copy: Project, build: BuildDone, runner: str) -> StageOutcome:
        from forkpatch.smoke import SmokeOptions, run_smoke

        smoke_cfg = copy.series.smoke
        smoke_dir = self.dir / "smoke"
        smoke_dir.mkdir(exist_ok=True)
        report_path = smoke_dir / "report.json"
        wheels = tuple(self.dir / "dist" / name for name in build.wheels)
        try:
            outcome = run_smoke(
                SmokeOptions(
                    wheels=wheels + tuple(p.resolve() for p in self.opts.smoke_with),
                    tier=self.opts.smoke_tier,
                    deps=self.opts.smoke_deps or "system",
                    python=self.opts.smoke_python or smoke_cfg.python,
                    index_url=smoke_cfg.index_url,
                    report_path=report_path,
                    junit_path=smoke_dir / "junit.xml",
                    allow_missing_tiers=self.opts.allow_missing_tiers,
                ),
                copy,
            )
        except ForkpatchError as exc:
            return _failed("smoke", exc)
        rep = outcome.report
        failed = tuple(c.id for c in rep.failed())
        droppable = self._droppable(copy, build)
        result = SmokeRun(
            passed=outcome.passed,
            tier=self.opts.smoke_tier,
            runner=runner,
            wheels=dict(build.wheels),
            report="smoke/report.json",
            tiers=rep.statuses(),
            not_run=rep.not_run(),
            checks=rep.outcomes(),
            failed=failed,
            missing=dict(outcome.missing),
            droppable=droppable,
        )
        if outcome.passed and outcome.missing:
            return StageOutcome(result, stop=True, error=outcome.not_run_error())
        if outcome.passed:
            return StageOutcome(result)
        return StageOutcome(
            result,
            stop=True,
            error=SmokeError(
                f"{len(failed)} smoke check(s) failed: {', '.join(failed)}",
                tip=f"see {report_path}",
            ),
        )

    def _droppable(self, copy: Project, build: BuildDone) -> dict[str, dict[str, str]] | None:
        """The rebased series' drop-when conditions, evaluated on this runner (the same
        base wheel and smoke settings); None when the build had no base wheel."""
        from forkpatch.droppable import DroppableOptions, evaluate

        if build.base_wheel is None:
            return None
        try:
            base_wheel = self.base_wheel(copy)
            if base_wheel is None:
                return None
            with log.step(f"forkpatch droppable (the series on {self.tag})"):
                result = evaluate(
                    copy,
                    DroppableOptions(
                        base_wheel=base_wheel,
                        deps=self.opts.smoke_deps or "system",
                        python=self.opts.smoke_python,  # else series.yaml's (droppable's rule)
                    ),
                )
        except ForkpatchError as exc:
            log.warn(f"droppable could not be evaluated: {exc}")
            return None
        return {
            v.name: {"verdict": v.verdict, "evidence": v.evidence.splitlines()[0][:300]}
            for v in result.patches
        }

    # ---------------------------------------------------------------- publish

    def stage_publish(self, stages: Stages) -> StageOutcome:
        target = self.opts.publish_to or self.copy().series.publish.to
        if not self.opts.publish or not target:
            why = (
                "--no-publish"
                if not self.opts.publish
                else "no target (publish.to in series.yaml, or --publish-to)"
            )
            return StageOutcome(Skipped(why))
        smoke, build = stages.smoke, stages.build
        if smoke is None:
            return _out_of_order(
                UsageError(
                    f"cannot publish: no smoke result for {self.tag} in {self.dir}",
                    tip="run the smoke step first and pass its output directory along (--out)",
                )
            )
        if isinstance(smoke, SmokeRun) and smoke.status == "not-run":
            why = f"smoke tier(s) {', '.join(smoke.missing)} did not run"
            return StageOutcome(Skipped(why), stop=True)
        if not (isinstance(smoke, SmokeRun) and smoke.passed and isinstance(build, BuildDone)):
            return StageOutcome(Skipped("the smoke suite did not pass"), stop=True)
        target_text = _public_target(str(target))
        done = stages.publish
        if (
            isinstance(done, PublishDone)
            and done.target == target_text
            and done.wheels == build.wheels
        ):
            log.info(f"publish for {self.tag}: already done to {target_text}")
            return StageOutcome(done)
        return self._publish(str(target), build, smoke)

    def _publish(self, target: str, build: BuildDone, smoke: SmokeRun) -> StageOutcome:
        from forkpatch.publish import PublishOptions, check_uploader, publish

        target_text = _public_target(target)
        wheels = tuple(self.dir / "dist" / name for name in build.wheels)
        try:
            check_uploader(target)
            published = publish(
                PublishOptions(
                    wheels=wheels,
                    to=target,
                    allow_missing_tiers=self.opts.allow_missing_tiers,
                    reports=(self.dir / smoke.report,),
                ),
                self.copy(),
            )
        except ForkpatchError as exc:
            return _failed("publish", exc, target=target_text)
        return StageOutcome(
            PublishDone(
                target=target_text,
                wheels=dict(build.wheels),
                actions={p.file: p.action for p in published},
                allowed_missing_tiers=tuple(sorted({t for p in published for t in p.overrides})),
            )
        )


def _public_target(target: str) -> str:
    """The target without credentials (publish refuses them anyway; never echo them)."""
    parts = urllib.parse.urlsplit(target)
    if parts.password or parts.username:
        netloc = parts.hostname or ""
        if parts.port:
            netloc += f":{parts.port}"
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    return target


def _files_match(directory: Path, wheels: Mapping[str, str]) -> bool:
    return bool(wheels) and all(
        (directory / n).is_file() and file_sha256(directory / n) == s for n, s in wheels.items()
    )


# The base wheel: at most this large, downloaded within this time.
BASE_WHEEL_LIMIT = 8 << 30
BASE_WHEEL_DEADLINE_S = 1800.0


def _download(url: str, dest_dir: Path) -> Path:
    name = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])
    if not name.endswith(".whl"):
        raise BuildError(
            f"the base wheel URL {url} does not name a .whl file",
            tip="give the URL of the wheel itself",
        )
    dest = dest_dir / name
    if dest.is_file():
        return dest
    dest_dir.mkdir(parents=True, exist_ok=True)
    fetcher = Fetcher.for_command(
        "the download", request_s=BASE_WHEEL_DEADLINE_S, command_s=BASE_WHEEL_DEADLINE_S
    )
    with log.step(f"download the base wheel {strip_url_credentials(url)}"):
        try:
            fetcher.download(url, dest, limit=BASE_WHEEL_LIMIT)
        except FetchError as exc:
            raise BuildError(
                f"cannot download the base wheel: {exc.message}",
                tip="check the URL (build.base-wheel / --base-wheel) and the network",
            ) from None
    return dest


def _conflict_stage(plan: Plan, fc: BranchForecast | None) -> RebaseConflict:
    """The rebase stage's result for a plan that conflicts (``plan.ok`` is false)."""
    outcomes = plan.outcomes
    at = next(i for i, o in enumerate(outcomes) if o.status == "conflict")
    return RebaseConflict(
        relation=plan.relation,
        conflict=ConflictEntry.from_outcome(outcomes[at]),
        # Above the first conflict: forecast as if it were skipped (rebase.plan.Forecast).
        blocked=tuple(o.name for o in outcomes[at + 1 :]),
        patches={o.name: o.status for o in outcomes},
        forecast=fc,
    )


def _upstream(copy: Project, entries: Sequence[PatchEntry]) -> dict[str, dict[str, str]] | None:
    """The patches' upstream states (the forge asked now, or the last known answer)."""
    from forkpatch.upstream_status import upstream_states

    try:
        states = upstream_states(copy, entries)
    except ForkpatchError as exc:
        log.warn(f"upstream states not known: {exc}")
        return None
    keep = ("state", "url", "release", "reason")
    return {n: {k: str(v) for k, v in a.to_json().items() if k in keep} for n, a in states.items()}
