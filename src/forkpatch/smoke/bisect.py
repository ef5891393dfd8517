"""``forkpatch smoke --bisect``: find the first patch whose addition makes a check fail.

1. Find the failing checks: smoke the given wheel (its provenance must name
   exactly the current series), or build the whole series with the overlay
   path and smoke that.
2. Build and smoke the empty prefix (the base wheel plus the build steps such
   as ``vllm-dist-info``, which are not diffs and so belong to every prefix).
   A check that fails there "fails without any patch" and is not bisected.
3. Binary search over the prefixes of the series' diff patches, each built
   with the overlay path (seconds) in a scratch copy of the project whose
   series.yaml is truncated to the prefix, and smoked with only the checks
   still being bisected: about log2(n) builds.

When the checks fail for different patches the search goes on above the first
culprit for the checks that still passed there, so every failing check gets
its own first bad patch. Like ``git bisect`` this assumes a check, once broken
by a patch, stays broken by the patches above it.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from forkpatch import log
from forkpatch.errors import SmokeError, UsageError
from forkpatch.kinds import BisectStatus, CheckOutcome, Tier
from forkpatch.project import Project
from forkpatch.series import SERIES_FILE, PatchEntry, Series
from forkpatch.smoke.checks import tiers_up_to
from forkpatch.smoke.report import ERROR, FAILED, NOT_RUN, CheckResult, SmokeReport
from forkpatch.smoke.runner import SmokeOptions, run_smoke
from forkpatch.smoke.scratch import ScratchBuilds
from forkpatch.smoke.wheelinfo import wheel_vs_series
from forkpatch.wheels.wheelinfo import read_wheel

FOUND: Final = "found"
NOTHING: Final = "nothing-to-bisect"
FAILS_WITHOUT_PATCHES: Final = "fails-without-patches"
NOT_REPRODUCED: Final = "not-reproduced"


@dataclass(frozen=True)
class BisectOptions:
    """What ``forkpatch smoke --bisect`` was asked to do."""

    target: Path | None = None  # a wheel, a series.yaml or a project dir (None: the project)
    base_wheel: Path | None = None  # default: series build.base-wheel
    tier: Tier = "sm70"
    deps: str = "system"
    python: str | None = None
    index_url: str | None = None
    timeout_s: float = 3600.0  # per smoke run
    keep_env: bool = False


@dataclass(frozen=True)
class Probe:
    """One prefix built and smoked (prefix = how many of the series' diff patches)."""

    prefix: int
    patches: list[str]
    outcomes: dict[str, CheckOutcome]  # check id -> outcome
    details: dict[str, str]
    wheel: str | None = None
    seconds: float = 0.0

    def failed(self, checks: Sequence[str]) -> list[str]:
        return [c for c in checks if self.outcomes.get(c) in (FAILED, ERROR)]

    def to_json(self) -> dict[str, Any]:
        return {
            "prefix": self.prefix,
            "patches": self.patches,
            "wheel": self.wheel,
            "checks": self.outcomes,
            "seconds": round(self.seconds, 3),
        }


@dataclass(frozen=True)
class Culprit:
    """The first patch whose addition makes ``checks`` fail."""

    patch: str
    position: int  # 1-based, in series.yaml order (build steps included)
    checks: list[str]
    details: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        return {
            "patch": self.patch,
            "position": self.position,
            "checks": self.checks,
            "details": self.details,
        }


@dataclass
class BisectResult:
    status: BisectStatus
    target: str
    series_patches: list[str]
    failing: dict[str, str]  # on the full series: check id -> detail
    culprits: list[Culprit] = field(default_factory=list)
    without_patches: dict[str, str] = field(default_factory=dict)
    not_reproduced: list[str] = field(default_factory=list)
    probes: list[Probe] = field(default_factory=list)
    builds: int = 0
    smokes: int = 0
    seconds: float = 0.0
    #: the stored smoke report of the wheel whose failing checks were used (None: smoked)
    reused_report: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "forkpatch-smoke-bisect",
            "status": self.status,
            "target": self.target,
            "series": self.series_patches,
            "failing": self.failing,
            "first_bad": [c.to_json() for c in self.culprits],
            "fails_without_patches": self.without_patches,
            "not_reproduced": self.not_reproduced,
            "builds": self.builds,
            "smokes": self.smokes,
            "reused_report": self.reused_report,
            "probes": [p.to_json() for p in self.probes],
            "seconds": round(self.seconds, 3),
        }


def _failed(checks: Iterable[CheckResult]) -> dict[str, str]:
    return {c.id: c.detail for c in checks if c.outcome in (FAILED, ERROR)}


def _stored_report(
    project: Project, wheel: Path, opts: BisectOptions
) -> tuple[Path, SmokeReport] | None:
    """The smoke report already written for this wheel's exact sha256 (the project's
    store, its ``.latest.json``, then beside the wheel) that ran at least the tiers
    asked for, with the same kind of dependencies: its failing checks are the ones to
    bisect, and the wheel need not be smoked again."""
    from forkpatch.smoke.report import beside_wheel, read_report, store_path

    sha = read_wheel(wheel).sha256
    main = store_path(project.root, sha)
    want = set(tiers_up_to(opts.tier))
    for path in (main.with_name(f"{sha}.latest.json"), main, beside_wheel(wheel)):
        if not path.is_file():
            continue
        try:
            report = read_report(path)
        except SmokeError as exc:
            log.warn(f"bisect: not using {path}: {exc.message}")
            continue
        deps = report.deps
        if (
            sha not in report.sha256s
            or not want <= set(report.requested_tiers)
            or deps != opts.deps
        ):
            continue
        log.info(
            f"bisect: {wheel.name} (sha256 {sha[:16]}…) was smoked on "
            f"{report.started or '?'} (tiers {', '.join(report.requested_tiers)}, deps "
            f"{deps}): its failing checks are taken from {path}, no smoke run needed"
        )
        return path, report
    return None


def _resolve(
    opts: BisectOptions, project: Project | None, fork_override: str | None
) -> tuple[Project, Path | None]:
    """The project whose series is bisected, and the wheel to start from (None: build it)."""
    target = opts.target
    if target is not None and target.suffix == ".whl":
        if project is None:
            raise UsageError(
                f"no {SERIES_FILE} here: bisecting {target.name} needs the project "
                "whose series built it",
                tip="run it in that project or pass -C PROJECT",
            )
        return project, target
    if target is not None:
        root = target if target.is_dir() else target.parent
        if not (root / SERIES_FILE).is_file():
            raise UsageError(
                f"{target} is neither a wheel nor a project with a {SERIES_FILE}",
                tip="forkpatch smoke --bisect dist/1cat_vllm-*.whl | series.yaml",
            )
        return Project(root=root.resolve(), fork_override=fork_override), None
    if project is None:
        raise UsageError(
            f"nothing to bisect: no wheel given and no {SERIES_FILE} here",
            tip="forkpatch smoke --bisect WHEEL|series.yaml (or -C PROJECT)",
        )
    return project, None


class _Prefixes:
    """Builds and smokes prefixes of the series in a scratch copy of the project."""

    def __init__(
        self,
        project: Project,
        base_wheel: Path,
        opts: BisectOptions,
        work: Path,
        result: BisectResult,
    ) -> None:
        self.project = project
        self.series: Series = project.series
        self.diff_positions = [i for i, e in enumerate(self.series.patches) if e.is_diff]
        self.base_wheel = base_wheel
        self.opts = opts
        self.work = work
        self.result = result
        self.cache: dict[int, Probe] = {}
        # The scratch project borrows the real project's object store, which holds
        # the base commit (verified here).
        project.fork().verify_base(self.series.base.tag, self.series.base.commit)
        self.scratch = ScratchBuilds(project, work)

    @property
    def n(self) -> int:
        return len(self.diff_positions)

    def entries(self, k: int) -> list[PatchEntry]:
        keep = set(self.diff_positions[:k])
        return [e for i, e in enumerate(self.series.patches) if not e.is_diff or i in keep]

    def patch_at(self, k: int) -> tuple[PatchEntry, int]:
        """The k-th diff patch (1-based) and its position in series.yaml."""
        pos = self.diff_positions[k - 1]
        return self.series.patches[pos], pos + 1

    def probe(self, k: int, checks: Sequence[str]) -> Probe:
        """Build prefix ``k`` and smoke it with ``checks`` (empty: the full plan); cached."""
        got = self.cache.get(k)
        if got is not None and checks and all(c in got.outcomes for c in checks):
            return got
        t0 = time.monotonic()
        entries = self.entries(k)
        scratch, wheel = self.scratch.build(
            self.series.with_patches(entries), self.base_wheel, str(k)
        )
        self.result.builds += 1
        outcome = run_smoke(
            SmokeOptions(
                wheels=(wheel,),
                tier=self.opts.tier,
                deps=self.opts.deps,
                python=self.opts.python,
                index_url=self.opts.index_url,
                keep_env=self.opts.keep_env,
                timeout_s=self.opts.timeout_s,
                checks=tuple(checks),
                # the team's own checks run where their files are: the real project
                checks_root=self.project.root,
            ),
            scratch,
        )
        self.result.smokes += 1
        report = outcome.report
        probe = Probe(
            prefix=k,
            patches=[e.name for e in entries],
            outcomes=report.outcomes(),
            details={c.id: c.detail for c in report.checks},
            wheel=wheel.name,
            seconds=time.monotonic() - t0,
        )
        if got is not None:  # keep what an earlier smoke of this prefix learnt
            probe = replace(
                probe,
                outcomes={**got.outcomes, **probe.outcomes},
                details={**got.details, **probe.details},
            )
        self.cache[k] = probe
        self.result.probes.append(probe)
        for c in checks:
            if probe.outcomes.get(c) == NOT_RUN:
                log.warn(
                    f"{c} could not run on prefix {self._label(k)} "
                    f"({probe.details.get(c, '')}): counted as not failing there"
                )
        failed = probe.failed(list(probe.outcomes))
        log.info(
            f"bisect: prefix {self._label(k)}: "
            + (f"fails {', '.join(failed)}" if failed else "passes")
            + f" ({probe.seconds:.1f}s)"
        )
        return probe

    def _label(self, k: int) -> str:
        return "(no patches)" if k == 0 else f"1..{k}"


def bisect(
    opts: BisectOptions, project: Project | None = None, *, fork_override: str | None = None
) -> BisectResult:
    """Find the first patch whose addition makes a smoke check fail (see the module doc).

    Raises SmokeError/UsageError when it cannot run; a bisect that ran returns its
    result whatever it found.
    """
    t0 = time.monotonic()
    project, wheel = _resolve(opts, project, fork_override)
    series = project.series
    base_wheel = opts.base_wheel or (
        Path(series.build.base_wheel) if series.build.base_wheel else None
    )
    if base_wheel is None:
        raise UsageError(
            "bisecting builds the series' prefixes with the overlay path, which "
            f"needs the fork's released wheel for {series.base.label}",
            tip="pass --base-wheel PATH or set build.base-wheel in series.yaml",
        )
    if not base_wheel.is_absolute():
        base_wheel = project.root / base_wheel if opts.base_wheel is None else base_wheel.resolve()
    if not base_wheel.is_file():
        raise UsageError(
            f"base wheel {base_wheel} does not exist",
            tip="download the fork's release wheel for the base tag",
        )
    result = BisectResult(
        status=NOTHING,
        target=str(wheel or project.series_path),
        series_patches=series.names(),
        failing={},
    )

    if wheel is not None:
        prov = read_wheel(wheel).provenance
        if prov is None:
            raise SmokeError(
                f"{wheel.name} has no forkpatch provenance: which patches it holds is unknown",
                tip="bisect the series instead: forkpatch smoke --bisect series.yaml",
            )
        diffs = wheel_vs_series(prov, project)
        if diffs:
            raise SmokeError(
                f"{wheel.name} was not built from the series in "
                f"{project.rel(project.series_path)}: " + "; ".join(diffs),
                tip="run the bisect in the project (and at the version of "
                "patches/) that built the wheel, or bisect the series itself: "
                "forkpatch smoke --bisect series.yaml",
            )

    with tempfile.TemporaryDirectory(prefix="forkpatch-bisect-") as tmp:
        px = _Prefixes(project, base_wheel, opts, Path(tmp), result)
        n = px.n
        # ---- 1. the failing checks on the full series
        stored = _stored_report(project, wheel, opts) if wheel is not None else None
        if stored is not None:
            result.reused_report = str(stored[0])
            result.failing = _failed(stored[1].checks)
            full_checked = False
        elif wheel is not None:
            log.info(f"bisect: smoking {wheel.name} to find the failing checks")
            outcome = run_smoke(
                SmokeOptions(
                    wheels=(wheel,),
                    tier=opts.tier,
                    deps=opts.deps,
                    python=opts.python,
                    index_url=opts.index_url,
                    keep_env=opts.keep_env,
                    timeout_s=opts.timeout_s,
                ),
                project,
            )
            result.smokes += 1
            result.failing = _failed(outcome.report.checks)
            full_checked = False  # the overlay build of the full series is not smoked yet
        else:
            log.info(
                f"bisect: building and smoking the whole series ({n} patch(es)) to find "
                "the failing checks"
            )
            full = px.probe(n, ())
            result.failing = {c: full.details[c] for c in full.failed(list(full.outcomes))}
            full_checked = True
        if not result.failing:
            result.seconds = time.monotonic() - t0
            return result
        log.info(f"bisect: failing on the full series: {', '.join(result.failing)}")

        # ---- 2. the empty prefix (base wheel + build steps)
        log.info(
            f"bisect: {n} patch(es) left, testing the empty prefix (base wheel and build "
            "steps only) ..."
        )
        empty = px.probe(0, list(result.failing))
        result.without_patches = {c: empty.details[c] for c in empty.failed(list(result.failing))}
        remaining = [c for c in result.failing if c not in result.without_patches]

        # ---- 3. binary search, once per group of checks that share a first bad patch
        lo = 0
        while remaining:
            hi = n
            while hi - lo > 1:
                mid = (lo + hi) // 2
                log.info(
                    f"bisect: {hi - lo} patches left, testing prefix 1..{mid} "
                    f"(up to '{px.patch_at(mid)[0].name}') ..."
                )
                if px.probe(mid, remaining).failed(remaining):
                    hi = mid
                else:
                    lo = mid
            if hi == n and not full_checked:
                log.info(
                    f"bisect: testing the whole series (1..{n}) built with the overlay path ..."
                )
            probe = px.probe(hi, remaining)
            bad = probe.failed(remaining)
            if not bad:
                result.not_reproduced = remaining
                break
            entry, position = px.patch_at(hi)
            result.culprits.append(
                Culprit(
                    patch=entry.name,
                    position=position,
                    checks=bad,
                    details={c: probe.details[c] for c in bad},
                )
            )
            remaining = [c for c in remaining if c not in bad]
            lo = hi
    if result.culprits:
        result.status = FOUND
    elif result.without_patches:
        result.status = FAILS_WITHOUT_PATCHES
    else:
        result.status = NOT_REPRODUCED
    result.seconds = time.monotonic() - t0
    return result


def _gist(detail: str) -> str:
    """A check's detail on one line: its first line, and its last when that says more
    (a traceback's last line is the error)."""
    lines = [ln.strip() for ln in detail.splitlines() if ln.strip()]
    if len(lines) > 1:
        return f"{lines[0]} ... {lines[-1]}"
    return lines[0] if lines else ""


def print_result(result: BisectResult, emit: Callable[[str], None] = log.result) -> None:
    """The verdict through ``emit`` (stdout: it is the command's result; stderr under
    --json, whose document stdout holds alone), then how long it took, on stderr."""
    if result.status == NOTHING:
        emit(f"bisect: nothing to bisect: no smoke check fails on {Path(result.target).name}")
    for c in result.culprits:
        emit(
            f"bisect: first bad patch: '{c.patch}' (#{c.position} in series.yaml) makes "
            f"{', '.join(c.checks)} fail"
        )
        for cid, detail in c.details.items():
            emit(f"    {cid}: {_gist(detail)}")
    if result.without_patches:
        emit(
            "bisect: fails without any patch (base wheel and build steps only): "
            + ", ".join(result.without_patches)
        )
        for cid, detail in result.without_patches.items():
            emit(f"    {cid}: {_gist(detail)}")
    if result.not_reproduced:
        emit(
            f"bisect: {', '.join(result.not_reproduced)} failed on {Path(result.target).name} "
            "but not on the same series built with the overlay path: the failure comes from "
            "the wheel's build, not from a patch"
        )
    log.info(
        f"bisect: {result.builds} build(s), {result.smokes} smoke run(s) in {result.seconds:.1f}s"
    )
