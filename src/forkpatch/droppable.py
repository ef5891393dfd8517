"""``forkpatch droppable``: which patches the series no longer needs, on evidence.

For each patch the command evaluates its ``drop-when`` conditions at a target (the
series' base, or ``--onto REF`` after an in-memory rebase there):

- ``upstreamed: true`` holds when the rebase classifier finds the patch already in
  the target (its ``upstreamed`` status, with the classifier's evidence);
- ``passes-without: [checks]`` holds when those smoke checks pass on the series at
  the target *without* the patch: built in memory (an overlay wheel from the base
  wheel of the target, in a scratch copy of the project) and smoked in a fresh
  environment with every tier the machine has.

The patch's own ``smoke:`` checks are run on the series with and without it: one
that passes with the patch and fails without it proves the patch is needed,
whatever ``drop-when`` says. Verdicts: ``droppable`` (every declared condition
holds), ``needed`` (a condition fails: which check, how), ``not-evaluated`` (what
is missing: a tier this machine does not have, a base wheel, a condition in words
only). Never a guess: a check that could not run decides nothing.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forkpatch import log
from forkpatch.errors import ForkpatchError, UsageError
from forkpatch.project import Project
from forkpatch.series import PatchEntry, Series

DROPPABLE, NEEDED, NOT_EVALUATED = "droppable", "needed", "not-evaluated"
VERDICTS = (DROPPABLE, NEEDED, NOT_EVALUATED)
_FAILS = ("failed", "error")


@dataclass(frozen=True)
class DroppableOptions:
    """What ``forkpatch droppable`` was asked to do."""

    names: tuple[str, ...] = ()  # empty: every patch
    onto: str | None = None  # None: the series' base
    base_wheel: Path | None = None  # the fork's wheel for the target (default: build.base-wheel)
    deps: str = "system"
    python: str | None = None
    index_url: str | None = None
    timeout_s: float = 3600.0  # per smoke run


@dataclass(frozen=True)
class Verdict:
    """One patch's answer, with the facts it rests on."""

    name: str
    verdict: str  # see VERDICTS
    evidence: str
    condition: str = ""  # drop-when's text
    upstream_status: str | None = None  # the patch's status at the target (the rebase's)
    without: dict[str, str] = field(default_factory=dict)  # check -> outcome without the patch
    with_patch: dict[str, str] = field(default_factory=dict)  # check -> outcome with it
    missing: tuple[str, ...] = ()  # what was missing for a verdict (not-evaluated)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "verdict": self.verdict,
            "evidence": self.evidence,
        }
        if self.condition:
            out["condition"] = self.condition
        if self.upstream_status is not None:
            out["status_at_target"] = self.upstream_status
        if self.without:
            out["checks_without_patch"] = self.without
        if self.with_patch:
            out["checks_with_patch"] = self.with_patch
        if self.missing:
            out["missing"] = list(self.missing)
        return out


@dataclass(frozen=True)
class DroppableResult:
    base: str
    target: str
    target_commit: str
    patches: tuple[Verdict, ...]
    builds: int = 0
    smokes: int = 0
    seconds: float = 0.0

    @property
    def droppable(self) -> list[str]:
        return [v.name for v in self.patches if v.verdict == DROPPABLE]

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "forkpatch-droppable",
            "base": self.base,
            "target": self.target,
            "target_commit": self.target_commit,
            "patches": [v.to_json() for v in self.patches],
            "droppable": self.droppable,
            "builds": self.builds,
            "smokes": self.smokes,
            "seconds": round(self.seconds, 3),
        }


@dataclass
class _Run:
    """A smoke of one variant of the series: check id -> (outcome, detail)."""

    checks: dict[str, tuple[str, str]] = field(default_factory=dict)
    failure: str | None = None  # why the variant could not be built or smoked
    #: a patch above the dropped one that needs its lines (only the patches below ran)
    blocked_by: str | None = None

    @property
    def without_words(self) -> str:
        if self.blocked_by is None:
            return "without it"
        return f"on the patches below it (without it: '{self.blocked_by}' builds on its lines)"

    def outcomes(self, ids: Sequence[str]) -> dict[str, str]:
        return {c: self.checks[c][0] for c in ids if c in self.checks}


def _gist(detail: str) -> str:
    lines = [ln.strip() for ln in detail.splitlines() if ln.strip()]
    if not lines:
        return "no detail"
    return lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"


class _Evaluator:
    def __init__(self, project: Project, opts: DroppableOptions, work: Path) -> None:
        from forkpatch.smoke.scratch import ScratchBuilds

        self.project = project
        self.opts = opts
        self.scratch = ScratchBuilds(project, work)
        self._series: Series | None = None
        self.smokes = 0

    def target_series(self, dropped: str | None) -> tuple[Series, str | None]:
        """The series at the target (the project's on its base, else rebased in the
        copy, once), without the patch ``dropped`` when one is named; and the patch
        above it that builds on its lines, when there is one (then only the patches
        below it are kept: that patch cannot stay without it)."""
        from forkpatch.smoke.scratch import BuildsOnIt

        if self._series is None:
            onto = self.opts.onto
            self._series = self.project.series if onto is None else self.scratch.rebase(onto)
        if dropped is None:
            return self._series, None
        try:
            return self.scratch.without(self._series, dropped), None
        except BuildsOnIt as exc:
            log.warn(f"{exc}: evaluating it on the patches below it")
            return self.scratch.below(self._series, dropped), exc.patch

    def smoke(self, dropped: str | None, base_wheel: Path, label: str, checks: list[str]) -> _Run:
        from forkpatch.smoke.runner import SmokeOptions, run_smoke

        run = _Run()
        try:
            series, run.blocked_by = self.target_series(dropped)
            scratch, wheel = self.scratch.build(series, base_wheel, label)
            with log.step(f"smoke the series {label}: {', '.join(checks)}"):
                outcome = run_smoke(
                    SmokeOptions(
                        wheels=(wheel,),
                        tier="sm70",  # every tier: those this machine lacks report not-run
                        deps=self.opts.deps,
                        python=self.opts.python,
                        index_url=self.opts.index_url,
                        timeout_s=self.opts.timeout_s,
                        checks=tuple(checks),
                        checks_root=self.project.root,  # the team's checks' files
                    ),
                    scratch,
                )
            self.smokes += 1
        except ForkpatchError as exc:
            run.failure = f"{exc}"
            log.warn(f"the series {label} could not be built and smoked: {exc}")
            return run
        for c in outcome.report.checks:
            run.checks[c.id] = (c.outcome, c.detail)
        return run


def _resolve_base_wheel(project: Project, opts: DroppableOptions, target: str) -> Path | str:
    """The base wheel for ``target``, or why there is none."""
    series = project.series
    given = opts.base_wheel
    if given is None and series.build.base_wheel:
        if target != series.base.tag:
            return (
                f"no wheel of {target}: build.base-wheel is the fork's {series.base.tag} wheel "
                f"(pass --base-wheel with the fork's {target} wheel)"
            )
        given = Path(series.build.base_wheel)
        if not given.is_absolute():
            given = project.root / given
    if given is None:
        return f"no base wheel of {target} (pass --base-wheel or set build.base-wheel)"
    if not given.is_file():
        raise UsageError(
            f"base wheel {given} does not exist",
            tip=f"download the fork's release wheel for {target}",
        )
    return given.resolve()


def _pick(series: Series, names: Sequence[str]) -> list[PatchEntry]:
    if not names:
        return list(series.patches)
    return [series.get(n) for n in dict.fromkeys(names)]


def evaluate(project: Project, opts: DroppableOptions) -> DroppableResult:
    """Evaluate the patches' drop-when conditions (see the module doc)."""
    from forkpatch.rebase import Target, classify
    from forkpatch.smoke import checks as registry

    t0 = time.monotonic()
    series = project.series
    registry.validate_series(series, path=project.rel(project.series_path))
    chosen = _pick(series, opts.names)
    fork = project.fork()
    if opts.onto is None:
        target = Target(series.base.tag, series.base.commit)
        fork.require_commit(series.base.commit, f"series.yaml's base ({series.base.tag})")
    else:
        from forkpatch.rebase.plan import check_target

        target = check_target(project, opts.onto).target  # a tag, a branch, a commit id
    with log.step(f"classify the series on {target.name} in memory"):
        plan = classify(project, target)
    status = {o.name: o for o in plan.outcomes}
    upstreamed = {n for n, o in status.items() if o.status == "upstreamed"}
    conflicts = [n for n, o in status.items() if o.status == "conflict"]
    base_wheel = _resolve_base_wheel(project, opts, target.name)

    verdicts: list[Verdict] = []
    # The checks each patch needs run on the series without it; its own checks also
    # run once on the whole series (at the target), for the comparison.
    needs_build = {
        e.name: [*dict.fromkeys([*e.drop_when_passes_without, *e.smoke])]
        for e in chosen
        if e.name not in upstreamed and (e.drop_when_passes_without or e.smoke)
    }
    build_block = None
    if needs_build and conflicts:
        build_block = (
            f"patch(es) {', '.join(conflicts)} conflict on {target.name}: the series "
            "cannot be built there (`forkpatch check --onto` says where)"
        )
    elif needs_build and isinstance(base_wheel, str):
        build_block = base_wheel
    with tempfile.TemporaryDirectory(prefix="forkpatch-droppable-") as tmp:
        ev = _Evaluator(project, opts, Path(tmp))
        full: _Run | None = None
        if needs_build and build_block is None:
            assert isinstance(base_wheel, Path)
            own = [*dict.fromkeys(c for e in chosen if e.name in needs_build for c in e.smoke)]
            if own:
                full = ev.smoke(None, base_wheel, "with every patch", own)
        for entry in chosen:
            st = status.get(entry.name)
            if entry.name in upstreamed or entry.name not in needs_build:
                verdicts.append(_without_build(entry, st.status if st else None, st, target.name))
                continue
            if build_block is not None:
                verdicts.append(
                    _verdict(
                        entry,
                        NOT_EVALUATED,
                        f"{target.name}: {build_block}",
                        st,
                        missing=("build",),
                    )
                )
                continue
            assert isinstance(base_wheel, Path)
            without = ev.smoke(
                entry.name,
                base_wheel,
                f"without {entry.name}",
                needs_build[entry.name],
            )
            verdicts.append(_with_checks(entry, st, target.name, full, without))
        builds = ev.scratch.builds
        smokes = ev.smokes
    return DroppableResult(
        base=series.base.tag,
        target=target.name,
        target_commit=target.commit,
        patches=tuple(verdicts),
        builds=builds,
        smokes=smokes,
        seconds=time.monotonic() - t0,
    )


def _verdict(
    entry: PatchEntry,
    verdict: str,
    evidence: str,
    outcome: Any,
    *,
    without: dict[str, str] | None = None,
    with_patch: dict[str, str] | None = None,
    missing: tuple[str, ...] = (),
) -> Verdict:
    return Verdict(
        name=entry.name,
        verdict=verdict,
        evidence=evidence,
        condition=entry.drop_when,
        upstream_status=outcome.status if outcome is not None else None,
        without=without or {},
        with_patch=with_patch or {},
        missing=missing,
    )


def _upstream_fact(entry: PatchEntry, status: str | None, outcome: Any, target: str) -> str:
    if status == "upstreamed":
        why = f": {outcome.evidence}" if outcome is not None and outcome.evidence else ""
        return f"upstreamed at {target}{why}"
    if status == "conflict":
        return f"conflicts on {target}: whether it is upstream there is not known until resolved"
    return f"still a change on {target} (it applies there: {status}), so not upstream"


def _without_build(entry: PatchEntry, status: str | None, outcome: Any, target: str) -> Verdict:
    """A patch decided without a build: upstreamed at the target, or nothing to run."""
    if status == "upstreamed":
        # Already in the target: the series without it is the series with it, so its
        # passes-without checks are its checks on the target itself; dropping it
        # changes nothing whatever drop-when says.
        return _verdict(entry, DROPPABLE, _upstream_fact(entry, status, outcome, target), outcome)
    if entry.drop_when_upstreamed:
        verdict = NOT_EVALUATED if status == "conflict" else NEEDED
        return _verdict(
            entry,
            verdict,
            _upstream_fact(entry, status, outcome, target),
            outcome,
            missing=("resolution",) if status == "conflict" else (),
        )
    what = (
        f"drop-when is text only ({entry.drop_when!r})"
        if entry.drop_when
        else "no drop-when condition"
    )
    return _verdict(
        entry,
        NOT_EVALUATED,
        f"{what} and the patch names no smoke checks: nothing to evaluate (give drop-when "
        "passes-without or upstreamed)",
        outcome,
        missing=("condition",),
    )


def _with_checks(
    entry: PatchEntry, outcome: Any, target: str, full: _Run | None, without: _Run
) -> Verdict:
    ids = [*dict.fromkeys([*entry.drop_when_passes_without, *entry.smoke])]
    got = without.outcomes(ids)
    had = full.outcomes(entry.smoke) if full is not None else {}
    if without.failure is not None:
        return _verdict(
            entry,
            NOT_EVALUATED,
            f"the series without it on {target} could not be built or smoked: {without.failure}",
            outcome,
            missing=("build",),
        )
    # 1. Its own checks: passing with the patch and failing without it is proof.
    for cid in entry.smoke:
        if got.get(cid) in _FAILS and had.get(cid) == "passed":
            return _verdict(
                entry,
                NEEDED,
                f"{cid} passes with the patch and {got[cid]} {without.without_words} on "
                f"{target}: {_gist(without.checks[cid][1])}",
                outcome,
                without=got,
                with_patch=had,
            )
    # 2. The declared conditions: each must hold.
    if entry.drop_when_upstreamed:
        return _verdict(
            entry,
            NOT_EVALUATED if outcome is not None and outcome.status == "conflict" else NEEDED,
            _upstream_fact(entry, outcome.status if outcome else None, outcome, target),
            outcome,
            without=got,
            with_patch=had,
        )
    cond = entry.drop_when_passes_without
    if not cond:
        return _verdict(
            entry,
            NOT_EVALUATED,
            "its smoke checks do not tell it is needed ("
            + ", ".join(f"{c}: {had.get(c, '?')} with, {got.get(c, '?')} without" for c in ids)
            + "), and drop-when is text only: nothing says it may go",
            outcome,
            without=got,
            with_patch=had,
            missing=("condition",),
        )
    failed = [c for c in cond if got.get(c) in _FAILS]
    if failed:
        c = failed[0]
        return _verdict(
            entry,
            NEEDED,
            f"{c} {got[c]} {without.without_words} on {target}: {_gist(without.checks[c][1])}",
            outcome,
            without=got,
            with_patch=had,
        )
    not_run = [c for c in cond if got.get(c) != "passed"]
    if not_run:
        reasons = "; ".join(
            f"{c} (tier {c.partition('.')[0]}) not run: {_gist(without.checks.get(c, ('', '?'))[1])}"
            for c in not_run
        )
        return _verdict(
            entry,
            NOT_EVALUATED,
            reasons,
            outcome,
            without=got,
            with_patch=had,
            missing=tuple(dict.fromkeys(f"tier {c.partition('.')[0]}" for c in not_run)),
        )
    if without.blocked_by is not None:
        return _verdict(
            entry,
            NOT_EVALUATED,
            f"{', '.join(cond)} pass(es) {without.without_words} on {target}, but it cannot "
            f"be dropped alone: drop or rework '{without.blocked_by}' with it",
            outcome,
            without=got,
            with_patch=had,
            missing=(f"rework of {without.blocked_by}",),
        )
    return _verdict(
        entry,
        DROPPABLE,
        f"{', '.join(cond)} pass(es) without the patch on {target}",
        outcome,
        without=got,
        with_patch=had,
    )


def print_result(result: DroppableResult, emit: Callable[[str], None] = log.result) -> None:
    """The verdicts: the command's result, on stdout (on stderr beside --json)."""
    emit(
        f"droppable at {result.target} (series based on {result.base}; "
        f"{result.builds} build(s), {result.smokes} smoke(s), {result.seconds:.1f}s)"
    )
    width = max((len(v.name) for v in result.patches), default=10)
    for v in result.patches:
        emit(f"  {v.verdict:<13} {v.name:<{width}}  {v.evidence.splitlines()[0]}")
